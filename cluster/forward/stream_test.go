package forward

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// The check stream's two ends over an in-memory pipe, without a cluster:
// decide stands in for the leader's decideForwarded.

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// streamPair serves decide on one end of a pipe and returns the follower's
// connection on the other, and the session.
func streamPair(t *testing.T, decide func(context.Context, []fsm.Op, Tag) ([]fsm.Result, error)) (*streamConn, *streamSession) {
	t.Helper()
	a, b := net.Pipe()
	s := newStreamSession(b, bufio.NewReader(b), discardLog(), decide, 5*time.Second)
	go s.readLoop()
	go s.writeLoop()
	closing := make(chan struct{})
	f := &Forwarder{timeout: 5 * time.Second, maxOps: 2048, log: discardLog(), closing: closing,
		waited: func(time.Duration) {}, sent: func(time.Duration) {}, framed: func(int) {}}
	c := newStreamConn(f, "leader")
	c.start(a)
	close(c.ready)
	t.Cleanup(func() { close(closing); s.close("test over") })
	return c, s
}

func oneCheck(key string) []fsm.Op {
	return []fsm.Op{{Checks: []fsm.Check{{Key: key, Cost: 1}}}}
}

// Every outcome a leader answers on the stream reaches the follower's
// caller as the HTTP forward would report it: only "nothing proposed" is
// retried, "maybe proposed" is nodeapi.ErrOutcomeUnknown, success carries the
// results. Fails if the stream loses or relabels an outcome.
func TestStreamOutcomes(t *testing.T) {
	ok := []fsm.Result{{Allowed: true, Decisions: []fsm.Decision{{Decision: algo.Decision{Allowed: true, Remaining: 7}}}}}
	for _, tc := range []struct {
		name              string
		err               error
		retry, unknown    bool
		tooLarge, unavail bool
	}{
		{name: "ok"},
		{name: "not_leader", err: ErrRetry, retry: true},
		{name: "no_leader", err: nodeapi.ErrNoLeader, retry: true},
		{name: "withdrawn", err: fmt.Errorf("not proposed before the request's deadline: %w", context.DeadlineExceeded), retry: true},
		{name: "outcome_unknown", err: fmt.Errorf("%w: leadership lost", nodeapi.ErrOutcomeUnknown), unknown: true},
		{name: "too_large", err: fmt.Errorf("%w: op 0", nodeapi.ErrTooLarge), tooLarge: true},
		{name: "failed", err: errors.New("state machine refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := streamPair(t, func(context.Context, []fsm.Op, Tag) ([]fsm.Result, error) {
				if tc.err != nil {
					return nil, tc.err
				}
				return ok, nil
			})
			res, err := c.do(context.Background(), oneCheck("k"))
			if got := errors.Is(err, ErrRetry); got != tc.retry {
				t.Errorf("%v: retryable %v, want %v", err, got, tc.retry)
			}
			if got := errors.Is(err, nodeapi.ErrOutcomeUnknown); got != tc.unknown {
				t.Errorf("%v: outcome unknown %v, want %v", err, got, tc.unknown)
			}
			if got := errors.Is(err, nodeapi.ErrTooLarge); got != tc.tooLarge {
				t.Errorf("%v: too large %v, want %v", err, got, tc.tooLarge)
			}
			if tc.err == nil && (err != nil || len(res) != 1 || res[0].Decisions[0].Remaining != 7) {
				t.Errorf("success: %+v %v, want the leader's result", res, err)
			}
			if tc.err != nil && err == nil {
				t.Errorf("failure %v arrived as success %+v", tc.err, res)
			}
		})
	}
}

// An answer whose outcome code the follower does not know is outcome
// unknown, never retried; so is one that does not decode.
func TestStreamUnknownOutcomeCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		code byte
		body []byte
	}{
		{"unknown code", 99, []byte("?")},
		{"ok without results", 0, []byte("junk")},
		{"ok with the wrong count", 0, fsm.AppendResults(nil, make([]fsm.Result, 2))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer b.Close()
			f := &Forwarder{timeout: 5 * time.Second, maxOps: 2048, log: discardLog(), closing: make(chan struct{}),
				waited: func(time.Duration) {}, sent: func(time.Duration) {}, framed: func(int) {}}
			c := newStreamConn(f, "leader")
			c.start(a)
			close(c.ready)
			go func() { // a leader that answers request 1 with tc's frame
				frame, err := readFrame(bufio.NewReader(b), nil, maxStreamRequest, nil)
				if err != nil {
					return
				}
				id, _, _ := frameParts(frame)
				out := appendFrameHeader(nil, id, frameResult, 1+len(tc.body))
				out = append(append(out, tc.code), tc.body...)
				b.Write(out)
			}()
			_, err := c.do(context.Background(), oneCheck("k"))
			if !errors.Is(err, nodeapi.ErrOutcomeUnknown) || errors.Is(err, ErrRetry) {
				t.Fatalf("%v; want nodeapi.ErrOutcomeUnknown, not retryable", err)
			}
		})
	}
}

