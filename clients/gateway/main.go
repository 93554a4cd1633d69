// steady-gateway serves Steady's gRPC API (steady.v1.Inference) as HTTP/JSON. The routes come from
// the google.api.http annotations in proto/steady/v1/inference.proto through grpc-gateway v1
// (docs/api.md, "HTTP/JSON gateway"). It speaks the API only: it knows nothing of the server's
// internals.
//
// Usage: steady-gateway --grpc-addr HOST:PORT --http-port N [--http-host 127.0.0.1]
//
//	[--tls-cert PEM --tls-key PEM] [--upstream-ca PEM [--upstream-cert PEM --upstream-key PEM]
//	[--upstream-server-name NAME]]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "embed"

	"github.com/grpc-ecosystem/grpc-gateway/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	steadyv1 "steady/v1"
)

// The OpenAPI 2.0 document protoc-gen-swagger writes from the same proto; the build places it
// next to this file.
//
//go:embed openapi.json
var openAPIDocument []byte

// healthTimeout bounds one /healthz check against the server's grpc.health.v1 service.
const healthTimeout = 2 * time.Second

func main() {
	grpcAddr := flag.String("grpc-addr", "127.0.0.1:50051", "steady-server's gRPC address, HOST:PORT")
	httpHost := flag.String("http-host", "127.0.0.1", "address to serve HTTP on")
	httpPort := flag.Int("http-port", 8080, "port to serve HTTP on (0: pick a free one)")
	var tlsFiles tlsFlags
	flag.StringVar(&tlsFiles.cert, "tls-cert", "", "serve HTTPS with this certificate chain (PEM; with --tls-key)")
	flag.StringVar(&tlsFiles.key, "tls-key", "", "the private key of --tls-cert (PEM)")
	flag.StringVar(&tlsFiles.upstreamCA, "upstream-ca", "", "dial steady-server over TLS, verifying its certificate against this CA (PEM); without it: plaintext")
	flag.StringVar(&tlsFiles.upstreamServerName, "upstream-server-name", "", "the name steady-server's certificate must carry (default: the host of --grpc-addr)")
	flag.StringVar(&tlsFiles.upstreamCert, "upstream-cert", "", "a client certificate for mutual TLS to steady-server (PEM; with --upstream-key and --upstream-ca)")
	flag.StringVar(&tlsFiles.upstreamKey, "upstream-key", "", "the private key of --upstream-cert (PEM)")
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: steady-gateway --grpc-addr HOST:PORT --http-port N [--http-host 127.0.0.1]")
		fmt.Fprintln(w, "         [--tls-cert PEM --tls-key PEM] [--upstream-ca PEM [--upstream-cert PEM --upstream-key PEM]")
		fmt.Fprintln(w, "         [--upstream-server-name NAME]]")
		fmt.Fprintln(w, "\nServes steady-server's gRPC API as HTTP/JSON (docs/api.md); /v1/generate streams.")
		fmt.Fprintln(w, "OpenAI-compatible: GET /v1/models, POST /v1/completions, POST /v1/chat/completions.")
		fmt.Fprintln(w, "A web playground at / (open http://HOST:PORT/ in a browser).")
		fmt.Fprintln(w, "A client's \"Authorization: Bearer KEY\" header reaches steady-server as its API key.")
		flag.CommandLine.SetOutput(w)
		flag.PrintDefaults()
	}
	flag.Usage = func() { usage(os.Stderr) }
	for _, arg := range os.Args[1:] {
		if arg == "-h" || arg == "-help" || arg == "--help" {
			usage(os.Stdout) // asked for: stdout and exit status 0, like every Steady binary
			os.Exit(0)
		}
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}

	if err := tlsFiles.check(); err != nil {
		fmt.Fprintf(os.Stderr, "steady-gateway: %v\n", err)
		os.Exit(2)
	}
	serverTLS, err := tlsFiles.serverTLS()
	if err != nil {
		fmt.Fprintf(os.Stderr, "steady-gateway: %v\n", err)
		os.Exit(1)
	}
	upstream, err := tlsFiles.upstreamCredentials(*grpcAddr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "steady-gateway: %v\n", err)
		os.Exit(1)
	}

	upstreamMode := tlsFiles.upstreamMode()
	unary, stream := upstreamInterceptors(upstreamMode)

	// Dialing is lazy: the gateway starts before the server is up and reconnects when it restarts.
	// The message limit steady-server sets (clients/common/channel.h's kMaxMessageBytes), not gRPC's 4 MiB.
	conn, err := grpc.Dial(*grpcAddr, upstream, grpc.WithUnaryInterceptor(unary),
		// A Generate stream cut by a replica's death is resumed (resume.go) beneath the refusal headers.
		grpc.WithChainStreamInterceptor(stream, resumeInterceptor(&sessionPositions{})),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "steady-gateway: %v\n", err)
		os.Exit(1)
	}
	defer conn.Close()

	if serverTLS == nil && !isLoopback(*httpHost) {
		// API keys and prompts would cross the network in the clear.
		fmt.Fprintf(os.Stderr, "steady-gateway: WARNING: listening on %s without TLS: anyone on the path can read "+
			"the traffic, API keys included (--tls-cert, --tls-key; docs/security.md)\n", *httpHost)
	}
	listener, err := net.Listen("tcp", net.JoinHostPort(*httpHost, strconv.Itoa(*httpPort)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "steady-gateway: %v\n", err)
		os.Exit(1)
	}
	server := &http.Server{Handler: newHandler(conn), TLSConfig: serverTLS}
	scheme := "http"
	if serverTLS != nil {
		scheme = "https"
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		server.Shutdown(ctx)
	}()

	// Tests and scripts read the port from this line.
	fmt.Fprintf(os.Stderr, "steady-gateway: listening on %s://%s (gRPC %s, %s)\n", scheme, listener.Addr(), *grpcAddr, upstreamMode)
	if serverTLS != nil {
		err = server.ServeTLS(listener, "", "") // the certificate is in TLSConfig
	} else {
		err = server.Serve(listener)
	}
	if err != nil && err != http.ErrServerClosed {
		fmt.Fprintf(os.Stderr, "steady-gateway: %v\n", err)
		os.Exit(1)
	}
}

