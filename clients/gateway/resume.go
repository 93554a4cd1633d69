package main

// Resuming a Generate stream that a replica's death cut (docs/deployment.md, "What happens when..."),
// so that an HTTP client sees latency, not an error. nginx cannot do it: once it has passed a gRPC
// call on to a replica it does not resend it, and a stream the replica had begun answering is cut.
// The gateway sends the same request again (same seed); a turn is committed only when it completes,
// so the next replica runs it from the same state and gives the same tokens, and the gateway passes
// on only the tokens and text past those it already sent, checking that the repeated ones match.
//
// A session's turn is resent only when that cannot apply it twice: the gateway knows the session's
// position before the turn, which it sends as expected_position: the request's expected_position,
// else the one the replica sent as initial metadata x-steady-start-position when it took the turn
// up (before its prefill, so a stream cut after any message has it), else the position the gateway
// last relayed for the session; or the turn was cut before any message (no replica answered, as
// nginx's own retry assumes). A turn the dead replica had committed is then
// answered with its stored outcome (usage.replayed), which the gateway takes like any resumed
// attempt. Session turns go out all_or_nothing: a turn whose stream broke while its replica lived on
// (nginx died) is rolled back rather than kept in part, so its resend runs it whole. (So is a turn
// whose HTTP client goes away: the gateway cancels the call.)

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/golang/protobuf/proto"
	wrappers "github.com/golang/protobuf/ptypes/wrappers"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	steadyv1 "steady/v1"
)

// The initial metadata in which a replica gives a session turn's start position (server/rpc/service.h).
const startPositionHeader = "x-steady-start-position"

const (
	generateMethod = "/steady.v1.Inference/Generate"
	maxResumes     = 3       // per call
	maxPositions   = 1 << 16 // sessions whose last relayed position is kept (then forgotten at once)
)

// resumable: the call was cut by a replica's or nginx's death (UNAVAILABLE: nginx's 502 for a replica
// that died before answering, a reset or refused connection; INTERNAL RST_STREAM: a stream nginx cut;
// CANCELLED by a stopping server), not refused by a live replica (retry-after: the client should wait).
func resumable(code codes.Code, message string, retryAfter bool) bool {
	if retryAfter {
		return false
	}
	return code == codes.Unavailable || code == codes.Canceled ||
		(code == codes.Internal && strings.Contains(message, "RST_STREAM"))
}

// sessionPositions: each session's position after the last turn the gateway relayed whole, keyed
// by API key and session id. A position only grows while a session lives, so a stale one (another
// client's turns since) makes a resend fail with ABORTED, never apply twice; only a session deleted
// and created again elsewhere could coincide with it.
type sessionPositions struct {
	mu sync.Mutex
	m  map[string]int64 // guarded by mu
}

func (p *sessionPositions) get(key string) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[key]
	return v, ok
}

func (p *sessionPositions) set(key string, v int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m) >= maxPositions {
		p.m = map[string]int64{}
	}
	p.m[key] = v
}

// startPosition: the session's position before the turn, from the attempt's initial metadata (none
// when the attempt was cut before the replica took the turn up).
func startPosition(attempt grpc.ClientStream) (int64, bool) {
	md, err := attempt.Header()
	if err != nil {
		return 0, false
	}
	v := md.Get(startPositionHeader)
	if len(v) != 1 {
		return 0, false
	}
	p, err := strconv.ParseInt(v[0], 10, 64)
	return p, err == nil && p >= 0
}

// resumeInterceptor makes every Generate stream on the connection resumable.
func resumeInterceptor(positions *sessionPositions) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != generateMethod {
			return s, err
		}
		return &resumingStream{ClientStream: s, ctx: ctx, desc: desc, cc: cc, streamer: streamer, opts: opts,
			positions: positions}, nil
	}
}

// resumingStream is one Generate call over any number of attempts.
type resumingStream struct {
	grpc.ClientStream // the current attempt
	ctx               context.Context
	desc              *grpc.StreamDesc
	cc                *grpc.ClientConn
	streamer          grpc.Streamer
	opts              []grpc.CallOption
	positions         *sessionPositions

	req      *steadyv1.GenerateRequest // as the client sent it
	key      string                    // positions' key; "" for an ephemeral call
	before   *int64                    // the session's position before this turn, when known
	sent     passedOn                  // what the client has received, over every attempt
	repeat   struct{ ids, text int }   // how much of `sent` the current attempt repeats: all of it at the cut
	attempt  passedOn                  // what the current attempt has repeated so far
	messages int                       // messages passed on
	resumes  int
}

// passedOn: token ids and text, in order.
type passedOn struct {
	ids  []int32
	text string
}

