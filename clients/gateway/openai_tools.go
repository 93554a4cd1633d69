package main

// OpenAI tool calling on /v1/chat/completions (docs/api.md, "Tool calling"): `tools` and `tool_choice`
// go to the server, which renders the tools with the model's own chat template; the calls the model
// writes come back out of its text as `tool_calls`, whole or streamed as OpenAI streams them. How a
// model writes a call is its template's (GetModelInfo's tool_call_format): "hermes" (Qwen, Hermes:
// <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number, text around them is content)
// or "llama3_json" (Llama 3.1+: the whole answer is {"name": ..., "parameters": {...}}). tool_choice
// "required" or a named function holds the answer to a call through the server's structured output
// (a GBNF grammar: the call's frame, the name, and arguments that are a JSON object).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	steadyv1 "steady/v1"
)

const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	pythonTag   = "<|python_tag|>" // Llama 3.1 may put it before a call
)

type toolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

type tool struct {
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

// toolCall is one call read out of the model's text, in OpenAI's shape (arguments as JSON text).
type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolParser reads the calls of one tool_call_format out of a choice's text; nil: no tools asked.
type toolParser struct {
	style string
}

// setTools reads tools, tool_choice and parallel_tool_calls into g (the tools' JSON for the template,
// and for a required call a grammar); it returns the parser for the answer (nil when no call is to be
// read back). On a refusal it has written the error and returns ok false.
func setTools(w http.ResponseWriter, req *request, info *steadyv1.ModelInfo, g *steadyv1.GenerateRequest) (*toolParser, bool) {
	var tools []tool
	if len(req.Tools) > 0 && string(req.Tools) != "null" {
		d := json.NewDecoder(bytes.NewReader(req.Tools))
		d.DisallowUnknownFields()
		if err := d.Decode(&tools); err != nil {
			invalid(w, "tools", "tools must be a list of {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}: "+err.Error())
			return nil, false
		}
	}
	names := map[string]bool{}
	for i, t := range tools {
		if t.Type != "function" {
			invalid(w, fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("tool type %q is not supported (function only)", t.Type))
			return nil, false
		}
		if t.Function.Name == "" || names[t.Function.Name] {
			invalid(w, fmt.Sprintf("tools[%d].function.name", i), "each tool needs a name of its own")
			return nil, false
		}
		names[t.Function.Name] = true
	}
	choice, named := "auto", ""
	if raw := bytes.TrimSpace(req.ToolChoice); len(raw) > 0 && string(raw) != "null" {
		var object struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &choice) == nil {
			if choice != "none" && choice != "auto" && choice != "required" {
				invalid(w, "tool_choice", fmt.Sprintf("tool_choice %q: must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\"}}", choice))
				return nil, false
			}
		} else if json.Unmarshal(raw, &object) == nil && object.Type == "function" && object.Function.Name != "" {
			choice, named = "function", object.Function.Name
			if !names[named] {
				invalid(w, "tool_choice", fmt.Sprintf("tool_choice names %q, which is not one of the tools", named))
				return nil, false
			}
		} else {
			invalid(w, "tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\"}}")
			return nil, false
		}
	}
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls && info.ToolCallFormat == "hermes" && choice != "function" {
		invalid(w, "parallel_tool_calls", "parallel_tool_calls: false is not supported: the model may write several calls in one answer (a named tool_choice asks for exactly one)")
		return nil, false
	}
	if len(tools) == 0 {
		if choice == "required" || choice == "function" {
			invalid(w, "tool_choice", "tool_choice "+choice+" needs tools")
			return nil, false
		}
		return nil, true
	}
	if choice == "none" {
		return nil, true // OpenAI: the model calls no tool; the template is not shown them
	}
	if info.ToolCallFormat != "hermes" && info.ToolCallFormat != "llama3_json" {
		invalid(w, "tools", "tool calling needs a chat template whose tool-call format Steady reads (hermes <tool_call> tags or Llama 3.1 JSON); this model's has none: "+
			"its calls could not come back as tool_calls")
		return nil, false
	}
	g.ToolsJson = string(req.Tools)
	if choice == "required" || choice == "function" {
		if g.ResponseFormat != nil {
			invalid(w, "tool_choice", "tool_choice "+choice+" holds the answer to a tool call: it cannot be combined with response_format or grammar")
			return nil, false
		}
		call := []string{}
		for _, t := range tools {
			if named == "" || t.Function.Name == named {
				call = append(call, strconv.Quote(strconv.Quote(t.Function.Name)))
			}
		}
		g.ResponseFormat = &steadyv1.ResponseFormat{Type: "grammar", Grammar: toolGrammar(info.ToolCallFormat, call)}
	}
	return &toolParser{style: info.ToolCallFormat}, true
}

// toolGrammar: one call in the model's format, the name one of `names` (GBNF literals of JSON
// strings), the arguments any JSON object (their schema is the model's to follow).
func toolGrammar(style string, names []string) string {
	root := `root ::= "<tool_call>\n{\"name\": " name ", \"arguments\": " object "}\n</tool_call>"`
	if style == "llama3_json" {
		root = `root ::= "{\"name\": " name ", \"parameters\": " object "}"`
	}
	return root + "\nname ::= " + strings.Join(names, " | ") + `
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( string ": " value ( ", " string ": " value )* )? "}"
array ::= "[" ( value ( ", " value )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
`
}

