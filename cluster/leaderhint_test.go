package cluster_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
)

// A node that holds no replica of its group (removed from it, as placement
// drops a data group's replica) decides checks through the leader its
// LeaderHint names: it keeps serving rather than refusing as removed, a
// stale hint (a follower) answers not_leader and the hint is asked again
// within the check's deadline, and the checks are counted once, by the
// leader (the limit holds across the hinted path and the members').
func TestLeaderHintForwardsFromANonReplica(t *testing.T) {
	var c *clustertest.Cluster
	var hintOn atomic.Bool
	var asked atomic.Int32
	c = clustertest.MakeCluster(t, 3, func(i int, cfg *cluster.Config) {
		if i != 2 {
			return
		}
		cfg.LeaderHint = func() (string, string) {
			if !hintOn.Load() {
				return "", ""
			}
			l := c.LeaderNow()
			if l < 0 {
				return "", ""
			}
			if asked.Add(1) <= 3 { // the first answers are stale: a follower
				f := (l + 1) % 3
				if f == 2 {
					f = (l + 2) % 3
				}
				return c.Node(f).ID(), c.HTTPAddr(f)
			}
			return c.Node(l).ID(), c.HTTPAddr(l)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.Leader() == 2 {
		if err := c.Node(2).TransferLeadership(); err != nil {
			t.Fatal(err)
		}
	}
	l := c.Leader()
	if err := c.Node(l).Remove(ctx, c.Node(2).ID()); err != nil {
		t.Fatal(err)
	}
	// Removed from the configuration, it forgets the leader.
	waitFor(t, func() bool { id, _ := c.Node(2).LeaderID(); return id == "" })
	select {
	case <-c.Node(2).Removed():
		t.Fatal("a node with a LeaderHint was ended by its removal")
	default:
	}
	// Long past the no-leader bound (heartbeat + election timeout) that
	// fails a member's check at once: a non-replica hears no leader, ever.
	time.Sleep(4 * 300 * time.Millisecond)
	spec := slidingLog(3, time.Hour)
	hintOn.Store(true)
	allowed := 0
	for i := 0; i < 5; i++ {
		via := c.Node(2)
		if i%2 == 1 {
			via = c.Node(c.Leader())
		}
		res, err := via.Check(ctx, check("hinted", spec))
		if err != nil {
			t.Fatalf("check %d through %s: %v", i, via.ID(), err)
		}
		if res[0].Decisions[0].Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("%d of 5 allowed under a limit of 3", allowed)
	}
	if asked.Load() < 4 {
		t.Fatalf("the hint was asked %d times: the stale answer was not retried", asked.Load())
	}
}
