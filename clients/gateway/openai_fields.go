package main

// The OpenAI request fields steady-gateway knows (docs/api.md, "Every OpenAI field"): every field of
// OpenAI's completions and chat completions requests, each implemented or refused with a 400 that
// names it (never ignored), and Steady's extensions. A field outside this table is refused too: a
// typo must not silently change a request. tests/node/openai_client.cjs walks the official openai
// package's field lists against this table.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	steadyv1 "steady/v1"
)

type fieldUse int

const (
	forChat fieldUse = 1 << iota
	forCompletions
	forBoth = forChat | forCompletions
)

type fieldRule struct {
	use     fieldUse
	refused string // why Steady does not implement it; empty: implemented
	// For a refused field: whether a value asks for nothing beyond what Steady does (the field's
	// default, such as "store": false), which is then accepted.
	harmless func(raw json.RawMessage) bool
}

func isJSON(values ...string) func(json.RawMessage) bool {
	return func(raw json.RawMessage) bool {
		var compact bytes.Buffer
		if json.Compact(&compact, raw) != nil {
			return false
		}
		for _, v := range values {
			if compact.String() == v {
				return true
			}
		}
		return false
	}
}

const noFunctions = "the deprecated functions API is not supported: use tools and tool_choice"

var openAIFields = map[string]fieldRule{
	// Implemented (docs/api.md).
	"model":                 {use: forBoth},
	"messages":              {use: forChat},
	"prompt":                {use: forCompletions},
	"max_tokens":            {use: forBoth},
	"max_completion_tokens": {use: forChat},
	"temperature":           {use: forBoth},
	"top_p":                 {use: forBoth},
	"n":                     {use: forBoth},
	"stop":                  {use: forBoth},
	"seed":                  {use: forBoth},
	"stream":                {use: forBoth},
	"stream_options":        {use: forBoth},
	"logprobs":              {use: forBoth},
	"top_logprobs":          {use: forChat},
	"echo":                  {use: forCompletions},
	"presence_penalty":      {use: forBoth},
	"frequency_penalty":     {use: forBoth},
	"logit_bias":            {use: forBoth},
	"response_format":       {use: forBoth},
	// Tool calling (openai_tools.go): with a chat template whose calls Steady reads back.
	"tools":               {use: forChat},
	"tool_choice":         {use: forChat},
	"parallel_tool_calls": {use: forChat},
	// Accepted, and asking for nothing Steady could do differently: OpenAI uses these to identify
	// end users for abuse monitoring and to route to its caches; Steady's prefix cache needs no key.
	"user":              {use: forBoth},
	"safety_identifier": {use: forChat},
	"prompt_cache_key":  {use: forChat},
	// Steady's extensions.
	"session_id":         {use: forBoth},
	"grammar":            {use: forBoth},
	"repetition_penalty": {use: forBoth},
	"top_k":              {use: forBoth},
	"speculation":        {use: forBoth}, // openai_speculation.go
	// Refused unless they ask for their default.
	"functions":           {use: forChat, refused: noFunctions, harmless: isJSON("[]")},
	"function_call":       {use: forChat, refused: noFunctions, harmless: isJSON(`"none"`, `"auto"`)},
	"audio":               {use: forChat, refused: "audio output is not supported (text only)"},
	"modalities":          {use: forChat, refused: "only the text modality is supported", harmless: isJSON(`["text"]`)},
	"store":               {use: forChat, refused: "Steady stores no completions", harmless: isJSON("false")},
	"metadata":            {use: forChat, refused: "metadata is for stored completions, and Steady stores none", harmless: isJSON("{}")},
	"prediction":          {use: forChat, refused: "predicted outputs are not supported"},
	"reasoning_effort":    {use: forChat, refused: "the model has no reasoning mode"},
	"verbosity":           {use: forChat, refused: "the model has no verbosity setting"},
	"web_search_options":  {use: forChat, refused: "web search is not supported"},
	"service_tier":        {use: forChat, refused: "Steady has one service tier", harmless: isJSON(`"auto"`, `"default"`)},
	"best_of":             {use: forCompletions, refused: "best_of > 1 is not supported (n is)", harmless: isJSON("1")},
	"suffix":              {use: forCompletions, refused: "suffix (insertion) is not supported", harmless: isJSON(`""`)},
}

