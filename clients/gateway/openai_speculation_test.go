package main

// The speculation extension (openai_speculation.go) through the real handlers against the fake
// upstream of openai_fuzz_test.go, and the usage counts it adds. tests/cli/gateway_openai.sh sends
// it to a real server.

import (
	"net/http"
	"testing"

	steadyv1 "steady/v1"
)

func TestSpeculationPassedThrough(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := chatPrefix + `"speculation": {"mode": "ngram", "draft_tokens": 6}}`
		if path == "/v1/completions" {
			body = `{"model": "tiny", "prompt": "x", "speculation": {"mode": "draft"}}`
		}
		code, _, g := post(t, path, body)
		if code != http.StatusServiceUnavailable || g == nil || g.Speculation == nil {
			t.Fatalf("%s: HTTP %d, upstream got %v", path, code, g)
		}
		want := &steadyv1.Speculation{Mode: "ngram", DraftTokens: 6}
		if path == "/v1/completions" {
			want = &steadyv1.Speculation{Mode: "draft"}
		}
		if g.Speculation.Mode != want.Mode || g.Speculation.DraftTokens != want.DraftTokens {
			t.Fatalf("%s: speculation %v, want %v", path, g.Speculation, want)
		}
	}
	// Absent or null: the server's default (no field sent).
	for _, body := range []string{chatPrefix + `"seed": 1}`, chatPrefix + `"speculation": null}`} {
		if code, _, g := post(t, "/v1/chat/completions", body); code != http.StatusServiceUnavailable || g.Speculation != nil {
			t.Fatalf("%s: HTTP %d, speculation %v", body, code, g.GetSpeculation())
		}
	}
}

func TestSpeculationMalformedIsRefused(t *testing.T) {
	for _, value := range []string{`"ngram"`, `{"mode": 3}`, `{"draft_tokens": "4"}`, `{"mode": "ngram", "k": 4}`, `[]`} {
		code, param, g := post(t, "/v1/chat/completions", chatPrefix+`"speculation": `+value+`}`)
		if code != http.StatusBadRequest || param != "speculation" || g != nil {
			t.Fatalf("speculation %s: HTTP %d, param %q, upstream got %v", value, code, param, g)
		}
	}
}

func TestSpeculationUsage(t *testing.T) {
	plain := usageJSON(&steadyv1.Usage{PromptTokens: 3, CompletionTokens: 5})
	if _, ok := plain["speculation"]; ok {
		t.Fatalf("usage without drafts carries speculation: %v", plain)
	}
	if _, ok := plain["completion_tokens_details"]; ok {
		t.Fatalf("usage without drafts carries completion_tokens_details: %v", plain)
	}
	u := usageJSON(&steadyv1.Usage{PromptTokens: 3, CompletionTokens: 20, DraftedTokens: 16, AcceptedTokens: 12})
	s, _ := u["speculation"].(map[string]interface{})
	d, _ := u["completion_tokens_details"].(map[string]interface{})
	if s["drafted_tokens"] != int64(16) || s["accepted_tokens"] != int64(12) ||
		d["accepted_prediction_tokens"] != int64(12) || d["rejected_prediction_tokens"] != int64(4) {
		t.Fatalf("usage %v", u)
	}
}
