package main

// TLS on both sides of the gateway (docs/api.md, "HTTP/JSON"; docs/security.md): HTTPS for its
// clients (--tls-cert, --tls-key) and TLS or mutual TLS to steady-server (--upstream-ca, with
// --upstream-cert and --upstream-key). Every file is read at start, so a bad one stops the gateway
// with its name instead of failing the first call.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// tlsFlags are the command line's TLS files and names; empty: not given.
type tlsFlags struct {
	cert, key                      string // --tls-cert, --tls-key: serve HTTPS
	upstreamCA, upstreamServerName string // --upstream-ca, --upstream-server-name
	upstreamCert, upstreamKey      string // --upstream-cert, --upstream-key: mutual TLS
}

// check refuses flags that make no sense together: a half-given pair, or an upstream TLS flag
// without --upstream-ca (without it the upstream is plaintext, which must not happen by accident).
func (f tlsFlags) check() error {
	if (f.cert == "") != (f.key == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together (both or neither)")
	}
	if (f.upstreamCert == "") != (f.upstreamKey == "") {
		return fmt.Errorf("--upstream-cert and --upstream-key go together (both or neither)")
	}
	if f.upstreamCA == "" {
		for _, given := range []struct{ flag, value string }{
			{"--upstream-cert", f.upstreamCert}, {"--upstream-server-name", f.upstreamServerName}} {
			if given.value != "" {
				return fmt.Errorf("%s needs --upstream-ca (without it the upstream is plaintext)", given.flag)
			}
		}
	}
	return nil
}

// serverTLS is the HTTPS listener's configuration; nil without --tls-cert (plain HTTP).
func (f tlsFlags) serverTLS() (*tls.Config, error) {
	if f.cert == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %v", f.cert, f.key, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// upstreamCredentials is how the gateway dials steady-server at addr: TLS verified against
// --upstream-ca for the name --upstream-server-name (default: addr's host), with a client
// certificate when given; plaintext without --upstream-ca.
func (f tlsFlags) upstreamCredentials(addr string) (grpc.DialOption, error) {
	if f.upstreamCA == "" {
		return grpc.WithInsecure(), nil
	}
	pem, err := os.ReadFile(f.upstreamCA)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in it", f.upstreamCA)
	}
	config := &tls.Config{RootCAs: roots, ServerName: f.upstreamServerName, MinVersion: tls.VersionTLS12}
	if config.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			config.ServerName = host // an IP address is checked against the certificate's IP SANs
		}
	}
	if f.upstreamCert != "" {
		pair, err := tls.LoadX509KeyPair(f.upstreamCert, f.upstreamKey)
		if err != nil {
			return nil, fmt.Errorf("--upstream-cert %s, --upstream-key %s: %v", f.upstreamCert, f.upstreamKey, err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(config)), nil
}

// upstreamMode names the connection to steady-server in the log and in errors.
func (f tlsFlags) upstreamMode() string {
	switch {
	case f.upstreamCert != "":
		return "mutual TLS"
	case f.upstreamCA != "":
		return "TLS"
	}
	return "plaintext"
}

// isLoopback: only this machine can reach a listener on host ("localhost", 127.0.0.0/8, ::1).
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
