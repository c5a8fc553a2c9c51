package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/tracing"
)

// batcher is group commit: callers submit ops and wait; up to `inflight`
// flushers each take everything queued (bounded by maxOps) and send it as one
// unit — one Raft entry on the leader, one forwarded request on a follower.
// While those units commit, new arrivals queue up, so the batch size follows
// the load without a timer ("natural batching"); maxWait optionally lets a
// flusher linger for a fuller batch.
//
// A caller waits at most until its context ends. A unit still queued is
// taken out (nothing was proposed); one being encoded is waited for (the
// encoder reads the caller's ops, so they must not be reused before); one
// already sent is abandoned with ErrOutcomeUnknown.
type batcher struct {
	maxOps   int
	maxBytes int // bound on opsSize of one batch
	inflight int
	maxWait  time.Duration
	// send proposes or forwards ops and waits for the results. It calls
	// encoded once it no longer reads ops (before it waits), so callers
	// whose deadline passes may go; it must return within a bounded time.
	// ext is the batch's tagged units (forward.AppendTags), nil when none is.
	send    func(ops []fsm.Op, ext []byte, encoded func()) ([]fsm.Result, error)
	observe func(ops int)
	// waitObs (per unit: queued until a flusher takes it) and sendObs (per
	// batch: send's duration) time the batcher's stages of a check's
	// latency budget; nil leaves them untimed.
	waitObs, sendObs prometheus.Observer
	// traceName and traceSend: while tracing is on, each batch is a span
	// so named, sent by traceSend under it (tracing.go); nil: untraced.
	traceName string
	traceSend func(ctx context.Context, ops []fsm.Op, ext []byte, encoded func()) ([]fsm.Result, error)

	mu      sync.Mutex
	sentC   *sync.Cond // broadcast when a taken batch has been encoded
	queue   []*pending
	queued  int // ops in queue
	running int // flushers running
	wake    chan struct{}
}

// pending states, guarded by batcher.mu.
const (
	stateQueued = iota
	stateTaken  // a flusher is encoding it: its ops are still being read
	stateSent   // encoded and proposed or forwarded
)

