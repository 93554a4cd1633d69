package main

// Tool calling (openai_tools.go) and the UTF-8 refusals (utf8_fields.go) through the real handlers,
// against a scripted upstream that answers a model's text in pieces: what reaches the server, the
// tool_calls read back whole and streamed, and the 400s naming the field.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	steadyv1 "steady/v1"
)

// scriptedUpstream answers GetModelInfo with a tool_call_format and every Generate with `pieces` of
// text (one message each), then a last message with finish_reason "stop".
type scriptedUpstream struct {
	steadyv1.InferenceClient
	format string
	pieces []string
	got    *steadyv1.GenerateRequest
}

func (f *scriptedUpstream) GetModelInfo(ctx context.Context, in *steadyv1.GetModelInfoRequest, opts ...grpc.CallOption) (*steadyv1.ModelInfo, error) {
	return &steadyv1.ModelInfo{ModelName: "tiny", VocabSize: 8192, ToolCallFormat: f.format,
		Limits: &steadyv1.Limits{MaxNewTokens: 4096}}, nil
}

func (f *scriptedUpstream) Generate(ctx context.Context, in *steadyv1.GenerateRequest, opts ...grpc.CallOption) (steadyv1.Inference_GenerateClient, error) {
	f.got = in
	s := &scriptedStream{}
	for _, p := range f.pieces {
		s.messages = append(s.messages, &steadyv1.GenerateResponse{Text: p, TokenIds: []int32{1}})
	}
	s.messages = append(s.messages, &steadyv1.GenerateResponse{FinishReason: "stop",
		Usage: &steadyv1.Usage{PromptTokens: 5, CompletionTokens: int64(len(f.pieces))}})
	return s, nil
}

type scriptedStream struct {
	grpc.ClientStream
	messages []*steadyv1.GenerateResponse
}

func (s *scriptedStream) Recv() (*steadyv1.GenerateResponse, error) {
	if len(s.messages) == 0 {
		return nil, io.EOF
	}
	m := s.messages[0]
	s.messages = s.messages[1:]
	return m, nil
}
func (s *scriptedStream) Header() (metadata.MD, error) { return nil, nil }

// chatWith posts body to /v1/chat/completions of a gateway over up; the HTTP status and the body.
func chatWith(t *testing.T, up *scriptedUpstream, body string) (int, []byte) {
	t.Helper()
	o := &openAI{client: up}
	mux := http.NewServeMux()
	o.register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader([]byte(body))))
	return w.Code, w.Body.Bytes()
}

const weatherTools = `"tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}, {"type": "function", "function": {"name": "time"}}]`

func TestToolsReachTheServerAndCallsComeBackWhole(t *testing.T) {
	up := &scriptedUpstream{format: "hermes", pieces: []string{"Let me check.\n<tool_", "call>\n{\"name\": \"get_weather\", ",
		"\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>"}}
	code, body := chatWith(t, up, `{"model": "tiny", "messages": [{"role": "user", "content": "hi"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "time", "arguments": "{}"}}]},
		{"role": "tool", "tool_call_id": "c", "name": "time", "content": "noon"}], `+weatherTools+`}`)
	if code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, body)
	}
	g := up.got
	if !strings.Contains(g.ToolsJson, `"get_weather"`) || g.ResponseFormat != nil || len(g.Messages) != 3 ||
		!strings.Contains(g.Messages[1].ToolCallsJson, `"time"`) || g.Messages[2].ToolCallId != "c" || g.Messages[2].Name != "time" {
		t.Fatalf("GenerateRequest %v", g)
	}
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string    `json:"content"`
				ToolCalls []toolCall `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	m := r.Choices[0].Message
	if r.Choices[0].FinishReason != "tool_calls" || m.Content == nil || *m.Content != "Let me check." || len(m.ToolCalls) != 2 ||
		m.ToolCalls[0].Function.Name != "get_weather" || m.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` ||
		m.ToolCalls[1].Function.Arguments != "{}" || !strings.HasPrefix(m.ToolCalls[0].ID, "call_") || m.ToolCalls[0].Type != "function" {
		t.Fatalf("answer %s", body)
	}
}

