package cluster

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// stallTransport is an in-memory transport whose AppendEntries to stalled
// never returns until the transport is closed: a follower that stopped
// reading, as in the netPipeline hang (pipeline.go).
type stallTransport struct {
	*raft.InmemTransport
	stalled   raft.ServerAddress
	closed    chan struct{}
	closeOnce sync.Once
	entered   chan struct{}
	enterOnce sync.Once
}

func (s *stallTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if target == s.stalled {
		s.enterOnce.Do(func() { close(s.entered) })
		<-s.closed
		return errors.New("transport closed")
	}
	return s.InmemTransport.AppendEntries(id, target, args, resp)
}

func (s *stallTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (s *stallTransport) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return s.InmemTransport.Close()
}

// Close ends although a replication goroutine is stuck in the transport:
// past ShutdownTimeout the transport is closed under Raft. (Without the
// bound, Close waits for that goroutine forever and the test times out.)
func TestCloseBoundedWithStalledFollower(t *testing.T) {
	_, inmem := raft.NewInmemTransport("")
	tr := &stallTransport{InmemTransport: inmem, stalled: "stalled", closed: make(chan struct{}), entered: make(chan struct{})}
	n, err := Open(Config{NodeID: "a", DataDir: t.TempDir(), Transport: tr, LogOutput: io.Discard,
		HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond,
		ShutdownTimeout: 100 * time.Millisecond}, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !n.IsLeader() {
		if ctx.Err() != nil {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := n.raft.AddNonvoter("b", "stalled", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.entered:
	case <-ctx.Done():
		t.Fatal("replication never reached the stalled follower")
	}
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-tr.closed:
	default:
		t.Fatal("Close returned but the transport was never closed")
	}
}
