package main

// OpenAI-compatible endpoints over steady.v1 (docs/api.md, "OpenAI-compatible endpoints"):
// GET /v1/models, POST /v1/completions and POST /v1/chat/completions, streamed as server-sent events
// or answered whole, with OpenAI's field names, defaults and error bodies. Chat messages go to the
// server, which renders them with the model's chat template. With a session (the body's session_id,
// or an X-Steady-Session header) each call appends to it, so a client sends only the new messages;
// without one a call is stateless, and the server's prefix cache keeps a resent history cheap.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	steadyv1 "steady/v1"
)

// Default max_tokens: OpenAI's for completions; chat has none there (up to the context), which on a
// model without an end-of-sequence habit would run for long, so a bound of our own.
const (
	defaultCompletionTokens = 16
	defaultChatTokens       = 256
	maxBodyBytes            = 16 << 20
	maxMessageBytes         = 32 << 20 // steady-server's gRPC message limit (clients/common/channel.h)
	maxTopLogprobs          = 20
)

type openAI struct {
	client steadyv1.InferenceClient
}

func (o *openAI) register(mux *http.ServeMux) {
	mux.HandleFunc("/v1/models", o.models)
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) { o.generate(w, r, false) })
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { o.generate(w, r, true) })
}

// openAIError is OpenAI's error body.
type openAIError struct {
	Message string      `json:"message"`
	Type    string      `json:"type"`
	Param   interface{} `json:"param"`
	Code    interface{} `json:"code"`
}

func writeOpenAIError(w http.ResponseWriter, httpStatus int, errType, param, code, message string) {
	e := openAIError{Message: message, Type: errType}
	if param != "" {
		e.Param = param
	}
	if code != "" {
		e.Code = code
	}
	body, _ := json.Marshal(map[string]openAIError{"error": e})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	w.Write(append(body, '\n'))
}

func invalid(w http.ResponseWriter, param, message string) {
	writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", param, "", message)
}

// grpcToOpenAI maps a server error to OpenAI's status, type and code. The API key and rate limit
// refusals use OpenAI's own values (401 invalid_api_key, 429 rate_limit_exceeded), which its clients
// turn into AuthenticationError and RateLimitError; a 429 or 503 carries Retry-After when the
// server said when to retry (auth.go).
func grpcToOpenAI(err error) (int, string, string) {
	s, _ := status.FromError(err)
	switch s.Code() {
	case codes.Unauthenticated:
		return http.StatusUnauthorized, "invalid_request_error", "invalid_api_key"
	case codes.PermissionDenied:
		return http.StatusForbidden, "invalid_request_error", "permission_denied"
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest, "invalid_request_error", ""
	case codes.NotFound:
		return http.StatusNotFound, "invalid_request_error", "session_not_found"
	case codes.FailedPrecondition, codes.Aborted, codes.AlreadyExists:
		return http.StatusConflict, "invalid_request_error", ""
	case codes.ResourceExhausted:
		if tooLarge(s.Message()) {
			return http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large"
		}
		return http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded"
	case codes.Unavailable:
		return http.StatusServiceUnavailable, "server_error", ""
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout, "server_error", ""
	case codes.Canceled:
		return 499, "server_error", ""
	}
	return http.StatusInternalServerError, "server_error", ""
}

// tooLarge tells gRPC's own refusal of a message over the limit (RESOURCE_EXHAUSTED, "... larger than
// max (N vs. M)") from a quota or a full queue: retrying it can never succeed, so it is no 429.
func tooLarge(message string) bool {
	return strings.Contains(message, "larger than max")
}

func randomID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// modelInfoTries bounds modelInfo's attempts. GetModelInfo has no session, so a balancer sends it to
// any replica, and one that dies under it fails it; being a read, it is safe to send again at once.
const modelInfoTries = 3

func (o *openAI) modelInfo(ctx context.Context) (*steadyv1.ModelInfo, error) {
	var info *steadyv1.ModelInfo
	var err error
	for try := 0; try < modelInfoTries; try++ {
		info, err = o.client.GetModelInfo(ctx, &steadyv1.GetModelInfoRequest{})
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			break
		}
	}
	return info, err
}

func (o *openAI) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeOpenAIError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "", "use GET")
		return
	}
	info, err := o.modelInfo(withAPIKey(r.Context(), r))
	if err != nil {
		code, typ, errCode := grpcToOpenAI(err)
		writeOpenAIError(w, code, typ, "", errCode, status.Convert(err).Message())
		return
	}
	body, _ := json.Marshal(map[string]interface{}{
		"object": "list",
		"data":   []interface{}{map[string]interface{}{"id": info.ModelName, "object": "model", "created": 0, "owned_by": "steady"}},
	})
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(body, '\n'))
}

