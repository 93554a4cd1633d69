package main

// openai_sampling.go through the real handlers against the fake upstream (openai_fuzz_test.go): a
// sampling field the body sets reaches the GenerateRequest, 0 included; one it leaves out is left
// out where the checkpoint has a default, and gets OpenAI's where it has none.

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	steadyv1 "steady/v1"
)

func postTo(t *testing.T, up *fakeUpstream, path, body string) *steadyv1.GenerateRequest {
	t.Helper()
	o := &openAI{client: up}
	mux := http.NewServeMux()
	o.register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, bytes.NewReader([]byte(body))))
	if w.Code != http.StatusServiceUnavailable || up.got == nil { // the fake upstream's refusal
		t.Fatalf("%s %s: HTTP %d: %s", path, body, w.Code, w.Body.String())
	}
	return up.got
}

func TestOpenAISamplingFieldsKeepTheirPresence(t *testing.T) {
	const checkpoint = `{"max_tokens": 6, "temperature": 0.7, "top_k": 3, "top_p": 0.9, "repetition_penalty": 1.05}`
	// Left out, with checkpoint defaults: nothing is sent, the server applies the checkpoint's.
	g := postTo(t, &fakeUpstream{defaults: checkpoint}, "/v1/completions", `{"model": "tiny", "prompt": "x"}`)
	if g.MaxTokensSet != nil || g.TemperatureSet != nil || g.TopPSet != nil || g.TopKSet != nil ||
		g.RepetitionPenaltySet != nil {
		t.Fatalf("fields the body leaves out were sent: %v", g)
	}
	// Left out, without: OpenAI's defaults for temperature and max_tokens, nothing else.
	for _, c := range []struct {
		path, body string
		maxTokens  int64
	}{
		{"/v1/completions", `{"model": "tiny", "prompt": "x"}`, defaultCompletionTokens},
		{"/v1/chat/completions", chatPrefix + `"stream": false}`, defaultChatTokens},
	} {
		g = postTo(t, &fakeUpstream{}, c.path, c.body)
		if g.MaxTokensSet == nil || g.GetMaxTokens() != c.maxTokens || g.TemperatureSet == nil ||
			g.GetTemperature() != 1 || g.TopPSet != nil || g.TopKSet != nil || g.RepetitionPenaltySet != nil {
			t.Fatalf("%s: %v", c.path, g)
		}
	}
	// Set, even to 0: sent as they are, whatever the checkpoint says.
	for _, defaults := range []string{checkpoint, ""} {
		g = postTo(t, &fakeUpstream{defaults: defaults}, "/v1/chat/completions", chatPrefix+
			`"max_completion_tokens": 0, "temperature": 0, "top_p": 0, "top_k": 0, "repetition_penalty": 0}`)
		if g.MaxTokensSet == nil || g.GetMaxTokens() != 0 || g.TemperatureSet == nil || g.GetTemperature() != 0 ||
			g.TopPSet == nil || g.GetTopP() != 0 || g.TopKSet == nil || g.GetTopK() != 0 ||
			g.RepetitionPenaltySet == nil || g.GetRepetitionPenalty() != 0 {
			t.Fatalf("explicit zeros (checkpoint %q): %v", defaults, g)
		}
	}
	g = postTo(t, &fakeUpstream{defaults: checkpoint}, "/v1/completions",
		`{"model": "tiny", "prompt": "x", "max_tokens": 9, "temperature": 1.5, "top_p": 0.5, "top_k": 7}`)
	if g.GetMaxTokens() != 9 || g.GetTemperature() != 1.5 || g.GetTopP() != 0.5 || g.GetTopK() != 7 ||
		g.RepetitionPenaltySet != nil {
		t.Fatalf("set values: %v", g)
	}
}
