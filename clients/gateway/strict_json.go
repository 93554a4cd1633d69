package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/golang/protobuf/jsonpb"
	"github.com/golang/protobuf/proto"
	"github.com/grpc-ecosystem/grpc-gateway/runtime"
)

// strictJSON is the gateway's JSON marshaler (runtime.JSONPb) except that a request body naming a
// field the message does not have is refused (INVALID_ARGUMENT: HTTP 400) instead of ignored:
// a typo such as "max_token" must not silently turn a Generate into a prefill-only call.
// grpc-gateway v1.6.4 hard-codes AllowUnknownFields: true in JSONPb's decoder. Text that is not
// UTF-8 is refused naming the field and byte (utf8_fields.go), not turned into U+FFFD.
type strictJSON struct {
	*runtime.JSONPb // responses: Marshal, NewEncoder, ContentType, Delimiter
}

func (m strictJSON) Unmarshal(data []byte, v interface{}) error {
	return m.NewDecoder(bytes.NewReader(data)).Decode(v)
}

// NewDecoder reads one JSON value per Decode; a client-streaming body (ImportSession) is a sequence
// of JSON objects.
func (m strictJSON) NewDecoder(r io.Reader) runtime.Decoder {
	d := json.NewDecoder(r)
	return runtime.DecoderFunc(func(v interface{}) error {
		message, ok := v.(proto.Message)
		if !ok { // not a request body: path or query parameters
			return runtime.DecoderWrapper{Decoder: d}.Decode(v)
		}
		var raw json.RawMessage // one value, checked for UTF-8 before jsonpb would replace bad bytes
		if err := d.Decode(&raw); err != nil {
			return err
		}
		if message := utf8Error(raw); message != "" {
			return errors.New(message)
		}
		return (&jsonpb.Unmarshaler{}).Unmarshal(bytes.NewReader(raw), message)
	})
}