// request is the union of the completions and chat request bodies (checkFields, openai_fields.go,
// has refused every field it does not list).
type request struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Stop                json.RawMessage `json:"stop"`
	Seed                *int64          `json:"seed"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Logprobs         json.RawMessage `json:"logprobs"` // completions: a number; chat: a boolean
	TopLogprobs      *int32          `json:"top_logprobs"`
	Echo             bool            `json:"echo"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	SessionID        string          `json:"session_id"`
	// Structured output and the other sampling fields (openai_fields.go).
	ResponseFormat    json.RawMessage    `json:"response_format"`
	Grammar           *string            `json:"grammar"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	TopK              *int32             `json:"top_k"`
	// Tool calling (openai_tools.go).
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	// Speculative decoding (openai_speculation.go).
	Speculation json.RawMessage `json:"speculation"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// Tool calling: an assistant's calls (OpenAI's list, passed on as JSON), a tool result's call id
	// and function name.
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

// text of a chat message's content: a string, or OpenAI's list of {"type": "text", "text": ...} parts.
func (m chatMessage) text() (string, error) {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("content must be a string or a list of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part type %q is not supported (text only)", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// stringOrList reads a JSON string or list of strings ("stop", "prompt"); nil when absent.
func stringOrList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, err
	}
	return many, nil
}

// toGenerate checks an OpenAI request and turns it into a steady.v1 GenerateRequest, with the parser
// of the tool calls in its answer (nil: none asked for); on a refusal it has written the error and
// returns nil.
func (o *openAI) toGenerate(w http.ResponseWriter, r *http.Request, chat bool, req *request, info *steadyv1.ModelInfo) (*steadyv1.GenerateRequest, *toolParser) {
	model := info.ModelName
	if req.Model == "" {
		invalid(w, "model", "you must provide a model parameter")
		return nil, nil
	}
	if req.Model != model {
		writeOpenAIError(w, http.StatusNotFound, "invalid_request_error", "model", "model_not_found",
			fmt.Sprintf("The model `%s` does not exist; this server serves `%s` (GET /v1/models)", req.Model, model))
		return nil, nil
	}
	g := &steadyv1.GenerateRequest{SessionId: req.SessionID}
	var parser *toolParser
	if req.N != nil {
		if *req.N < 1 || *req.N > 1<<20 { // the server's own bound (16) is in its message
			invalid(w, "n", fmt.Sprintf("n = %d: must be in [1, 16]", *req.N))
			return nil, nil
		}
		g.N = int32(*req.N) // the server bounds it and refuses n > 1 with a session
	}
	if req.FrequencyPenalty != nil {
		g.FrequencyPenalty = float32(*req.FrequencyPenalty)
	}
	if req.PresencePenalty != nil {
		g.PresencePenalty = float32(*req.PresencePenalty)
	}
	bias, ok := logitBias(w, req.LogitBias)
	if !ok || !setResponseFormat(w, req.ResponseFormat, req.Grammar, g) || !setLogprobs(w, chat, req, g) ||
		!setSpeculation(w, req.Speculation, g) {
		return nil, nil
	}
	g.LogitBias = bias
	if g.SessionId == "" {
		g.SessionId = r.Header.Get("X-Steady-Session")
	}
	if chat {
		if len(req.Prompt) > 0 {
			invalid(w, "prompt", "chat completions take messages, not prompt")
			return nil, nil
		}
		if len(req.Messages) == 0 {
			invalid(w, "messages", "messages must not be empty")
			return nil, nil
		}
		for i, m := range req.Messages {
			text, err := m.text()
			if err != nil {
				invalid(w, fmt.Sprintf("messages[%d].content", i), err.Error())
				return nil, nil
			}
			message := &steadyv1.ChatMessage{Role: m.Role, Content: text, ToolCallId: m.ToolCallID, Name: m.Name}
			if calls := bytes.TrimSpace(m.ToolCalls); len(calls) > 0 && string(calls) != "null" && string(calls) != "[]" {
				message.ToolCallsJson = string(calls)
			}
			g.Messages = append(g.Messages, message)
		}
		var ok bool
		if parser, ok = setTools(w, req, info, g); !ok {
			return nil, nil
		}
	} else {
		if ids, ok := tokenIDs(req.Prompt); ok {
			g.PromptTokenIds = ids
		} else if prompts, err := stringOrList(req.Prompt); err == nil && len(prompts) <= 1 {
			if len(prompts) == 1 {
				g.Prompt = prompts[0]
			}
		} else {
			invalid(w, "prompt", "prompt must be a string or a list of token ids (one prompt per request)")
			return nil, nil
		}
		if req.Echo && g.Prompt == "" && len(g.PromptTokenIds) > 0 {
			invalid(w, "echo", "echo needs a text prompt")
			return nil, nil
		}
	}
	setSampling(req, chat, info, g) // openai_sampling.go
	if req.Seed != nil {
		g.Seed = uint64(*req.Seed)
	} else {
		var b [8]byte // OpenAI: without a seed, each call samples anew
		rand.Read(b[:])
		g.Seed = binary.LittleEndian.Uint64(b[:])
	}
	stops, err := stringOrList(req.Stop)
	if err != nil {
		invalid(w, "stop", "stop must be a string or a list of strings")
		return nil, nil
	}
	g.Stop = stops
	return g, parser
}