// The stream to the leader drops while the leader decides a request: the
// follower's caller learns nodeapi.ErrOutcomeUnknown (the leader may have proposed
// it), not a retryable error. Fails if a written request is reported "not
// sent" when its connection closes.
func TestStreamDropMidRequestIsOutcomeUnknown(t *testing.T) {
	entered := make(chan struct{})
	c, s := streamPair(t, func(ctx context.Context, _ []fsm.Op, _ Tag) ([]fsm.Result, error) {
		close(entered)
		<-ctx.Done() // until the connection closes
		return nil, fmt.Errorf("%w: cut", nodeapi.ErrOutcomeUnknown)
	})
	done := make(chan error, 1)
	go func() { _, err := c.do(context.Background(), oneCheck("k")); done <- err }()
	<-entered
	s.close("dropped by the test")
	err := <-done
	if !errors.Is(err, nodeapi.ErrOutcomeUnknown) || errors.Is(err, ErrRetry) {
		t.Fatalf("request in flight when its stream dropped: %v, want nodeapi.ErrOutcomeUnknown, not retryable", err)
	}
	// The next request on the closed stream was never sent: retryable.
	if _, err := c.do(context.Background(), oneCheck("k")); !errors.Is(err, errNotSent) || !errors.Is(err, ErrRetry) {
		t.Fatalf("request on a closed stream: %v, want errNotSent (retryable)", err)
	}
}

