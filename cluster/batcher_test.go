package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/fsm"
)

// blockingSend is a batcher send that records its batches and blocks until
// released; encodeFirst says whether it reports the ops encoded before blocking.
type blockingSend struct {
	encodeFirst bool
	started     chan int // ops in each batch, as it starts
	release     chan struct{}
	encodedAt   atomic.Bool
}

func (s *blockingSend) send(ops []fsm.Op, _ []byte, encoded func()) ([]fsm.Result, error) {
	s.started <- len(ops)
	if s.encodeFirst {
		s.encodedAt.Store(true)
		encoded()
	}
	<-s.release
	s.encodedAt.Store(true)
	encoded()
	return make([]fsm.Result, len(ops)), nil
}

func newBlockingSend(encodeFirst bool) *blockingSend {
	return &blockingSend{encodeFirst: encodeFirst, started: make(chan int, 16), release: make(chan struct{})}
}

// A unit still queued when its caller's context ends is withdrawn: the caller
// learns nothing was proposed, and the unit never reaches send.
func TestBatcherWithdrawsQueuedUnitAtDeadline(t *testing.T) {
	s := newBlockingSend(true)
	b := newBatcher(100, 1, 0, s.send, nil)
	first := make(chan error, 1)
	go func() { _, err := b.do(context.Background(), make([]fsm.Op, 1)); first <- err }()
	<-s.started // the only flusher is busy with the first unit

	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { _, err := b.do(ctx, make([]fsm.Op, 3)); second <- err }()
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.queued == 3 })
	cancel()
	err := <-second
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("queued unit at its deadline: %v, want a context error (not proposed)", err)
	}
	b.mu.Lock()
	queued := b.queued
	b.mu.Unlock()
	if queued != 0 {
		t.Fatalf("withdrawn unit still queued: %d ops", queued)
	}
	close(s.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-s.started:
		t.Fatalf("a withdrawn unit was sent (%d ops)", n)
	default:
	}
}

// A unit already sent when its caller's context ends answers at once with
// ErrOutcomeUnknown; one still being encoded waits for the encoder first, so
// the caller never reuses ops the encoder is reading.
func TestBatcherAbandonsSentUnitAtDeadline(t *testing.T) {
	for _, encodeFirst := range []bool{true, false} {
		s := newBlockingSend(encodeFirst)
		b := newBatcher(100, 1, 0, s.send, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := b.do(ctx, make([]fsm.Op, 2)); done <- err }()
		<-s.started
		cancel()
		if !encodeFirst {
			// do must be waiting for the encoder; release it after a moment.
			select {
			case err := <-done:
				t.Fatalf("do returned (%v) while its ops were still being encoded", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if encodeFirst {
			if err := <-done; !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("sent unit at its deadline: %v, want ErrOutcomeUnknown", err)
			}
			close(s.release)
			continue
		}
		close(s.release)
		err := <-done
		if !s.encodedAt.Load() {
			t.Fatal("do returned before its ops were encoded")
		}
		// The answer may have arrived together with the cancellation.
		if err != nil && !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("encoding unit at its deadline: %v", err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// countObserver counts samples and keeps the largest.
type countObserver struct {
	n   atomic.Int64
	max atomic.Int64 // nanoseconds
}

func (o *countObserver) Observe(v float64) {
	o.n.Add(1)
	if ns := int64(v * 1e9); ns > o.max.Load() {
		o.max.Store(ns)
	}
}

// The batcher times its stages: one batch_wait sample per unit (a unit that
// queued behind a busy flusher waited at least until that flusher was free)
// and one send sample per batch.
func TestBatcherTimesStages(t *testing.T) {
	s := newBlockingSend(true)
	b := newBatcher(100, 1, 0, s.send, nil)
	var wait, send countObserver
	b.waitObs, b.sendObs = &wait, &send
	done := make(chan error, 3)
	go func() { _, err := b.do(context.Background(), make([]fsm.Op, 1)); done <- err }()
	<-s.started // the only flusher is busy: the next two units queue
	for range 2 {
		go func() { _, err := b.do(context.Background(), make([]fsm.Op, 2)); done <- err }()
	}
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.queued == 4 })
	close(s.release)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := <-s.started; n != 4 {
		t.Fatalf("second batch had %d ops, want the two queued units (4)", n)
	}
	if wait.n.Load() != 3 || send.n.Load() != 2 {
		t.Fatalf("%d wait samples, %d send samples; want 3 (units) and 2 (batches)", wait.n.Load(), send.n.Load())
	}
}