// tokenIDs reads a token-id prompt: [1, 2, 3] or [[1, 2, 3]] (a list holding one prompt).
func tokenIDs(raw json.RawMessage) ([]int32, bool) {
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return ids, true
	}
	var lists [][]int32
	if json.Unmarshal(raw, &lists) == nil && len(lists) == 1 && len(lists[0]) > 0 {
		return lists[0], true
	}
	return nil, false
}

// setLogprobs reads completions' logprobs (how many alternatives, 0..20) or chat's logprobs (a
// boolean) with top_logprobs; on a refusal it has written the error and returns false.
func setLogprobs(w http.ResponseWriter, chat bool, req *request, g *steadyv1.GenerateRequest) bool {
	raw := string(req.Logprobs)
	if raw == "" || raw == "null" {
		raw = "false"
	}
	if chat {
		var on bool
		if json.Unmarshal(req.Logprobs, &on) != nil && raw != "false" {
			invalid(w, "logprobs", "logprobs must be a boolean")
			return false
		}
		g.Logprobs = on
		if req.TopLogprobs != nil {
			if !on {
				invalid(w, "top_logprobs", "top_logprobs needs logprobs: true")
				return false
			}
			g.TopLogprobs = *req.TopLogprobs
		}
	} else if raw != "false" {
		var n int32
		if json.Unmarshal(req.Logprobs, &n) != nil {
			invalid(w, "logprobs", "logprobs must be a number of alternatives (0 to 20)")
			return false
		}
		g.Logprobs, g.TopLogprobs = true, n
	}
	if g.TopLogprobs < 0 || g.TopLogprobs > maxTopLogprobs {
		invalid(w, map[bool]string{false: "logprobs", true: "top_logprobs"}[chat],
			fmt.Sprintf("%d alternatives: must be 0 to %d", g.TopLogprobs, maxTopLogprobs))
		return false
	}
	return true
}

// tokenBytes are a token's UTF-8 bytes; a token that is part of a character comes as "\xNN" escapes.
func tokenBytes(token string) []int {
	raw := []byte(token)
	if strings.HasPrefix(token, "\\x") {
		if b, err := hex.DecodeString(strings.ReplaceAll(token, "\\x", "")); err == nil {
			raw = b
		}
	}
	out := make([]int, len(raw))
	for i, c := range raw {
		out[i] = int(c)
	}
	return out
}

