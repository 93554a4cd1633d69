package main

import (
	"testing"

	"google.golang.org/grpc/codes"

	steadyv1 "steady/v1"
)

func TestResumableCodes(t *testing.T) {
	for _, c := range []struct {
		code       codes.Code
		message    string
		retryAfter bool
		want       bool
	}{
		{codes.Unavailable, "unexpected HTTP status code received from server: 502 (Bad Gateway)", false, true},
		{codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR", false, true},
		{codes.Canceled, "the server is stopping", false, true},
		{codes.Unavailable, "session s is served by replica2 ... it is alive", true, false}, // a live holder's refusal
		{codes.Internal, "a bug", false, false},
		{codes.Aborted, "session moved past position 3", false, false},
		{codes.InvalidArgument, "bad", false, false},
	} {
		if got := resumable(c.code, c.message, c.retryAfter); got != c.want {
			t.Errorf("resumable(%v, %q, %v) = %v, want %v", c.code, c.message, c.retryAfter, got, c.want)
		}
	}
}

// A resumed attempt repeats the cut one's tokens and text in other message boundaries: only what
// is past them reaches the client, and a repeated token that differs is caught.
func TestDropRepeated(t *testing.T) {
	s := &resumingStream{sent: passedOn{ids: []int32{1, 2, 3}, text: "a bc"}}
	s.repeat.ids, s.repeat.text = 3, 4
	first := &steadyv1.GenerateResponse{TokenIds: []int32{1, 2}, Text: "a b",
		Logprobs: []*steadyv1.TokenLogprob{{TokenId: 1}, {TokenId: 2}}}
	if !s.dropRepeated(first) || len(first.TokenIds) != 0 || first.Text != "" || len(first.Logprobs) != 0 {
		t.Fatalf("first message not dropped whole: %v", first)
	}
	second := &steadyv1.GenerateResponse{TokenIds: []int32{3, 4}, Text: "cd",
		Logprobs: []*steadyv1.TokenLogprob{{TokenId: 3}, {TokenId: 4}}}
	if !s.dropRepeated(second) || len(second.TokenIds) != 1 || second.TokenIds[0] != 4 || second.Text != "d" ||
		len(second.Logprobs) != 1 || second.Logprobs[0].TokenId != 4 {
		t.Fatalf("second message: %v, want token 4 and text d", second)
	}
	third := &steadyv1.GenerateResponse{TokenIds: []int32{5}, Text: "e"}
	if !s.dropRepeated(third) || len(third.TokenIds) != 1 || third.Text != "e" {
		t.Fatalf("past the cut, a message passes as it is: %v", third)
	}
	// A first attempt repeats nothing.
	fresh := &resumingStream{sent: passedOn{ids: []int32{1}, text: "a"}}
	if m := (&steadyv1.GenerateResponse{TokenIds: []int32{1}, Text: "a"}); !fresh.dropRepeated(m) || len(m.TokenIds) != 1 {
		t.Fatalf("a first attempt's message was cut: %v", m)
	}
	other := &resumingStream{sent: passedOn{ids: []int32{1, 2}, text: "ab"}}
	other.repeat.ids, other.repeat.text = 2, 2
	if other.dropRepeated(&steadyv1.GenerateResponse{TokenIds: []int32{1, 9}, Text: "ax"}) {
		t.Fatalf("a different token was accepted")
	}
}