func TestToolCallParsing(t *testing.T) {
	hermes, llama := &toolParser{style: "hermes"}, &toolParser{style: "llama3_json"}
	cases := []struct {
		p       *toolParser
		text    string
		content string
		calls   []string // name + " " + arguments
	}{
		{hermes, "plain answer", "plain answer", nil},
		{hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}</tool_call>", "", []string{`f {"a":[1,2]}`}},
		{hermes, "<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", nil},
		{hermes, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", nil}, // no name
		{hermes, "<tool_call>{\"name\": \"f\"}", "<tool_call>{\"name\": \"f\"}", nil},                               // never closed
		{llama, "{\"name\": \"f\", \"parameters\": {\"x\": \"y\"}}", "", []string{`f {"x":"y"}`}},
		{llama, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", []string{`f {}`}},
		{llama, "The answer is {\"name\": 1}", "The answer is {\"name\": 1}", nil},
		{llama, "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", nil},
	}
	for _, c := range cases {
		content, calls := c.p.parse(c.text)
		var got []string
		for _, call := range calls {
			got = append(got, call.Function.Name+" "+call.Function.Arguments)
		}
		if content != c.content || strings.Join(got, "|") != strings.Join(c.calls, "|") {
			t.Errorf("%s %q: content %q calls %v; want %q %v", c.p.style, c.text, content, got, c.content, c.calls)
		}
	}
}

// A stream split at every byte gives the same content and calls as the whole text.
func TestToolStreamHoldsOnlyWhatMayBeACall(t *testing.T) {
	for _, c := range []struct{ style, text, content, calls string }{
		{"hermes", "Hi <tool <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call> bye <tool_c", "Hi <tool  bye <tool_c", `f {"a":1}`},
		{"llama3_json", "  {\"name\": \"g\", \"parameters\": {\"q\": \"x\"}}", "", `g {"q":"x"}`},
		{"llama3_json", "Sure: 42", "Sure: 42", ""},
	} {
		s := &toolStream{p: &toolParser{style: c.style}}
		var content strings.Builder
		var calls []string
		for i := 0; i < len(c.text); i++ {
			text, done := s.add(c.text[i : i+1])
			if c.style == "hermes" && strings.Contains(text, "<tool_call") {
				t.Errorf("%q: a call's start went out as content at byte %d", c.text, i)
			}
			content.WriteString(text)
			for _, call := range done {
				calls = append(calls, call.Function.Name+" "+call.Function.Arguments)
			}
		}
		text, done := s.flush()
		content.WriteString(text)
		for _, call := range done {
			calls = append(calls, call.Function.Name+" "+call.Function.Arguments)
		}
		if content.String() != c.content || strings.Join(calls, "|") != c.calls {
			t.Errorf("%s %q: content %q calls %v", c.style, c.text, content.String(), calls)
		}
	}
}

func TestToolCallsStreamAsOpenAIStreamsThem(t *testing.T) {
	up := &scriptedUpstream{format: "hermes", pieces: []string{"Ok", " <tool_call>\n{\"name\": \"time\", ", "\"arguments\": {}}\n</tool_call>"}}
	code, body := chatWith(t, up, `{"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "hi"}], `+weatherTools+`}`)
	if code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, body)
	}
	var content strings.Builder
	var calls []map[string]interface{}
	finish := ""
	for _, block := range strings.Split(string(body), "\n\n") {
		if !strings.HasPrefix(block, "data: {") {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   string                   `json:"content"`
					ToolCalls []map[string]interface{} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(block[6:]), &chunk); err != nil {
			t.Fatal(err)
		}
		content.WriteString(chunk.Choices[0].Delta.Content)
		calls = append(calls, chunk.Choices[0].Delta.ToolCalls...)
		if chunk.Choices[0].FinishReason != nil {
			finish = *chunk.Choices[0].FinishReason
		}
	}
	if content.String() != "Ok " || len(calls) != 1 || finish != "tool_calls" || calls[0]["index"] != float64(0) ||
		calls[0]["type"] != "function" || calls[0]["function"].(map[string]interface{})["name"] != "time" ||
		calls[0]["function"].(map[string]interface{})["arguments"] != "{}" || !strings.HasPrefix(calls[0]["id"].(string), "call_") {
		t.Fatalf("content %q calls %v finish %q in %s", content.String(), calls, finish, body)
	}
}