// logprobsJSON writes the log-probabilities of some tokens in the endpoint's shape: chat's
// {"content": [{token, logprob, bytes, top_logprobs}]} or completions' parallel lists
// {tokens, token_logprobs, top_logprobs, text_offset}; offset is the text before the first token.
func logprobsJSON(chat bool, lps []*steadyv1.TokenLogprob, offset int) interface{} {
	if chat {
		content := []interface{}{}
		for _, l := range lps {
			top := []interface{}{}
			for _, t := range l.TopLogprobs {
				top = append(top, map[string]interface{}{"token": t.Token, "logprob": t.Logprob, "bytes": tokenBytes(t.Token)})
			}
			content = append(content, map[string]interface{}{"token": l.Token, "logprob": l.Logprob,
				"bytes": tokenBytes(l.Token), "top_logprobs": top})
		}
		return map[string]interface{}{"content": content}
	}
	tokens, logprobs, tops, offsets := []string{}, []float32{}, []interface{}{}, []int{}
	for _, l := range lps {
		tokens = append(tokens, l.Token)
		logprobs = append(logprobs, l.Logprob)
		top := map[string]float32{}
		for _, t := range l.TopLogprobs {
			top[t.Token] = t.Logprob
		}
		tops = append(tops, top)
		offsets = append(offsets, offset)
		offset += len(l.Token)
	}
	return map[string]interface{}{"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}
}

// usageJSON is OpenAI's usage object, with the prefix cache's share in prompt_tokens_details and
// speculation's counts (openai_speculation.go).
func usageJSON(u *steadyv1.Usage) map[string]interface{} {
	usage := map[string]interface{}{
		"prompt_tokens":         u.GetPromptTokens(),
		"completion_tokens":     u.GetCompletionTokens(),
		"total_tokens":          u.GetPromptTokens() + u.GetCompletionTokens(),
		"prompt_tokens_details": map[string]interface{}{"cached_tokens": u.GetCachedTokens()},
	}
	addSpeculationUsage(usage, u)
	return usage
}

func finishReason(reason string) string {
	if reason == "length" {
		return "length"
	}
	return "stop" // "stop" (a stop string or end of sequence), or "cancelled" by a draining server
}

func (o *openAI) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	if r.Method != http.MethodPost {
		writeOpenAIError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "", "use POST")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		invalid(w, "", "the request body is unreadable: "+err.Error())
		return
	}
	if len(body) > maxBodyBytes {
		writeOpenAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large",
			fmt.Sprintf("the request body is larger than the %d bytes (16 MiB) a request may take; feed a longer input to a "+
				"session in parts (docs/api.md, \"Long inputs\")", maxBodyBytes))
		return
	}
	if message := utf8Error(body); message != "" {
		invalid(w, jsonPath(body, badUTF8(body)), message)
		return
	}
	if !checkFields(w, chat, body) {
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		invalid(w, "", "the request body is not valid JSON: "+err.Error())
		return
	}
	ctx := withAPIKey(r.Context(), r) // every call of this request carries the client's key
	info, err := o.modelInfo(ctx)
	if err != nil {
		code, typ, errCode := grpcToOpenAI(err)
		writeOpenAIError(w, code, typ, "", errCode, status.Convert(err).Message())
		return
	}
	model := info.ModelName
	g, tools := o.toGenerate(w, r, chat, &req, info)
	if g == nil {
		return
	}
	if g.SessionId != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-steady-session", g.SessionId) // nginx routes on it
	}
	stream, err := o.client.Generate(ctx, g, grpc.WaitForReady(false))
	id := randomID(map[bool]string{false: "cmpl-", true: "chatcmpl-"}[chat])
	created := time.Now().Unix()
	object := map[bool]string{false: "text_completion", true: "chat.completion"}[chat]
	echo := ""
	if req.Echo && !chat {
		echo = g.Prompt
	}
	if req.Stream {
		o.streamSSE(w, stream, err, sseCall{chat: chat, id: id, created: created, model: model, echo: echo,
			includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, logprobs: g.Logprobs, session: g.SessionId,
			tools: tools})
		return
	}
	// Each choice's text, log-probabilities and finish_reason, by index (n > 1: messages interleave).
	n := int(g.N)
	if n < 1 {
		n = 1
	}
	texts := make([]strings.Builder, n)
	lps := make([][]*steadyv1.TokenLogprob, n)
	reasons := make([]string, n)
	var usage *steadyv1.Usage
	for err == nil {
		var m *steadyv1.GenerateResponse
		m, err = stream.Recv()
		if err != nil {
			break
		}
		i := int(m.Index)
		if i < 0 || i >= n {
			err = status.Errorf(codes.Internal, "a message for choice %d of %d", i, n)
			break
		}
		texts[i].WriteString(m.Text)
		lps[i] = append(lps[i], m.Logprobs...)
		if m.FinishReason != "" {
			reasons[i] = m.FinishReason
		}
		if m.Usage != nil {
			usage = m.Usage
		}
	}
	if err == io.EOF && usage == nil {
		err = status.Error(codes.Internal, "the stream ended without a last message")
	}
	if err != io.EOF {
		code, typ, errCode := grpcToOpenAI(err)
		writeOpenAIError(w, code, typ, "", errCode, status.Convert(err).Message())
		return
	}
	choices := []interface{}{}
	for i := 0; i < n; i++ {
		choice := map[string]interface{}{"index": i, "logprobs": nil, "finish_reason": finishReason(reasons[i])}
		if g.Logprobs {
			choice["logprobs"] = logprobsJSON(chat, lps[i], len(echo))
		}
		if chat {
			message := map[string]interface{}{"role": "assistant", "content": texts[i].String()}
			if tools != nil {
				if content, calls := tools.parse(texts[i].String()); len(calls) > 0 {
					message["content"], message["tool_calls"] = nil, calls
					if content != "" {
						message["content"] = content
					}
					if reasons[i] != "length" {
						choice["finish_reason"] = "tool_calls"
					}
				}
			}
			choice["message"] = message
		} else {
			choice["text"] = echo + texts[i].String()
		}
		choices = append(choices, choice)
	}
	resp := map[string]interface{}{"id": id, "object": object, "created": created, "model": model,
		"choices": choices, "usage": usageJSON(usage)}
	if g.SessionId != "" {
		resp["session_id"] = g.SessionId
	}
	out, _ := json.Marshal(resp)
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(out, '\n'))
}