func (s *resumingStream) SendMsg(m interface{}) error {
	if r, ok := m.(*steadyv1.GenerateRequest); ok {
		if r.SessionId != "" && r.N <= 1 {
			r.AllOrNothing = true
		}
		s.req = proto.Clone(r).(*steadyv1.GenerateRequest)
		if r.SessionId != "" {
			auth := ""
			if md, ok := metadata.FromOutgoingContext(s.ctx); ok {
				auth = strings.Join(md.Get("authorization"), ",")
			}
			s.key = auth + "\x00" + r.SessionId
			if r.ExpectedPosition != nil {
				v := r.ExpectedPosition.Value
				s.before = &v
			} else if v, ok := s.positions.get(s.key); ok {
				s.before = &v
			}
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s *resumingStream) Header() (metadata.MD, error) {
	for {
		md, err := s.ClientStream.Header()
		if err == nil || !s.resume(err) {
			return md, err
		}
	}
}

func (s *resumingStream) RecvMsg(m interface{}) error {
	for {
		err := s.ClientStream.RecvMsg(m)
		if err == io.EOF {
			return err
		}
		if err != nil {
			if s.resumes > 0 && status.Code(err) == codes.Aborted && s.before != nil {
				// expected_position refused the resent turn and the server had no replay of it: another
				// call moved the session since this gateway last saw it (or a server without replays).
				return status.Errorf(codes.Unavailable, "the stream was cut when its replica died, and the resent "+
					"turn was refused: the session is past position %d, so the cut turn was applied (its last "+
					"tokens did not reach this call) or another call moved the session (%s)", *s.before,
					status.Convert(err).Message())
			}
			if !s.resume(err) {
				return err
			}
			continue
		}
		r, ok := m.(*steadyv1.GenerateResponse)
		if !ok {
			return nil
		}
		if !s.dropRepeated(r) {
			return status.Errorf(codes.DataLoss, "a resumed stream differs from the one that was cut: the "+
				"replicas do not generate the same tokens from the same state")
		}
		if len(r.TokenIds) == 0 && r.Text == "" && r.FinishReason == "" && r.Usage == nil && s.messages > 0 {
			continue // all of it was sent before the cut
		}
		s.sent.ids = append(s.sent.ids, r.TokenIds...)
		s.sent.text += r.Text
		s.messages++
		if r.Usage != nil && s.key != "" {
			s.positions.set(s.key, r.Usage.SessionPosition)
		}
		return nil
	}
}

// dropRepeated removes from a resumed attempt's message the token ids (and their logprobs) and text
// the client already has; false if they differ from it.
func (s *resumingStream) dropRepeated(r *steadyv1.GenerateResponse) bool {
	ids := s.repeat.ids - len(s.attempt.ids)
	if ids > len(r.TokenIds) {
		ids = len(r.TokenIds)
	}
	if ids > 0 {
		for i, id := range r.TokenIds[:ids] {
			if id != s.sent.ids[len(s.attempt.ids)+i] {
				return false
			}
		}
		s.attempt.ids = append(s.attempt.ids, r.TokenIds[:ids]...)
		if len(r.Logprobs) == len(r.TokenIds) {
			r.Logprobs = r.Logprobs[ids:]
		}
		r.TokenIds = r.TokenIds[ids:]
	}
	bytes := s.repeat.text - len(s.attempt.text)
	if bytes > len(r.Text) {
		bytes = len(r.Text)
	}
	if bytes > 0 {
		if r.Text[:bytes] != s.sent.text[len(s.attempt.text):len(s.attempt.text)+bytes] {
			return false
		}
		s.attempt.text += r.Text[:bytes]
		r.Text = r.Text[bytes:]
	}
	return true
}

// resume starts the next attempt after err, when that is safe; false leaves err to the client.
func (s *resumingStream) resume(err error) bool {
	if s.req == nil || s.req.N > 1 || s.resumes >= maxResumes || s.ctx.Err() != nil {
		return false
	}
	st := status.Convert(err)
	if !resumable(st.Code(), st.Message(), len(s.ClientStream.Trailer().Get("retry-after")) > 0) {
		return false
	}
	req := s.req
	if req.SessionId != "" && req.ExpectedPosition == nil {
		if p, ok := startPosition(s.ClientStream); ok {
			s.before = &p // the replica's word, over a relayed position another client may have outdated
		}
		if s.before != nil {
			req = proto.Clone(req).(*steadyv1.GenerateRequest)
			req.ExpectedPosition = &wrappers.Int64Value{Value: *s.before}
		} else if s.messages > 0 {
			return false // the turn may have been committed: only expected_position makes a resend exact
		}
	}
	// The next attempt waits for the connection (nginx restarting) rather than failing at once.
	next, err := s.streamer(s.ctx, s.desc, s.cc, generateMethod, append(s.opts, grpc.WaitForReady(true))...)
	if err != nil {
		return false
	}
	if err := next.SendMsg(req); err != nil && err != io.EOF {
		return false
	}
	if err := next.CloseSend(); err != nil {
		return false
	}
	s.ClientStream = next
	s.attempt = passedOn{}
	s.repeat.ids, s.repeat.text = len(s.sent.ids), len(s.sent.text)
	s.resumes++
	return true
}
