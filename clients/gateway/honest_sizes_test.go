package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The generated routes' errors as grpc-gateway writes them: status line, then a JSON body.
func TestHonestSizesTurnsOnlyTheMessageLimitsRefusalInto413(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   int
	}{
		{http.StatusTooManyRequests, `{"error":"grpc: received message larger than max (40000038 vs. 33554432)","code":8}`, http.StatusRequestEntityTooLarge},
		{http.StatusTooManyRequests, `{"error":"tenant acme: 11 requests in the last second, the limit is 10","code":8}`, http.StatusTooManyRequests},
		{http.StatusBadRequest, `{"error":"message larger than max (1 vs. 0)","code":3}`, http.StatusBadRequest},
		{http.StatusOK, `{"result":{"text":"larger than max"}}`, http.StatusOK},
	}
	for _, c := range cases {
		handler := withHonestSizes(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(c.status)
			if _, ok := w.(http.Flusher); !ok {
				t.Error("the wrapped writer is no http.Flusher: grpc-gateway could not stream")
			}
			io.WriteString(w, c.body)
		}))
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/generate", nil))
		if rec.Code != c.want {
			t.Errorf("%d %s: got %d, want %d", c.status, c.body, rec.Code, c.want)
		}
		if rec.Body.String() != c.body {
			t.Errorf("the body changed: %q", rec.Body.String())
		}
		if c.want == http.StatusRequestEntityTooLarge && rec.Header().Get("Retry-After") != "" {
			t.Errorf("a 413 keeps Retry-After")
		}
		if c.want == http.StatusTooManyRequests && rec.Header().Get("Retry-After") != "1" {
			t.Errorf("a rate limit's 429 lost its Retry-After")
		}
	}
}

// A 429 whose body never comes (a flush first) still goes out as 429.
func TestHonestSizesReleasesAHeld429OnFlush(t *testing.T) {
	handler := withHonestSizes(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		w.(http.Flusher).Flush()
	}))
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sessions", nil))
	if rec.Code != http.StatusTooManyRequests || !rec.Flushed {
		t.Errorf("got %d flushed=%v, want 429 flushed", rec.Code, rec.Flushed)
	}
}
