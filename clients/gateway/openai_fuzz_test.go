package main

// Go's native fuzzing of the gateway's JSON handling (docs/fuzzing.md): the OpenAI request bodies
// through the real handlers, against a fake upstream, and the steady.v1 request bodies through the
// strict JSON decoder. `go test` replays the seed corpus in testdata/fuzz (a ctest); one fuzzer runs
// with tools/fuzz/run.sh FuzzChatCompletions [SECONDS] (or FuzzCompletions, FuzzStrictJSONGenerateRequest).

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	steadyv1 "steady/v1"
)

// fakeUpstream answers GetModelInfo and records the GenerateRequest it is given, then refuses it:
// what the fuzzers check is what the gateway made of the body. Other methods are never called (the
// embedded nil interface would panic, failing the fuzzer).
type fakeUpstream struct {
	steadyv1.InferenceClient
	got      *steadyv1.GenerateRequest
	defaults string // ModelInfo.generation_defaults_json
}

func (f *fakeUpstream) GetModelInfo(ctx context.Context, in *steadyv1.GetModelInfoRequest, opts ...grpc.CallOption) (*steadyv1.ModelInfo, error) {
	return &steadyv1.ModelInfo{ModelName: "tiny", VocabSize: 8192, GenerationDefaultsJson: f.defaults,
		Limits: &steadyv1.Limits{MaxNewTokens: 4096, MaxPromptTokens: 65536, MaxStopStrings: 16, MaxStopBytes: 256}}, nil
}

func (f *fakeUpstream) Generate(ctx context.Context, in *steadyv1.GenerateRequest, opts ...grpc.CallOption) (steadyv1.Inference_GenerateClient, error) {
	f.got = in
	return nil, status.Error(codes.Unavailable, "fake upstream")
}

func fuzzOpenAI(t *testing.T, path string, chat bool, body []byte) {
	up := &fakeUpstream{}
	o := &openAI{client: up}
	mux := http.NewServeMux()
	o.register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	switch {
	case w.Code == http.StatusOK:
		// Only a stream's headers can have gone out before the upstream refused.
	case w.Code >= 400 && w.Code < 600:
		var e struct {
			Error openAIError `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
			t.Fatalf("HTTP %d without an OpenAI error body: %q", w.Code, w.Body.String())
		}
	default:
		t.Fatalf("HTTP %d for %q", w.Code, body)
	}
	if g := up.got; g != nil {
		// A request that reached the upstream is within the limits the gateway knows.
		if g.GetMaxTokens() < 0 || g.GetMaxTokens() > 4096 {
			t.Fatalf("max_tokens %d passed on", g.GetMaxTokens())
		}
		if (g.Prompt != "" || len(g.PromptTokenIds) > 0) && len(g.Messages) > 0 {
			t.Fatalf("both a prompt and messages passed on")
		}
		if chat && len(g.Messages) == 0 {
			t.Fatalf("a chat call without messages passed on")
		}
		if g.TopLogprobs < 0 || g.TopLogprobs > maxTopLogprobs {
			t.Fatalf("top_logprobs %d passed on", g.TopLogprobs)
		}
	}
}

func FuzzChatCompletions(f *testing.F) {
	f.Add([]byte(`{"model":"tiny","messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"stream":true}`))
	f.Add([]byte(`{"model":"tiny","messages":[{"role":"system","content":[{"type":"text","text":"Be brief"}]},{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":3,"session_id":"alice","stop":["\n"]}`))
	f.Add([]byte(`{"model":"tiny","messages":[],"n":2,"temperature":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzOpenAI(t, "/v1/chat/completions", true, body) })
}

func FuzzCompletions(f *testing.F) {
	f.Add([]byte(`{"model":"tiny","prompt":"Call me","max_tokens":4,"echo":true,"logprobs":2}`))
	f.Add([]byte(`{"model":"tiny","prompt":[1,42,7],"seed":7,"stop":"x","stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"model":"tiny","prompt":["a","b"],"max_tokens":1e99}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzOpenAI(t, "/v1/completions", false, body) })
}

// The steady.v1 routes decode bodies with strictJSON: any bytes are refused or give a message that
// encodes back to JSON and decodes to the same message.
func FuzzStrictJSONGenerateRequest(f *testing.F) {
	f.Add([]byte(`{"session_id":"alice","prompt":"Call me","max_tokens":16,"stop":["\n"],"expected_position":3}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"x"}],"temperature":"NaN","prompt_token_ids":[1,2]}`))
	f.Add([]byte(`{"max_token":5}`))
	m := strictJSON{&runtime.JSONPb{OrigName: true, EmitDefaults: false}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var g steadyv1.GenerateRequest
		if err := m.Unmarshal(body, &g); err != nil {
			return
		}
		out, err := m.Marshal(&g)
		if err != nil {
			t.Fatalf("decoded %q but cannot encode it: %v", body, err)
		}
		var back steadyv1.GenerateRequest
		if err := m.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q does not decode back: %v", out, err)
		}
		// The encoding is a fixed point (bytes, not proto.Equal: a NaN temperature is not equal to itself).
		again, err := m.Marshal(&back)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q decoded and encoded again gives %q (%v)", out, again, err)
		}
	})
}
