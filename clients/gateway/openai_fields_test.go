package main

// The OpenAI field walk (openai_fields.go) through the real handlers against the fake upstream of
// openai_fuzz_test.go: what each field becomes in the GenerateRequest, and the 400s that name a field
// Steady refuses. tests/node/openai_client.cjs walks the official openai package's field lists
// against a real gateway and server.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	steadyv1 "steady/v1"
)

// post sends body to path; it returns the status, the error's param (if any) and what the upstream got.
func post(t *testing.T, path, body string) (int, string, *steadyv1.GenerateRequest) {
	t.Helper()
	up := &fakeUpstream{}
	o := &openAI{client: up}
	mux := http.NewServeMux()
	o.register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, bytes.NewReader([]byte(body))))
	var e struct {
		Error openAIError `json:"error"`
	}
	json.Unmarshal(w.Body.Bytes(), &e)
	param, _ := e.Error.Param.(string)
	return w.Code, param, up.got
}

const chatPrefix = `{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], `

func TestOpenAIFieldsPassedThrough(t *testing.T) {
	// The fake upstream refuses every Generate with UNAVAILABLE: 503 means the request got there.
	code, _, g := post(t, "/v1/chat/completions", chatPrefix+`"n": 3, "presence_penalty": 0.5,
		"frequency_penalty": -1, "logit_bias": {"262": 100, "7": -100}, "seed": 5, "stop": ["x"],
		"response_format": {"type": "json_object"}, "user": "u", "tools": [], "store": false, "top_k": 4}`)
	if code != http.StatusServiceUnavailable || g == nil {
		t.Fatalf("HTTP %d, upstream got %v", code, g)
	}
	if g.N != 3 || g.PresencePenalty != 0.5 || g.FrequencyPenalty != -1 || g.Seed != 5 || g.GetTopK() != 4 ||
		len(g.Stop) != 1 || g.LogitBias[262] != 100 || g.LogitBias[7] != -100 || len(g.LogitBias) != 2 ||
		g.ResponseFormat.GetType() != "json_object" {
		t.Fatalf("GenerateRequest %v", g)
	}
	schema := `{"type": "object", "properties": {"a": {"type": "integer"}}}`
	code, _, g = post(t, "/v1/completions", `{"model": "tiny", "prompt": "x", "response_format":
		{"type": "json_schema", "json_schema": {"name": "s", "strict": true, "schema": `+schema+`}}}`)
	if code != http.StatusServiceUnavailable || g.ResponseFormat.GetType() != "json_schema" ||
		g.ResponseFormat.GetJsonSchema() != schema {
		t.Fatalf("HTTP %d, GenerateRequest %v", code, g)
	}
	code, _, g = post(t, "/v1/chat/completions", chatPrefix+`"grammar": "root ::= \"yes\" | \"no\""}`)
	if code != http.StatusServiceUnavailable || g.ResponseFormat.GetType() != "grammar" ||
		g.ResponseFormat.GetGrammar() != `root ::= "yes" | "no"` {
		t.Fatalf("HTTP %d, GenerateRequest %v", code, g)
	}
	// null is an absent field, whatever the field.
	if code, _, _ = post(t, "/v1/chat/completions", chatPrefix+`"tools": null, "audio": null}`); code != http.StatusServiceUnavailable {
		t.Fatalf("null fields: HTTP %d", code)
	}
}

func TestOpenAIFieldsRefusedNamingTheField(t *testing.T) {
	for _, c := range []struct{ path, fields, param string }{
		{"/v1/chat/completions", `"frobnicate": 1`, "frobnicate"},
		{"/v1/chat/completions", `"tools": [{"type": "function", "function": {"name": "f"}}]`, "tools"},
		{"/v1/chat/completions", `"tool_choice": "required"`, "tool_choice"},
		{"/v1/chat/completions", `"audio": {"voice": "alloy", "format": "wav"}`, "audio"},
		{"/v1/chat/completions", `"modalities": ["text", "audio"]`, "modalities"},
		{"/v1/chat/completions", `"store": true`, "store"},
		{"/v1/chat/completions", `"echo": true`, "echo"}, // a completions field
		{"/v1/chat/completions", `"n": 0`, "n"},
		{"/v1/chat/completions", `"logit_bias": {"the": 1}`, "logit_bias"},
		{"/v1/chat/completions", `"response_format": {"type": "xml"}`, "response_format.type"},
		{"/v1/chat/completions", `"response_format": {"type": "json_schema"}`, "response_format.json_schema"},
		{"/v1/chat/completions", `"response_format": {"type": "json_object", "extra": 1}`, "response_format"},
		{"/v1/chat/completions", `"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""`, "grammar"},
		{"/v1/completions", `"best_of": 2`, "best_of"},
		{"/v1/completions", `"suffix": "end"`, "suffix"},
		{"/v1/completions", `"messages": []`, "messages"},
	} {
		body := chatPrefix + c.fields + "}"
		if c.path == "/v1/completions" {
			body = `{"model": "tiny", "prompt": "x", ` + c.fields + "}"
		}
		code, param, g := post(t, c.path, body)
		if code != http.StatusBadRequest || param != c.param || g != nil {
			t.Errorf("%s %s: HTTP %d param %q (want 400 %q), upstream got %v", c.path, c.fields, code, param, c.param, g)
		}
	}
	// Every field of the table is one of the two endpoints'.
	for name, rule := range openAIFields {
		if rule.use&forBoth == 0 {
			t.Errorf("%s belongs to no endpoint", name)
		}
	}
}

func TestTooLargeIsNotARateLimit(t *testing.T) {
	code, _, errCode := grpcToOpenAI(status.Error(codes.ResourceExhausted,
		"Received message larger than max (40000038 vs. 33554432)"))
	if code != http.StatusRequestEntityTooLarge || errCode != "request_too_large" {
		t.Fatalf("got %d %s", code, errCode)
	}
	if code, _, _ = grpcToOpenAI(status.Error(codes.ResourceExhausted, "quota tokens_per_minute of tenant a")); code != http.StatusTooManyRequests {
		t.Fatalf("a quota: %d", code)
	}
	big := `{"model": "tiny", "prompt": "` + string(bytes.Repeat([]byte("a"), maxBodyBytes)) + `"}`
	if code, _, g := post(t, "/v1/completions", big); code != http.StatusRequestEntityTooLarge || g != nil {
		t.Fatalf("a body over 16 MiB: HTTP %d", code)
	}
}
