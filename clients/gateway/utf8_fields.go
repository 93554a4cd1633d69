package main

// Request bodies whose text is not UTF-8 are refused naming the field and the byte, before Go's JSON
// decoder would silently turn each bad byte (or an escaped lone surrogate, "\ud800") into U+FFFD and
// so change the prompt the model sees.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// badUTF8 finds the first byte of body that is not UTF-8, or the first \uXXXX escape of a surrogate
// without its pair; -1 when there is none.
func badUTF8(body []byte) int {
	if !utf8.Valid(body) {
		for i := 0; i < len(body); {
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n == 1 {
				return i
			}
			i += n
		}
	}
	for i := 0; i+6 <= len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if body[i+1] != 'u' {
			i++ // an escaped character: "\\" must not start another escape
			continue
		}
		v, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		if err != nil || !utf16.IsSurrogate(rune(v)) {
			continue
		}
		if v < 0xdc00 && i+12 <= len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
			if w, err := strconv.ParseUint(string(body[i+8:i+12]), 16, 16); err == nil && w >= 0xdc00 && w <= 0xdfff {
				i += 11 // a pair
				continue
			}
		}
		return i
	}
	return -1
}

// jsonPath names the value of body that holds byte `at` ("messages[1].content"); "" for bytes
// outside every value (or a body that does not parse).
func jsonPath(body []byte, at int) string {
	type frame struct {
		array bool
		index int
		key   string
	}
	var stack []frame
	name := func() string {
		var b bytes.Buffer
		for i, f := range stack {
			if f.array {
				fmt.Fprintf(&b, "[%d]", f.index)
			} else {
				if i > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			}
		}
		return b.String()
	}
	expectKey := func() bool { return len(stack) > 0 && !stack[len(stack)-1].array && stack[len(stack)-1].key == "" }
	done := func() { // a value ended: the next is a key (objects) or the next index (arrays)
		if len(stack) == 0 {
			return
		}
		if top := &stack[len(stack)-1]; top.array {
			top.index++
		} else {
			top.key = ""
		}
	}
	d := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := d.Token()
		if err != nil {
			return ""
		}
		end := int(d.InputOffset())
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{})
			case '[':
				stack = append(stack, frame{array: true})
			default:
				stack = stack[:len(stack)-1]
				done()
			}
		case string:
			if expectKey() {
				stack[len(stack)-1].key = t
				if end > at {
					return name()
				}
				continue
			}
			if end > at {
				return name()
			}
			done()
		default:
			done()
		}
	}
}

// utf8Error is the refusal of a body that is not UTF-8 ("" when it is).
func utf8Error(body []byte) string {
	at := badUTF8(body)
	if at < 0 {
		return ""
	}
	what := fmt.Sprintf("byte 0x%02x", body[at])
	if body[at] == '\\' {
		what = "an escaped lone surrogate " + string(body[at:at+6])
	}
	field := jsonPath(body, at)
	if field == "" {
		field = "the request body"
	}
	return fmt.Sprintf("%s: not valid UTF-8 (%s at byte %d of the request body)", field, what, at)
}
