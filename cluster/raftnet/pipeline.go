package raftnet

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The netPipeline hang (a leader whose replication to a stalled follower never ends), reproduced by TestFaultsWipeKillPause
// with a paused leader: hashicorp/raft v1.7.3's pipelineDecode returns on the
// first unsuccessful response (a rejected append, or a read that timed out
// on a stalled follower), and nothing reads the pipeline's done channel any
// more; its decoder then blocks handing over the next response, the
// in-progress channel fills, and pipelineSend blocks in
// netPipeline.AppendEntries on a select that only pipeline.Close releases —
// which the blocked goroutine itself would call on its way out. The
// replication goroutine is stuck for good: the follower gets nothing more
// from this leader, and Raft.Shutdown waits for it forever (a SIGTERM that
// hung over 85 s).
//
// boundedPipeline closes a pipeline whose AppendEntries has not returned
// within pipelineSendBound: the blocked call returns ErrPipelineShutdown,
// pipelineSend stops, and Raft falls back to one AppendEntries at a time
// for that follower, as it does after any pipeline error. The VoteGate
// also closes every open pipeline when Close forces the transport shut.

// pipelineSendBound: a send blocked this long (twice the transport's I/O
// timeout, past which any healthy exchange has failed or finished) is stuck.
const pipelineSendBound = 2 * raftIOTimeout

type boundedPipeline struct {
	raft.AppendPipeline
	bound time.Duration
	done  func() // removes it from the gate's open pipelines
	once  sync.Once
}

func (p *boundedPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	t := time.AfterFunc(p.bound, func() { p.Close() })
	defer t.Stop()
	return p.AppendPipeline.AppendEntries(args, resp)
}

func (p *boundedPipeline) Close() error {
	p.once.Do(p.done)
	return p.AppendPipeline.Close()
}

// pipelines tracks a gate's open pipelines.
type pipelines struct {
	mu   sync.Mutex
	open map[*boundedPipeline]struct{}
}

func (ps *pipelines) wrap(p raft.AppendPipeline, bound time.Duration) *boundedPipeline {
	b := &boundedPipeline{AppendPipeline: p, bound: bound}
	b.done = func() {
		ps.mu.Lock()
		delete(ps.open, b)
		ps.mu.Unlock()
	}
	ps.mu.Lock()
	if ps.open == nil {
		ps.open = map[*boundedPipeline]struct{}{}
	}
	ps.open[b] = struct{}{}
	ps.mu.Unlock()
	return b
}

// closeAll closes every open pipeline (the transport is being forced shut).
func (ps *pipelines) closeAll() {
	ps.mu.Lock()
	open := make([]*boundedPipeline, 0, len(ps.open))
	for p := range ps.open {
		open = append(open, p)
	}
	ps.mu.Unlock()
	for _, p := range open {
		p.Close()
	}
}