// sseCall is what a streamed answer's chunks repeat or need.
type sseCall struct {
	chat                   bool
	id, model, session     string
	created                int64
	echo                   string // completions' echo: the prompt, sent first
	includeUsage, logprobs bool
	tools                  *toolParser // chat with tools: calls are read out of each choice's text
}

// streamSSE writes the Generate stream as server-sent events: one "data: {chunk}" per message,
// the finish_reason on the last, then usage (stream_options.include_usage), then "data: [DONE]".
func (o *openAI) streamSSE(w http.ResponseWriter, stream steadyv1.Inference_GenerateClient, err error, c sseCall) {
	flusher, _ := w.(http.Flusher)
	chat := c.chat
	object := map[bool]string{false: "text_completion", true: "chat.completion.chunk"}[chat]
	started := false
	send := func(v interface{}) {
		if !started {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	offsets := map[int32]int{} // completions' text_offset, per choice
	chunk := func(index int32, text string, finish interface{}, first bool, lps []*steadyv1.TokenLogprob) map[string]interface{} {
		choice := map[string]interface{}{"index": index, "logprobs": nil, "finish_reason": finish}
		if c.logprobs && len(lps) > 0 {
			offset, seen := offsets[index]
			if !seen {
				offset = len(c.echo)
			}
			choice["logprobs"] = logprobsJSON(chat, lps, offset)
			for _, l := range lps {
				offset += len(l.Token)
			}
			offsets[index] = offset
		}
		if chat {
			delta := map[string]interface{}{}
			if first {
				delta["role"] = "assistant"
			}
			if text != "" || first {
				delta["content"] = text
			}
			choice["delta"] = delta
		} else {
			choice["text"] = text
		}
		out := map[string]interface{}{"id": c.id, "object": object, "created": c.created, "model": c.model,
			"choices": []interface{}{choice}}
		if c.session != "" {
			out["session_id"] = c.session
		}
		return out
	}
	startedChoice := map[int32]bool{} // each choice's first chunk carries the role (chat) or the echo
	toolStreams := map[int32]*toolStream{}
	var usage *steadyv1.Usage
	for err == nil {
		var m *steadyv1.GenerateResponse
		m, err = stream.Recv()
		if err != nil {
			break
		}
		if m.Usage != nil {
			usage = m.Usage
		}
		var finish interface{}
		if m.FinishReason != "" {
			finish = finishReason(m.FinishReason)
		}
		first := !startedChoice[m.Index]
		text := m.Text
		if first {
			text = c.echo + text // completions' echo: the prompt comes first
		}
		var calls []interface{}
		if c.tools != nil { // text that may be a call is held until it is one (or is not)
			ts := toolStreams[m.Index]
			if ts == nil {
				ts = &toolStream{p: c.tools}
				toolStreams[m.Index] = ts
			}
			content, completed := ts.add(text)
			if finish != nil {
				rest, last := ts.flush()
				content, completed = content+rest, append(completed, last...)
			}
			text, calls = content, ts.deltas(completed)
			if finish != nil && ts.calls > 0 && m.FinishReason != "length" {
				finish = "tool_calls"
			}
		}
		if text != "" || len(calls) > 0 || finish != nil || (first && m.Usage == nil) || (c.logprobs && len(m.Logprobs) > 0) {
			out := chunk(m.Index, text, finish, first, m.Logprobs)
			if len(calls) > 0 {
				out["choices"].([]interface{})[0].(map[string]interface{})["delta"].(map[string]interface{})["tool_calls"] = calls
			}
			send(out)
			startedChoice[m.Index] = true
		}
	}
	if err != io.EOF {
		code, typ, errCode := grpcToOpenAI(err)
		if !started {
			writeOpenAIError(w, code, typ, "", errCode, status.Convert(err).Message())
			return
		}
		// The stream has begun: the error is an event of its own, and no [DONE].
		e := openAIError{Message: status.Convert(err).Message(), Type: typ}
		if errCode != "" {
			e.Code = errCode
		}
		send(map[string]openAIError{"error": e})
		return
	}
	if c.includeUsage && usage != nil {
		last := chunk(0, "", nil, false, nil)
		last["choices"] = []interface{}{}
		last["usage"] = usageJSON(usage)
		send(last)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}