// newHandler routes /openapi.json, /healthz, the OpenAI-compatible endpoints (openai.go) and the
// playground (playground.go) itself and everything else to the generated gateway.
func newHandler(conn *grpc.ClientConn) http.Handler {
	// Field names as in the proto (session_id, not sessionId). Fields at their default value (0, "",
	// false, empty lists, unset messages) are left out, as the proto3 JSON mapping does: a streamed
	// Generate line carries text and token_ids, and only the last one finish_reason and usage.
	marshaler := strictJSON{&runtime.JSONPb{OrigName: true, EmitDefaults: false}}
	gateway := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
		runtime.WithIncomingHeaderMatcher(incomingHeader))
	// Unknown paths and methods: JSON like every other error instead of the default plain text.
	runtime.OtherErrorHandler = writeJSONError
	if err := steadyv1.RegisterInferenceHandlerClient(context.Background(), gateway,
		steadyv1.NewInferenceClient(conn)); err != nil {
		panic(err) // only fails on a programming error in the generated code
	}

	health := healthpb.NewHealthClient(conn)
	mux := http.NewServeMux()
	mux.HandleFunc("/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPIDocument)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		serveHealth(w, r, health)
	})
	(&openAI{client: steadyv1.NewInferenceClient(conn)}).register(mux)
	mux.Handle("/", withPlayground(routeBySession(withHonestSizes(gateway))))
	return withRefusalHeaders(mux)
}

// maxPeekBytes bounds the request bodies read for their session_id (a Generate or CreateSession body
// is small; a larger one is forwarded unread, without the routing metadata).
const maxPeekBytes = 1 << 20

// routeBySession gives each call the gRPC metadata x-steady-session, which a balancer in front of
// several steady-server replicas routes on (docs/deployment.md): the client's own X-Steady-Session
// header, else the {session_id} of a /v1/sessions/{session_id}... path, else the session_id of a
// /v1/generate or /v1/sessions body.
func routeBySession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Steady-Session")
		if id == "" {
			id = sessionFromPath(r.URL.Path)
		}
		if id == "" && r.Method == http.MethodPost && (r.URL.Path == "/v1/generate" || r.URL.Path == "/v1/sessions") {
			body, err := io.ReadAll(io.LimitReader(r.Body, maxPeekBytes+1))
			if err == nil && len(body) <= maxPeekBytes {
				var peek struct {
					SessionID string `json:"session_id"`
				}
				if json.Unmarshal(body, &peek) == nil {
					id = peek.SessionID
				}
			}
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		}
		if id != "" {
			// grpc-gateway forwards Grpc-Metadata-* headers as metadata without the prefix.
			r.Header.Set("Grpc-Metadata-X-Steady-Session", id)
		}
		next.ServeHTTP(w, r)
	})
}

// sessionFromPath: "abc" for /v1/sessions/abc, /v1/sessions/abc:fork and /v1/sessions/abc:export.
func sessionFromPath(path string) string {
	const prefix = "/v1/sessions/"
	if !strings.HasPrefix(path, prefix) {
		return ""
	}
	id := path[len(prefix):]
	if colon := strings.IndexByte(id, ':'); colon >= 0 {
		id = id[:colon]
	}
	if strings.ContainsRune(id, '/') {
		return ""
	}
	return id
}

// serveHealth answers 200 when steady-server's overall health status is SERVING, 503 otherwise
// (server unreachable, starting, or draining).
func serveHealth(w http.ResponseWriter, r *http.Request, health healthpb.HealthClient) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	status := "UNREACHABLE"
	if err == nil {
		status = resp.GetStatus().String()
	}
	code := http.StatusServiceUnavailable
	if status == healthpb.HealthCheckResponse_SERVING.String() {
		code = http.StatusOK
	}
	body, _ := json.Marshal(map[string]string{"status": status})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

// writeJSONError answers the gateway's own routing errors (no such path, wrong method) in the shape
// of its gRPC error bodies: {"error", "message", "code" (a gRPC code)}.
func writeJSONError(w http.ResponseWriter, _ *http.Request, msg string, httpCode int) {
	grpcCode := codes.Unknown
	switch httpCode {
	case http.StatusBadRequest:
		grpcCode = codes.InvalidArgument
	case http.StatusNotFound:
		grpcCode = codes.NotFound
	case http.StatusMethodNotAllowed:
		grpcCode = codes.Unimplemented
	}
	body, _ := json.Marshal(map[string]interface{}{"error": msg, "message": msg, "code": int32(grpcCode)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	w.Write(append(body, '\n'))
}