type pending struct {
	queuedAt time.Time
	ops      []fsm.Op
	size     int // opsSize(ops)
	tag      forward.Tag
	res      []fsm.Result
	err      error
	state    int
	done     chan struct{}
	span     trace.SpanContext // the caller's, set only while tracing is on (a batch span links to it)
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func newBatcher(maxOps, inflight int, maxWait time.Duration, send func([]fsm.Op, []byte, func()) ([]fsm.Result, error), observe func(int)) *batcher {
	b := &batcher{
		maxOps: maxOps, maxBytes: MaxEntryBytes, inflight: inflight, maxWait: maxWait,
		send: send, observe: observe, wake: make(chan struct{}, 1),
	}
	b.sentC = sync.NewCond(&b.mu)
	return b
}

// do submits ops as one unit (never split across entries, so an atomic group
// stays atomic and a forwarded batch stays in order) and waits for results
// or for ctx to end. When ctx ends first, the error says whether the ops were
// proposed: a context error (nothing proposed) or ErrOutcomeUnknown. A unit
// over MaxEntryOps ops or maxBytes is refused with ErrTooLarge; a unit over
// maxOps (but within those) travels alone.
func (b *batcher) do(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	return b.doTagged(ctx, ops, forward.Tag{})
}

// doTagged is do for a follower's forwarded unit: a non-zero tag goes into
// the entry's Extensions with the unit's place (ahead.go).
func (b *batcher) doTagged(ctx context.Context, ops []fsm.Op, tag forward.Tag) ([]fsm.Result, error) {
	size := opsSize(ops)
	if len(ops) > MaxEntryOps || size > b.maxBytes {
		return nil, fmt.Errorf("%w: %d ops, up to %d bytes encoded (bounds: %d ops, %d bytes)",
			ErrTooLarge, len(ops), size, MaxEntryOps, b.maxBytes)
	}
	p := pendingPool.Get().(*pending)
	p.ops, p.size, p.tag, p.res, p.err, p.state = ops, size, tag, nil, nil, stateQueued
	if b.waitObs != nil {
		p.queuedAt = time.Now()
	}
	if tracing.Enabled() {
		p.span = trace.SpanContextFromContext(ctx)
	}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	b.queued += len(ops)
	if b.running < b.inflight {
		b.running++
		go b.flushLoop()
	} else if b.queued >= b.maxOps {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		if err := b.abandon(p, ctx.Err()); err != nil {
			// p stays with its flusher (which still writes to it): not pooled.
			return nil, err
		}
		// The answer arrived while we gave up: use it.
	}
	res, err := p.res, p.err
	p.ops, p.res, p.err = nil, nil, nil
	pendingPool.Put(p)
	return res, err
}

// abandon withdraws p after its caller's context ended. It returns nil when
// p's answer is already delivered (the caller reads it from p).
func (b *batcher) abandon(p *pending, cause error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.state == stateQueued {
		for i, q := range b.queue {
			if q == p {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				b.queued -= len(p.ops)
				break
			}
		}
		return fmt.Errorf("not proposed before the request's deadline: %w", cause)
	}
	for p.state == stateTaken {
		b.sentC.Wait() // the encoder is reading p.ops: microseconds
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	return fmt.Errorf("%w: no answer before the request's deadline (%v)", ErrOutcomeUnknown, cause)
}

// flushLoop sends batches until the queue is empty, then exits.
func (b *batcher) flushLoop() {
	var batch []*pending
	var ops []fsm.Op
	var units []forward.TaggedUnit
	var ext []byte
	for {
		b.mu.Lock()
		if b.maxWait > 0 && b.queued < b.maxOps && b.queued > 0 {
			b.mu.Unlock()
			t := time.NewTimer(b.maxWait)
			select {
			case <-t.C:
			case <-b.wake:
				t.Stop()
			}
			b.mu.Lock()
		}
		if len(b.queue) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		batch, ops = batch[:0], ops[:0]
		n, size := 0, 0
		var taken time.Time
		if b.waitObs != nil {
			taken = time.Now()
		}
		for len(b.queue) > 0 {
			p := b.queue[0]
			if n > 0 && (n+len(p.ops) > b.maxOps || size+p.size > b.maxBytes) {
				break
			}
			b.queue[0] = nil
			b.queue = b.queue[1:]
			n += len(p.ops)
			size += p.size
			p.state = stateTaken
			if b.waitObs != nil {
				b.waitObs.Observe(taken.Sub(p.queuedAt).Seconds())
			}
			batch = append(batch, p)
			if p.tag.Nonce != 0 {
				units = append(units, forward.TaggedUnit{Tag: p.tag, Off: len(ops), N: len(p.ops)})
			}
			ops = append(ops, p.ops...)
		}
		b.queued -= n
		if len(b.queue) == 0 {
			b.queue = nil // let the backing array go once drained
		}
		b.mu.Unlock()

		if b.observe != nil {
			b.observe(len(ops))
		}
		marked := false
		encoded := func() {
			if marked {
				return
			}
			marked = true
			b.mu.Lock()
			for _, p := range batch {
				p.state = stateSent
			}
			b.sentC.Broadcast()
			b.mu.Unlock()
		}
		var sent time.Time
		if b.sendObs != nil {
			sent = time.Now()
		}
		ext = nil // raft keeps an entry's Extensions: a new buffer each time
		if len(units) > 0 {
			ext = forward.AppendTags(nil, units)
		}
		units = units[:0]
		var res []fsm.Result
		var err error
		if b.traceSend != nil && tracing.Enabled() {
			res, err = b.sendTraced(batch, ops, ext, encoded)
		} else {
			res, err = b.send(ops, ext, encoded)
		}
		if b.sendObs != nil {
			b.sendObs.Observe(time.Since(sent).Seconds())
		}
		encoded()
		if err == nil && len(res) != len(ops) {
			err = errShortResponse
		}
		off := 0
		for _, p := range batch {
			if err != nil {
				p.err = err
			} else {
				p.res = res[off : off+len(p.ops) : off+len(p.ops)]
			}
			off += len(p.ops)
			p.done <- struct{}{}
		}
		clear(ops)
		clear(batch)
	}
}
