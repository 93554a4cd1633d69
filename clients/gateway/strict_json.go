package main

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/golang/protobuf/jsonpb"
	"github.com/golang/protobuf/proto"
	"github.com/grpc-ecosystem/grpc-gateway/runtime"
)

// strictJSON is the gateway's JSON marshaler (runtime.JSONPb) except that a request body naming a
// field the message does not have is refused (INVALID_ARGUMENT: HTTP 400) instead of ignored:
// a typo such as "max_token" must not silently turn a Generate into a prefill-only call.
// grpc-gateway v1.6.4 hard-codes AllowUnknownFields: true in JSONPb's decoder.
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
		return (&jsonpb.Unmarshaler{}).UnmarshalNext(d, message)
	})
}
