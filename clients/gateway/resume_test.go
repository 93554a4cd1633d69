package main

import (
	"context"
	"io"
	"testing"

	"github.com/golang/protobuf/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

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

// fakeAttempt is one Generate attempt: it answers its messages, then err (io.EOF: the end).
type fakeAttempt struct {
	grpc.ClientStream
	sent     []*steadyv1.GenerateRequest
	messages []*steadyv1.GenerateResponse
	err      error
	header   metadata.MD // nil: cut before the replica took the turn up (no initial metadata)
}

func (f *fakeAttempt) SendMsg(m interface{}) error {
	f.sent = append(f.sent, proto.Clone(m.(*steadyv1.GenerateRequest)).(*steadyv1.GenerateRequest))
	return nil
}
func (f *fakeAttempt) Header() (metadata.MD, error) {
	if f.header == nil {
		return nil, f.err
	}
	return f.header, nil
}
func (f *fakeAttempt) CloseSend() error         { return nil }
func (f *fakeAttempt) Trailer() metadata.MD     { return metadata.MD{} }
func (f *fakeAttempt) Context() context.Context { return context.Background() }
func (f *fakeAttempt) RecvMsg(m interface{}) error {
	if len(f.messages) == 0 {
		return f.err
	}
	proto.Merge(m.(*steadyv1.GenerateResponse), f.messages[0])
	f.messages = f.messages[1:]
	return nil
}

// A turn committed just before its replica died: the resend (all_or_nothing, expected_position) is
// answered with the stored outcome in one message, and the client gets the whole turn once.
func TestAReplayCompletesACutTurn(t *testing.T) {
	first := &fakeAttempt{messages: []*steadyv1.GenerateResponse{{TokenIds: []int32{1, 2}, Text: "ab"}},
		err: status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR")}
	replay := &fakeAttempt{messages: []*steadyv1.GenerateResponse{{TokenIds: []int32{1, 2, 3, 4}, Text: "abcd",
		FinishReason: "length", Usage: &steadyv1.Usage{SessionPosition: 14, Replayed: true}}}, err: io.EOF}
	positions := &sessionPositions{}
	positions.set("\x00s", 10)
	s := &resumingStream{ClientStream: first, ctx: context.Background(), positions: positions,
		streamer: func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return replay, nil
		}}
	if err := s.SendMsg(&steadyv1.GenerateRequest{SessionId: "s", Prompt: "x"}); err != nil {
		t.Fatal(err)
	}
	var ids []int32
	text := ""
	var last *steadyv1.GenerateResponse
	for {
		m := &steadyv1.GenerateResponse{}
		err := s.RecvMsg(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the client saw %v", err)
		}
		ids = append(ids, m.TokenIds...)
		text += m.Text
		last = m
	}
	if text != "abcd" || len(ids) != 4 || ids[2] != 3 || ids[3] != 4 {
		t.Fatalf("the client got %v %q, want the whole turn once", ids, text)
	}
	if last.FinishReason != "length" || !last.Usage.GetReplayed() {
		t.Fatalf("last message %v: want the turn's end and usage", last)
	}
	if !first.sent[0].AllOrNothing || len(replay.sent) != 1 || replay.sent[0].ExpectedPosition.GetValue() != 10 ||
		!replay.sent[0].AllOrNothing || replay.sent[0].Prompt != "x" {
		t.Fatalf("sent %v, then %v: want all_or_nothing, and the resend at position 10", first.sent, replay.sent)
	}
}

// readAll: what the client receives from s, and the error that ended it (nil: the end).
func readAll(s *resumingStream) (ids []int32, text string, err error) {
	for {
		m := &steadyv1.GenerateResponse{}
		if err := s.RecvMsg(m); err == io.EOF {
			return ids, text, nil
		} else if err != nil {
			return ids, text, err
		}
		ids = append(ids, m.TokenIds...)
		text += m.Text
	}
}

// A session this gateway has relayed no turn of (created and used over gRPC, or through another
// gateway), its turn cut after a message: the resend goes out at the start position the replica
// gave in its initial metadata, which also wins over a relayed position another client outdated.
// Without that metadata the turn cannot be resent safely, and the client hears of the cut.
func TestTheStartPositionMakesAnyCutTurnResendable(t *testing.T) {
	cut := status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR")
	for _, c := range []struct {
		name     string
		header   metadata.MD
		relayed  int64 // -1: none
		resentAt int64 // -1: not resent
	}{
		{"unknown session", metadata.Pairs(startPositionHeader, "7"), -1, 7},
		{"outdated relayed position", metadata.Pairs(startPositionHeader, "7"), 3, 7},
		{"no metadata", nil, -1, -1},
		{"no metadata, relayed position", nil, 3, 3},
		{"malformed metadata", metadata.Pairs(startPositionHeader, "x"), -1, -1},
	} {
		first := &fakeAttempt{header: c.header, err: cut,
			messages: []*steadyv1.GenerateResponse{{TokenIds: []int32{1}, Text: "a"}}}
		second := &fakeAttempt{err: io.EOF, messages: []*steadyv1.GenerateResponse{{TokenIds: []int32{1, 2}, Text: "ab",
			FinishReason: "length", Usage: &steadyv1.Usage{SessionPosition: 12}}}}
		positions := &sessionPositions{}
		if c.relayed >= 0 {
			positions.set("\x00s", c.relayed)
		}
		s := &resumingStream{ClientStream: first, ctx: context.Background(), positions: positions,
			streamer: func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
				return second, nil
			}}
		if err := s.SendMsg(&steadyv1.GenerateRequest{SessionId: "s", Prompt: "x"}); err != nil {
			t.Fatal(err)
		}
		ids, text, err := readAll(s)
		if c.resentAt < 0 {
			if err == nil || len(second.sent) != 0 || text != "a" {
				t.Errorf("%s: the turn was resent (%v) or the cut hidden (%v, %q)", c.name, second.sent, err, text)
			}
			continue
		}
		if err != nil || text != "ab" || len(ids) != 2 {
			t.Errorf("%s: the client got %v %q, %v; want the whole turn once", c.name, ids, text, err)
			continue
		}
		if len(second.sent) != 1 || second.sent[0].ExpectedPosition.GetValue() != c.resentAt {
			t.Errorf("%s: resent %v, want expected_position %d", c.name, second.sent, c.resentAt)
		}
		if v, _ := positions.get("\x00s"); v != 12 {
			t.Errorf("%s: relayed position %d after the turn, want 12", c.name, v)
		}
	}
}
