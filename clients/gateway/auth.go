package main

// API keys and refusals (docs/api.md, "TLS and API keys"): the client's `Authorization: Bearer KEY` header
// reaches steady-server as the gRPC metadata `authorization` on every call, and a call the server
// refuses for a key or a quota answers with the HTTP headers that tell the client what to do:
// `WWW-Authenticate: Bearer` with a 401 (UNAUTHENTICATED), `Retry-After: SECONDS` with a 429
// (RESOURCE_EXHAUSTED carrying the trailing metadata `retry-after`) or a 503 (UNAVAILABLE carrying it:
// with replicas, the session's replica is alive and kept it through the server's wait for it).
//
// The refusal headers are set by the gRPC client interceptors below, on the response's header map,
// which withRefusalHeaders puts in each request's context: an error reaches the HTTP response along
// several paths (grpc-gateway v1.6.4's runtime.HTTPError for unary calls, its own stream error
// writer for a stream that fails before its first message, which no hook replaces, and openai.go's
// error bodies), and every one of them writes the status after the failed gRPC call returns.

import (
	"context"
	"io"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// incomingHeader chooses the HTTP headers grpc-gateway forwards as gRPC metadata. v1.6.4 already
// forwards `Authorization` as `authorization` (context.go, "for backwards-compatibility"); its default
// matcher would forward it a second time as `grpcgateway-authorization`, and a
// `Grpc-Metadata-Authorization` header as a second `authorization`, of which the server reads the
// first. One way in: the Authorization header, once.
func incomingHeader(key string) (string, bool) {
	switch key {
	case "Authorization", runtime.MetadataHeaderPrefix + "Authorization":
		return "", false
	}
	return runtime.DefaultHeaderMatcher(key)
}

// withAPIKey is ctx carrying the request's Authorization header as the outgoing metadata
// `authorization`, for the calls openai.go makes itself.
func withAPIKey(ctx context.Context, r *http.Request) context.Context {
	if key := r.Header.Get("Authorization"); key != "" {
		return metadata.AppendToOutgoingContext(ctx, "authorization", key)
	}
	return ctx
}

type responseHeaderKey struct{}

// withRefusalHeaders gives the interceptors each request's response headers.
func withRefusalHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), responseHeaderKey{}, w.Header())))
	})
}

// setRefusalHeaders sets the HTTP headers for a failed call's status and trailing metadata. They
// count when the call failed before its first message, as refusals do: the status line is still to
// be written. Once a response has begun, changing its header map has no effect.
func setRefusalHeaders(ctx context.Context, err error, trailer metadata.MD) {
	header, ok := ctx.Value(responseHeaderKey{}).(http.Header)
	if !ok || err == nil {
		return
	}
	switch status.Code(err) {
	case codes.Unauthenticated:
		header.Set("WWW-Authenticate", `Bearer realm="steady"`)
	case codes.ResourceExhausted, codes.Unavailable:
		// A quota, or (503) a session another replica is serving and keeps: when to try again.
		for _, v := range trailer.Get("retry-after") {
			if _, err := strconv.ParseUint(v, 10, 32); err == nil { // delay-seconds, nothing else
				header.Set("Retry-After", v)
			}
		}
	}
}

// upstreamInterceptors set the refusal headers of every call on the connection to steady-server
// (plaintext, TLS or mutual TLS: `mode`) and name the server in the errors of a connection that fails.
func upstreamInterceptors(mode string) (grpc.UnaryClientInterceptor, grpc.StreamClientInterceptor) {
	unary := func(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var trailer metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
		setRefusalHeaders(ctx, err, trailer)
		return explainUnreachable(err, cc, mode)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			setRefusalHeaders(ctx, err, nil)
			return nil, explainUnreachable(err, cc, mode)
		}
		return &refusalStream{ClientStream: s, ctx: ctx, cc: cc, mode: mode}, nil
	}
	return unary, stream
}

// explainUnreachable puts the server's address and the connection's security in front of an
// UNAVAILABLE that the connection caused (it is not READY: a refused handshake, an unverified
// certificate, a server that is down), so that "connection closed" reads as what it is. An
// UNAVAILABLE the server sent itself (draining, another replica holds the session) stays as it is.
func explainUnreachable(err error, cc *grpc.ClientConn, mode string) error {
	if status.Code(err) != codes.Unavailable || cc.GetState() == connectivity.Ready {
		return err
	}
	return status.Errorf(codes.Unavailable, "steady-server %s (%s) is unreachable: %s", cc.Target(), mode,
		status.Convert(err).Message())
}

// refusalStream reads the trailer once the stream has failed: a refusal ends the call before any
// message, surfacing in Header (grpc-gateway asks for it first) or in the first RecvMsg.
type refusalStream struct {
	grpc.ClientStream
	ctx  context.Context
	cc   *grpc.ClientConn
	mode string
}

func (s *refusalStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err != nil {
		setRefusalHeaders(s.ctx, err, s.ClientStream.Trailer())
		err = explainUnreachable(err, s.cc, s.mode)
	}
	return md, err
}

func (s *refusalStream) RecvMsg(m interface{}) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && err != io.EOF {
		setRefusalHeaders(s.ctx, err, s.ClientStream.Trailer())
		err = explainUnreachable(err, s.cc, s.mode)
	}
	return err
}