// parse splits a whole answer into its content (text outside the calls; empty when there is none)
// and its calls; text that only looks like a call (JSON that does not parse, no name) stays content.
func (p *toolParser) parse(text string) (string, []toolCall) {
	if p.style == "llama3_json" {
		if call, ok := llamaCall(text); ok {
			return "", []toolCall{call}
		}
		return text, nil
	}
	var content strings.Builder
	var calls []toolCall
	rest := text
	for {
		open := strings.Index(rest, hermesOpen)
		if open < 0 {
			break
		}
		end := strings.Index(rest[open:], hermesClose)
		if end < 0 {
			break
		}
		call, ok := hermesCall(rest[open+len(hermesOpen) : open+end])
		if !ok {
			break
		}
		content.WriteString(rest[:open])
		calls = append(calls, call)
		rest = rest[open+end+len(hermesClose):]
	}
	content.WriteString(rest)
	if len(calls) == 0 {
		return text, nil
	}
	return strings.TrimSpace(content.String()), calls
}

// newCall makes an OpenAI tool call of a name and arguments (a JSON value, written compact).
func newCall(name string, arguments json.RawMessage) (toolCall, bool) {
	var c toolCall
	if name == "" {
		return c, false
	}
	var compact bytes.Buffer
	if len(arguments) == 0 {
		arguments = json.RawMessage("{}")
	}
	if json.Compact(&compact, arguments) != nil {
		return c, false
	}
	c.ID, c.Type = randomID("call_"), "function"
	c.Function.Name, c.Function.Arguments = name, compact.String()
	return c, true
}

// hermesCall reads the inside of <tool_call>...</tool_call>: {"name": ..., "arguments": {...}}.
func hermesCall(inside string) (toolCall, bool) {
	var j struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(inside)), &j) != nil {
		return toolCall{}, false
	}
	return newCall(j.Name, j.Arguments)
}

// llamaCall reads a Llama 3.1 answer that is one call: {"name": ..., "parameters": {...}} (or
// "arguments"), perhaps after <|python_tag|>.
func llamaCall(text string) (toolCall, bool) {
	text = strings.TrimPrefix(strings.TrimSpace(text), pythonTag)
	var j struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
		Arguments  json.RawMessage `json:"arguments"`
	}
	if !strings.HasPrefix(strings.TrimSpace(text), "{") || json.Unmarshal([]byte(text), &j) != nil {
		return toolCall{}, false
	}
	if len(j.Parameters) == 0 {
		j.Parameters = j.Arguments
	}
	return newCall(j.Name, j.Parameters)
}

// toolStream reads one choice's streamed text: content goes out as it comes, except text that is or
// may become a call, which is held until the call is complete (hermes: its closing tag; llama3_json:
// the end of the answer, since the whole answer is the call) and then goes out as one tool_calls delta.
type toolStream struct {
	p       *toolParser
	held    string // text not yet sent: a possible call, or the start of one
	calls   int    // calls sent so far (each delta's index)
	jsonAll bool   // llama3_json: the answer began as JSON, so it is held to the end
	started bool   // llama3_json: some non-space text came
}

// add takes new text and returns the content to send now and the calls completed.
func (s *toolStream) add(text string) (string, []toolCall) {
	s.held += text
	if s.p.style == "llama3_json" {
		if !s.started {
			trimmed := strings.TrimLeft(s.held, " \t\r\n")
			if trimmed == "" || strings.HasPrefix(pythonTag, trimmed) {
				return "", nil // still undecided
			}
			s.started = true
			s.jsonAll = strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, pythonTag)
		}
		if s.jsonAll {
			return "", nil
		}
		out := s.held
		s.held = ""
		return out, nil
	}
	var content strings.Builder
	var calls []toolCall
	for {
		open := strings.Index(s.held, hermesOpen)
		if open < 0 {
			// Send all but a tail that may be the start of "<tool_call>".
			keep := 0
			for k := len(hermesOpen) - 1; k > 0; k-- {
				if strings.HasSuffix(s.held, hermesOpen[:k]) {
					keep = k
					break
				}
			}
			content.WriteString(s.held[:len(s.held)-keep])
			s.held = s.held[len(s.held)-keep:]
			break
		}
		end := strings.Index(s.held[open:], hermesClose)
		if end < 0 {
			content.WriteString(s.held[:open])
			s.held = s.held[open:]
			break
		}
		if call, ok := hermesCall(s.held[open+len(hermesOpen) : open+end]); ok {
			content.WriteString(s.held[:open])
			calls = append(calls, call)
		} else {
			content.WriteString(s.held[:open+end+len(hermesClose)]) // not a call: text after all
		}
		s.held = s.held[open+end+len(hermesClose):]
	}
	return content.String(), calls
}

// flush ends the answer: what was held goes out as a call or as content.
func (s *toolStream) flush() (string, []toolCall) {
	held := s.held
	s.held = ""
	if s.p.style == "llama3_json" && s.jsonAll {
		if call, ok := llamaCall(held); ok {
			return "", []toolCall{call}
		}
	}
	return held, nil
}

// deltas are the calls as streamed tool_calls entries (the whole arguments in one fragment).
func (s *toolStream) deltas(calls []toolCall) []interface{} {
	out := []interface{}{}
	for _, c := range calls {
		out = append(out, map[string]interface{}{"index": s.calls, "id": c.ID, "type": "function",
			"function": map[string]interface{}{"name": c.Function.Name, "arguments": c.Function.Arguments}})
		s.calls++
	}
	return out
}
