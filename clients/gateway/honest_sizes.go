package main

import "net/http"

// withHonestSizes: grpc-gateway answers gRPC's refusal of an oversized message (RESOURCE_EXHAUSTED,
// "... larger than max (N vs. M)") with 429, its status for RESOURCE_EXHAUSTED, which tells a client
// to retry a request that can never succeed. The generated routes (/v1/generate, /v1/sessions...)
// go through here: a 429 is held until its body shows which it is, and one that names the message
// limit becomes 413 (openai.go's routes map the same error themselves). Tenants' rate limits keep
// their 429.
func withHonestSizes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&sizeAwareWriter{ResponseWriter: w}, r)
	})
}

type sizeAwareWriter struct {
	http.ResponseWriter
	held    bool // a 429 whose status line waits for the body
	started bool // the status line is out
}

func (s *sizeAwareWriter) WriteHeader(code int) {
	if s.started || s.held {
		return
	}
	if code == http.StatusTooManyRequests {
		s.held = true
		return
	}
	s.started = true
	s.ResponseWriter.WriteHeader(code)
}

func (s *sizeAwareWriter) release(body []byte) {
	if !s.held {
		return
	}
	s.held = false
	s.started = true
	code := http.StatusTooManyRequests
	if tooLarge(string(body)) {
		code = http.StatusRequestEntityTooLarge
		s.ResponseWriter.Header().Del("Retry-After")
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sizeAwareWriter) Write(b []byte) (int, error) {
	s.release(b)
	s.started = true
	return s.ResponseWriter.Write(b)
}

// Flush keeps the writer a Flusher: grpc-gateway streams Generate only through one.
func (s *sizeAwareWriter) Flush() {
	s.release(nil)
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
