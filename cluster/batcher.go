package cluster

import (
	"sync"
	"time"

	"github.com/limitd/limitd/fsm"
)

// batcher is group commit: callers submit ops and wait; up to `inflight`
// flushers each take everything queued (bounded by maxOps) and send it as one
// unit — one Raft entry on the leader, one forwarded request on a follower.
// While those units commit, new arrivals queue up, so the batch size follows
// the load without a timer ("natural batching"); maxWait optionally lets a
// flusher linger for a fuller batch.
type batcher struct {
	maxOps   int
	inflight int
	maxWait  time.Duration
	send     func(ops []fsm.Op) ([]fsm.Result, error)
	observe  func(ops int)

	mu      sync.Mutex
	queue   []*pending
	queued  int // ops in queue
	running int // flushers running
	wake    chan struct{}
}

type pending struct {
	ops  []fsm.Op
	res  []fsm.Result
	err  error
	done chan struct{}
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func newBatcher(maxOps, inflight int, maxWait time.Duration, send func([]fsm.Op) ([]fsm.Result, error), observe func(int)) *batcher {
	return &batcher{
		maxOps: maxOps, inflight: inflight, maxWait: maxWait,
		send: send, observe: observe, wake: make(chan struct{}, 1),
	}
}

// do submits ops as one unit (never split across entries, so an atomic group
// stays atomic and a forwarded batch stays in order) and waits for results.
func (b *batcher) do(ops []fsm.Op) ([]fsm.Result, error) {
	p := pendingPool.Get().(*pending)
	p.ops, p.res, p.err = ops, nil, nil
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
	<-p.done
	res, err := p.res, p.err
	p.ops, p.res, p.err = nil, nil, nil
	pendingPool.Put(p)
	return res, err
}

// flushLoop sends batches until the queue is empty, then exits.
func (b *batcher) flushLoop() {
	var batch []*pending
	var ops []fsm.Op
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
		n := 0
		for len(b.queue) > 0 {
			p := b.queue[0]
			if n > 0 && n+len(p.ops) > b.maxOps {
				break
			}
			b.queue[0] = nil
			b.queue = b.queue[1:]
			n += len(p.ops)
			batch = append(batch, p)
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
		res, err := b.send(ops)
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
	}
}
