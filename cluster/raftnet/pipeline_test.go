package raftnet

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// stuckPipeline is netPipeline after a rejected append: AppendEntries waits
// on a select only Close releases.
type stuckPipeline struct {
	closed chan struct{}
	once   sync.Once
}

func (p *stuckPipeline) AppendEntries(*raft.AppendEntriesRequest, *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	<-p.closed
	return nil, raft.ErrPipelineShutdown
}
func (p *stuckPipeline) Consumer() <-chan raft.AppendFuture { return nil }
func (p *stuckPipeline) Close() error                       { p.once.Do(func() { close(p.closed) }); return nil }

// A pipelined send that cannot hand over its request is cut short by
// closing the pipeline: Raft's replication goroutine gets an error and falls
// back to plain AppendEntries instead of blocking for good. (Without the
// bound this test blocks until its deadline.)
func TestBoundedPipelineUnblocksStuckSend(t *testing.T) {
	var ps pipelines
	inner := &stuckPipeline{closed: make(chan struct{})}
	p := ps.wrap(inner, 20*time.Millisecond)
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}); !errors.Is(err, raft.ErrPipelineShutdown) {
		t.Fatalf("stuck send: %v, want ErrPipelineShutdown", err)
	}
	if len(ps.open) != 0 {
		t.Errorf("a closed pipeline is still tracked")
	}
	// Forcing the transport shut closes the pipelines still open.
	inner2 := &stuckPipeline{closed: make(chan struct{})}
	ps.wrap(inner2, time.Hour)
	ps.closeAll()
	select {
	case <-inner2.closed:
	default:
		t.Fatal("closeAll left a pipeline open")
	}
}
