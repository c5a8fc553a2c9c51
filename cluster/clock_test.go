package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/service"
)

// clockPolicy is policy "q": fixed_window limit per window, leases of half
// of what remains valid up to ttl.
func clockPolicy(t *testing.T, c *clustertest.Cluster, limit int64, window, ttl time.Duration) {
	t.Helper()
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: limit, Window: window.String()}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Node(c.Leader()).Catalog().PutPolicy(context.Background(), fsm.Policy{Name: "q", Spec: spec, Lease: algo.Lease{Share: 500_000, MaxTTL: ttl}}); err != nil {
		t.Fatal(err)
	}
}

// earlyInWindow waits until the true time is between from and to into a
// window.
func earlyInWindow(window, from, to time.Duration) {
	for in := time.Duration(time.Now().UnixNano() % int64(window)); in < from || in > to; in = time.Duration(time.Now().UnixNano() % int64(window)) {
		time.Sleep(20 * time.Millisecond)
	}
}

func spendAll(t *testing.T, n interface {
	Check(context.Context, []fsm.Op) ([]fsm.Result, error)
}, cost int64) fsm.Result {
	t.Helper()
	rs, err := n.Check(context.Background(), []fsm.Op{{Checks: []fsm.Check{{Key: "k", Policy: "q", Cost: cost}}}})
	if err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	return rs[0]
}

// takeLease makes s (over node i) hold a lease on "k".
func takeLease(t *testing.T, s *service.Service) {
	t.Helper()
	deadline := time.Now().Add(clustertest.Timeout)
	for s.LeaseStats().Taken == 0 {
		if _, e := s.Check(context.Background(), &service.CheckRequest{Key: "k", Policy: "q", Cost: 1}); e != nil {
			t.Fatal(e)
		}
		if time.Now().After(deadline) {
			t.Fatal("no lease taken")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rolledOnHolder: a leader's clock ahead by a window (stepped forward, or a
// failover to a node whose clock is ahead) rolls the log into the next
// window while a follower still holds a lease of the last one, valid by its
// own monotonic clock. Once the follower's replica has applied the roll, the
// lease is spent no more: every unit of it would come on top of the new
// window's budget, which the leader spends in full here.
func rolledOnHolder(t *testing.T, c *clustertest.Cluster, ahead func(leader int) int, holderIdx int, window time.Duration) {
	const limit = 1000
	holder := leasedService(t, c, holderIdx)
	t.Cleanup(func() { holder.CloseLeases(context.Background()) })
	takeLease(t, holder)
	l := ahead(c.Leader())
	if r := spendAll(t, c.Node(l), limit); !r.Allowed {
		t.Fatalf("the leader ahead by a window is still in the old one: %+v", r.Decisions[0])
	}
	end := c.Node(l).LastTime() / int64(window) * int64(window) // the start of the leader's window
	for deadline := time.Now().Add(clustertest.Timeout); c.Node(holderIdx).LastTime() < end; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the holder never applied the next window")
		}
	}
	allowed := 0
	for i := 0; i < 20; i++ {
		res, e := holder.Check(context.Background(), &service.CheckRequest{Key: "k", Policy: "q", Cost: 1})
		if e == nil && service.Allowed(&res.Decision) {
			allowed++
		}
	}
	if allowed > 0 {
		t.Fatalf("%d allowed by the holder on top of the %d the leader spent of the window its clock rolled into (lease stats %+v)", allowed, limit, holder.LeaseStats())
	}
}

// TestClockStepForwardLeaseStaysInItsWindow: the leader's clock steps
// forward by a window.
func TestClockStepForwardLeaseStaysInItsWindow(t *testing.T) {
	const window = 10 * time.Second
	c := clustertest.MakeCluster(t, 3, nil)
	clockPolicy(t, c, 1000, window, 5*time.Second)
	earlyInWindow(window, 300*time.Millisecond, 3*time.Second)
	f := (c.Leader() + 1) % 3
	rolledOnHolder(t, c, func(l int) int { c.SetClockOffset(l, window); return l }, f, window)
}

// TestClockAheadFailoverLeaseStaysInItsWindow: leadership moves to a node
// whose clock is a window ahead.
func TestClockAheadFailoverLeaseStaysInItsWindow(t *testing.T) {
	const window = 10 * time.Second
	c := clustertest.MakeCluster(t, 3, nil)
	clockPolicy(t, c, 1000, window, 5*time.Second)
	earlyInWindow(window, 300*time.Millisecond, 3*time.Second)
	l := c.Leader()
	f, b := (l+1)%3, (l+2)%3
	rolledOnHolder(t, c, func(l int) int {
		c.SetClockOffset(b, window)
		if err := c.Node(l).TransferLeadershipTo(c.Node(b).ID(), c.RaftAddr(b)); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(clustertest.Timeout); c.LeaderNow() != b; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("node ahead never led")
			}
		}
		return b
	}, f, window)
}

// TestClockStepBackNeitherReopensNorFreezes: the leader's clock steps back
// by a window after the window's budget is spent. The window does not open
// again (leader time never goes back), and the next window still opens on
// time: leader time runs on at the monotonic clock's rate instead of
// waiting a window for the wall clock to catch up (its budget lost).
func TestClockStepBackNeitherReopensNorFreezes(t *testing.T) {
	const window = 2 * time.Second
	c := clustertest.MakeCluster(t, 3, nil)
	clockPolicy(t, c, 100, window, time.Second)
	earlyInWindow(window, 100*time.Millisecond, 800*time.Millisecond)
	l := c.Leader()
	if r := spendAll(t, c.Node(l), 100); !r.Allowed {
		t.Fatalf("a fresh window refused: %+v", r.Decisions[0])
	}
	start := time.Now().UnixNano() / int64(window)
	c.SetClockOffset(l, -window)
	if r := spendAll(t, c.Node(l), 1); r.Allowed {
		t.Fatal("the spent window opened again after the leader's clock stepped back")
	}
	for time.Now().UnixNano()/int64(window) == start {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if r := spendAll(t, c.Node(l), 1); !r.Allowed {
		t.Fatalf("the next window is still closed %v after it began: leader time froze with the clock behind (%+v)", 200*time.Millisecond, r.Decisions[0])
	}
}