// Units queued while the writer is busy travel together: several callers'
// ops in one frame, each caller getting its own results back in order.
// Fails if results are split at the wrong offsets.
func TestStreamSplitsAnswersPerCaller(t *testing.T) {
	var frames atomic.Int32
	c, _ := streamPair(t, func(_ context.Context, ops []fsm.Op, _ Tag) ([]fsm.Result, error) {
		frames.Add(1)
		res := make([]fsm.Result, len(ops))
		for i, op := range ops {
			var n int
			fmt.Sscanf(op.Checks[0].Key, "k%d", &n)
			res[i] = fsm.Result{Decisions: []fsm.Decision{{Decision: algo.Decision{Remaining: int64(n)}}}}
		}
		return res, nil
	})
	const callers = 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ops := append(oneCheck(fmt.Sprintf("k%d", i)), oneCheck(fmt.Sprintf("k%d", i+1000))...)
			res, err := c.do(context.Background(), ops)
			if err != nil || len(res) != 2 || res[0].Decisions[0].Remaining != int64(i) || res[1].Decisions[0].Remaining != int64(i+1000) {
				errs <- fmt.Errorf("caller %d: %+v %v", i, res, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d callers in %d frames", callers, frames.Load())
}

// rawFrame is a request frame with the given id, kind and payload.
func rawFrame(id uint64, kind byte, payload []byte) []byte {
	return append(appendFrameHeader(nil, id, kind, len(payload)), payload...)
}

func checkPayload(ops []fsm.Op) []byte {
	return fsm.AppendOps(binary.BigEndian.AppendUint32(nil, 1000), ops)
}

// The leader reads at most maxInflight requests, and maxBytes of frames,
// of one stream before their answers: the reader then waits, and TCP pushes
// back on the follower. It starts no more deciders than the bound. Fails
// without either bound (a fifth decider starts at once, or the reader never
// waits).
func TestStreamInflightBound(t *testing.T) {
	frameSize := len(rawFrame(1, frameCheck, checkPayload(oneCheck("k")))) - 4
	for _, tc := range []struct {
		name                  string
		maxInflight, maxBytes int
	}{
		{"requests", 4, streamMaxInflightBytes},
		{"bytes", streamMaxInflight, 4 * frameSize},
	} {
		t.Run(tc.name, func(t *testing.T) { testInflightBound(t, tc.maxInflight, tc.maxBytes) })
	}
}

func testInflightBound(t *testing.T, maxInflight, maxBytes int) {
	const bound, sent = 4, 10
	a, b := net.Pipe()
	defer a.Close()
	release := make(chan struct{})
	var active, peak atomic.Int32
	var decided atomic.Int32
	s := newStreamSession(b, bufio.NewReader(b), discardLog(), func(context.Context, []fsm.Op, Tag) ([]fsm.Result, error) {
		n := active.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		active.Add(-1)
		decided.Add(1)
		return []fsm.Result{{}}, nil
	}, 5*time.Second)
	s.maxInflight, s.maxBytes = maxInflight, maxBytes
	go s.readLoop()
	go s.writeLoop()
	defer s.close("test over")
	go func() {
		for i := 1; i <= sent; i++ {
			if _, err := a.Write(rawFrame(uint64(i), frameCheck, checkPayload(oneCheck("k")))); err != nil {
				return
			}
		}
	}()
	answers := make(chan uint64, sent)
	go func() {
		r := bufio.NewReader(a)
		for {
			frame, err := readFrame(r, nil, maxStreamAnswer, nil)
			if err != nil {
				return
			}
			id, _, _ := frameParts(frame)
			answers <- id
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !(s.waiting.Load() && active.Load() == bound) {
		if time.Now().After(deadline) {
			t.Fatalf("the reader never waited at the bound: %d deciders active, waiting %v", active.Load(), s.waiting.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if p := peak.Load(); p > bound {
		t.Fatalf("%d requests decided at once, bound %d", p, bound)
	}
	close(release)
	for i := 0; i < sent; i++ {
		select {
		case <-answers:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d answers", i, sent)
		}
	}
	if p := peak.Load(); p > bound {
		t.Fatalf("%d requests decided at once, bound %d", p, bound)
	}
}

// Frames a leader cannot trust close the stream, with nothing decided: a
// length over the bound (refused before it is read: the rest of a frame may
// take an hour here, so a leader that waited for the claimed bytes would
// keep the stream open), an unknown kind, a request too short to hold its
// deadline. A request whose ops do not decode is answered bad_request on a
// stream that stays open. Fails if a bad frame is decided or the connection
// stays open after one.
func TestStreamRefusesBadFrames(t *testing.T) {
	oversized := binary.BigEndian.AppendUint32(nil, uint32(maxStreamRequest+1))
	for name, bad := range map[string][]byte{
		"oversized":    oversized,
		"unknown kind": rawFrame(1, 9, checkPayload(oneCheck("k"))),
		"answer kind":  rawFrame(1, frameResult, checkPayload(oneCheck("k"))),
		"no deadline":  rawFrame(1, frameCheck, []byte{1, 2}),
		"short":        binary.BigEndian.AppendUint32(nil, 3),
	} {
		t.Run(name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			var decided atomic.Int32
			s := newStreamSession(b, bufio.NewReader(b), discardLog(), func(context.Context, []fsm.Op, Tag) ([]fsm.Result, error) {
				decided.Add(1)
				return []fsm.Result{{}}, nil
			}, 5*time.Second)
			s.frameTimeout = time.Hour
			go s.readLoop()
			go s.writeLoop()
			defer s.close("test over")
			go a.Write(bad)
			a.SetReadDeadline(time.Now().Add(30 * time.Second))
			if n, err := a.Read(make([]byte, 64)); !errors.Is(err, io.EOF) {
				t.Fatalf("after a bad frame the stream answered %d bytes, %v; want it closed", n, err)
			}
			if d := decided.Load(); d != 0 {
				t.Fatalf("%d requests decided from a bad frame", d)
			}
		})
	}
	t.Run("ops that do not decode", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		s := newStreamSession(b, bufio.NewReader(b), discardLog(), func(context.Context, []fsm.Op, Tag) ([]fsm.Result, error) {
			return []fsm.Result{{}}, nil
		}, 5*time.Second)
		go s.readLoop()
		go s.writeLoop()
		defer s.close("test over")
		go a.Write(append(rawFrame(7, frameCheck, append(binary.BigEndian.AppendUint32(nil, 1000), "junk"...)),
			rawFrame(8, frameCheck, checkPayload(oneCheck("k")))...))
		r := bufio.NewReader(a)
		got := map[uint64]byte{}
		for len(got) < 2 {
			frame, err := readFrame(r, nil, maxStreamAnswer, nil)
			if err != nil {
				t.Fatalf("answers so far %v: %v", got, err)
			}
			id, _, payload := frameParts(frame)
			got[id] = payload[0]
		}
		if got[7] != outcomeWire[outcomeBadRequest].code || got[8] != outcomeWire[outcomeOK].code {
			t.Fatalf("outcome codes %v, want 7: bad_request (%d), 8: ok", got, outcomeWire[outcomeBadRequest].code)
		}
	})
}

// A request written to the stream whose answer does not come within the
// forward timeout (a caller without a deadline of its own) is outcome
// unknown, never retried. Fails if the wait is not bounded (the test then
// hangs) or an unanswered request is reported not sent.
func TestStreamNoAnswerInTimeIsOutcomeUnknown(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	c, _ := streamPair(t, func(context.Context, []fsm.Op, Tag) ([]fsm.Result, error) {
		<-release // a leader that never answers in time
		return []fsm.Result{{}}, nil
	})
	c.f.timeout = 50 * time.Millisecond
	_, err := c.do(context.Background(), oneCheck("k"))
	if !errors.Is(err, nodeapi.ErrOutcomeUnknown) || errors.Is(err, ErrRetry) {
		t.Fatalf("no answer within the forward timeout: %v, want nodeapi.ErrOutcomeUnknown, not retryable", err)
	}
}