// checkFields refuses a body naming a field that is unknown, belongs to the other endpoint, or is
// refused with a value other than its default; on a refusal it has written the error and returns
// false. null stands for an absent field.
func checkFields(w http.ResponseWriter, chat bool, body []byte) bool {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		invalid(w, "", "the request body is not a JSON object: "+err.Error())
		return false
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names) // the first offending field is the same on every call
	endpoint, use := "completions", forCompletions
	if chat {
		endpoint, use = "chat completions", forChat
	}
	for _, name := range names {
		raw := fields[name]
		if string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		rule, known := openAIFields[name]
		switch {
		case !known:
			invalid(w, name, fmt.Sprintf("unknown field `%s` (docs/api.md lists the fields Steady takes)", name))
			return false
		case rule.use&use == 0:
			invalid(w, name, fmt.Sprintf("`%s` is not a field of %s", name, endpoint))
			return false
		case rule.refused != "" && (rule.harmless == nil || !rule.harmless(raw)):
			invalid(w, name, fmt.Sprintf("`%s` is not supported: %s", name, rule.refused))
			return false
		}
	}
	return true
}

// responseFormat is OpenAI's response_format: {"type": "text" | "json_object" | "json_schema",
// "json_schema": {"name", "description", "schema", "strict"}}.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// setResponseFormat reads response_format (and Steady's grammar extension) into g; on a refusal it
// has written the error and returns false. The schema's text goes to the server as it came (its
// property order is the order the answer's properties come in); the server compiles it and names
// what it cannot do. Steady holds the answer to the schema whether strict is true or false.
func setResponseFormat(w http.ResponseWriter, raw json.RawMessage, grammar *string, g *steadyv1.GenerateRequest) bool {
	var f responseFormat
	if len(raw) > 0 && string(raw) != "null" {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&f); err != nil {
			invalid(w, "response_format", "response_format: "+err.Error())
			return false
		}
	}
	switch f.Type {
	case "", "text":
		if f.JSONSchema != nil {
			invalid(w, "response_format", "response_format: json_schema needs type json_schema")
			return false
		}
	case "json_object":
		g.ResponseFormat = &steadyv1.ResponseFormat{Type: "json_object"}
	case "json_schema":
		if f.JSONSchema == nil {
			invalid(w, "response_format.json_schema", "response_format: type json_schema needs json_schema")
			return false
		}
		schema := string(f.JSONSchema.Schema)
		if schema == "" || schema == "null" {
			schema = "{}" // OpenAI's schema is optional: any JSON value
		}
		g.ResponseFormat = &steadyv1.ResponseFormat{Type: "json_schema", JsonSchema: schema}
	default:
		invalid(w, "response_format.type", fmt.Sprintf("response_format.type %q: must be text, json_object or json_schema", f.Type))
		return false
	}
	if grammar != nil {
		if g.ResponseFormat != nil {
			invalid(w, "grammar", "grammar and response_format: give one")
			return false
		}
		g.ResponseFormat = &steadyv1.ResponseFormat{Type: "grammar", Grammar: *grammar}
	}
	return true
}

// logitBias reads OpenAI's logit_bias: {"token id": bias}; on a refusal it has written the error.
func logitBias(w http.ResponseWriter, bias map[string]float64) (map[int32]float32, bool) {
	if len(bias) == 0 {
		return nil, true
	}
	out := make(map[int32]float32, len(bias))
	for key, v := range bias {
		id, err := strconv.ParseInt(key, 10, 32)
		if err != nil || id < 0 {
			invalid(w, "logit_bias", fmt.Sprintf("logit_bias: key %q is not a token id", key))
			return nil, false
		}
		out[int32(id)] = float32(v)
	}
	return out, true
}