func TestToolChoice(t *testing.T) {
	up := &scriptedUpstream{format: "llama3_json"}
	if code, body := chatWith(t, up, chatPrefix+weatherTools+`, "tool_choice": {"type": "function", "function": {"name": "time"}}}`); code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, body)
	}
	grammar := up.got.GetResponseFormat().GetGrammar()
	if up.got.ResponseFormat.GetType() != "grammar" || !strings.Contains(grammar, `"{\"name\": " name ", \"parameters\": " object "}"`) ||
		!strings.Contains(grammar, `name ::= "\"time\""`+"\n") {
		t.Fatalf("grammar %q", grammar)
	}
	up = &scriptedUpstream{format: "hermes"}
	chatWith(t, up, chatPrefix+weatherTools+`, "tool_choice": "required"}`)
	if g := up.got.GetResponseFormat().GetGrammar(); !strings.Contains(g, `name ::= "\"get_weather\"" | "\"time\""`) || !strings.Contains(g, "<tool_call>") {
		t.Fatalf("grammar %q", g)
	}
	up = &scriptedUpstream{format: "hermes"}
	chatWith(t, up, chatPrefix+weatherTools+`, "tool_choice": "none"}`)
	if up.got.ToolsJson != "" || up.got.ResponseFormat != nil {
		t.Fatalf("tool_choice none: %v", up.got)
	}
}

func TestToolRefusalsNameTheField(t *testing.T) {
	for _, c := range []struct{ format, body, param string }{
		{"", chatPrefix + weatherTools + `}`, "tools"}, // a template without a tool-call format
		{"hermes", chatPrefix + `"tools": [{"type": "retrieval"}]}`, "tools[0].type"},
		{"hermes", chatPrefix + `"tools": [{"type": "function", "function": {"name": "f", "colour": 1}}]}`, "tools"},
		{"hermes", chatPrefix + `"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]}`, "tools[1].function.name"},
		{"hermes", chatPrefix + weatherTools + `, "tool_choice": "always"}`, "tool_choice"},
		{"hermes", chatPrefix + weatherTools + `, "tool_choice": {"type": "function", "function": {"name": "nope"}}}`, "tool_choice"},
		{"hermes", chatPrefix + `"tool_choice": "required"}`, "tool_choice"},
		{"hermes", chatPrefix + weatherTools + `, "tool_choice": "required", "response_format": {"type": "json_object"}}`, "tool_choice"},
		{"hermes", chatPrefix + weatherTools + `, "parallel_tool_calls": false}`, "parallel_tool_calls"},
		{"hermes", chatPrefix + `"functions": [{"name": "f"}]}`, "functions"},
	} {
		code, body := chatWith(t, &scriptedUpstream{format: c.format}, c.body)
		var e struct {
			Error openAIError `json:"error"`
		}
		json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || e.Error.Param != c.param {
			t.Errorf("%s: HTTP %d param %v (%s), want 400 naming %s", c.body, code, e.Error.Param, e.Error.Message, c.param)
		}
	}
}

func TestInvalidUTF8IsRefusedNamingFieldAndByte(t *testing.T) {
	for _, c := range []struct{ body, param, message string }{
		{`{"model": "tiny", "messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "caf` + "\xc3\x28" + `"}]}`,
			"messages[1].content", "messages[1].content: not valid UTF-8 (byte 0xc3 at byte 98 of the request body)"},
		{`{"model": "tiny", "messages": [{"role": "user", "content": "x\ud800y"}]}`,
			"messages[0].content", `messages[0].content: not valid UTF-8 (an escaped lone surrogate \ud800 at byte 61 of the request body)`},
		{`{"model": "tiny", "stop": ["` + "\xff" + `"], "messages": [{"role": "user", "content": "x"}]}`, "stop[0]", ""},
		{`{"model": "tiny", "messages": [{"role": "user", "content": "pair \ud83d\ude00 and \\ud800 escaped"}], "max_tokens": 1}`, "", ""},
	} {
		code, body := chatWith(t, &scriptedUpstream{format: "hermes"}, c.body)
		var e struct {
			Error openAIError `json:"error"`
		}
		json.Unmarshal(body, &e)
		if c.param == "" {
			if code != http.StatusOK {
				t.Errorf("%q: HTTP %d %s: valid text refused", c.body, code, body)
			}
			continue
		}
		if code != http.StatusBadRequest || e.Error.Param != c.param || (c.message != "" && e.Error.Message != c.message) {
			t.Errorf("%q: HTTP %d param %v message %q", c.body, code, e.Error.Param, e.Error.Message)
		}
	}
}
