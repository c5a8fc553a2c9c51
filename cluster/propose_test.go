package cluster_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/fsm"
)

// lostFuture is a proposal that reached the log (and commits) but whose
// leader reports losing leadership before confirming it, as raft does when
// it steps down with entries in flight.
type lostFuture struct{ raft.ApplyFuture }

func (f lostFuture) Error() error {
	f.ApplyFuture.Error() // the entry is in the log and commits
	return raft.ErrLeadershipLost
}

// raft.ErrLeadershipLost after a proposal means "may have been applied":
// the caller gets cluster.ErrOutcomeUnknown and the check is not proposed again.
// Treating it as "not proposed" (retrying) counts the check twice; this
// fails every time on that mutation, unlike the fault tests which catch it
// only when leadership happens to move at the right moment.
func TestLeadershipLostAfterProposalIsNotRetried(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.Node(0)
	var injected atomic.Bool
	cluster.SetPropose(n, func(cmd []byte, timeout time.Duration) raft.ApplyFuture {
		f := n.Raft().Apply(cmd, timeout)
		if injected.CompareAndSwap(false, true) {
			return lostFuture{f}
		}
		return f
	})
	spec := slidingLog(5, time.Hour)
	res, err := n.Check(context.Background(), check("lost", spec))
	if !errors.Is(err, cluster.ErrOutcomeUnknown) {
		t.Fatalf("check whose leader lost leadership after proposing: %+v %v, want cluster.ErrOutcomeUnknown", res, err)
	}
	peek := []fsm.Op{{Checks: []fsm.Check{{Key: "lost", Spec: spec, Cost: 0}}}}
	res, err = n.Check(context.Background(), peek)
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Decisions[0].Remaining; got != 4 {
		t.Fatalf("remaining after one check with an unknown outcome: %d, want 4 (counted once)", got)
	}
}
