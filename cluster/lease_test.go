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

// TestLeasesThroughRaft: a follower's grant and return travel to the leader
// (re-stamped there) and are applied on every replica; the leader's work the
// same way locally. What is leased is counted at once, a return gives back
// what was not spent, and a repeated grant request takes nothing more.
func TestLeasesThroughRaft(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, nil)
	l := c.Leader()
	f := (l + 1) % 3
	ctx := context.Background()
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Node(l).Catalog().PutPolicy(ctx, fsm.Policy{Name: "q", Spec: spec, Lease: algo.Lease{Share: 100_000, MaxTTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	ck := fsm.Check{Key: "k", Policy: "q"}
	remaining := func() int64 {
		t.Helper()
		rs, err := c.Node(f).Check(ctx, []fsm.Op{{Checks: []fsm.Check{ck}}})
		if err != nil || rs[0].Err != nil {
			t.Fatal(err, rs)
		}
		return rs[0].Decisions[0].Remaining
	}
	for _, i := range []int{f, l} {
		n := c.Node(i)
		before := remaining()
		gs, err := n.GrantLeases(ctx, []fsm.LeaseRequest{{ID: 42, Check: ck}})
		if err != nil || len(gs) != 1 || gs[0].Err != nil || gs[0].Units != before/10 {
			t.Fatalf("node %d grant: %+v %v (remaining was %d)", i, gs, err, before)
		}
		again, err := n.GrantLeases(ctx, []fsm.LeaseRequest{{ID: 42, Check: ck}})
		if err != nil || again[0].Units != gs[0].Units {
			t.Fatalf("node %d repeated grant: %+v %v", i, again, err)
		}
		if got := remaining(); got != before-gs[0].Units {
			t.Fatalf("node %d: remaining %d after a grant of %d, want %d", i, got, gs[0].Units, before-gs[0].Units)
		}
		ns, err := n.ReturnLeases(ctx, []fsm.LeaseReturn{{ID: 42, Check: ck, Unspent: gs[0].Units - 1}})
		if err != nil || len(ns) != 1 || ns[0] != gs[0].Units-1 {
			t.Fatalf("node %d return: %v %v", i, ns, err)
		}
		if got := remaining(); got != before-1 {
			t.Fatalf("node %d: remaining %d after the return, want %d", i, got, before-1)
		}
	}
	// A lease entry is for leaders only: a client cannot propose one.
	if _, err := c.Node(f).Apply(ctx, fsm.EncodeGrantLease(nil, 0, "x", []fsm.LeaseRequest{{ID: 1, Check: ck}})); err == nil {
		t.Fatal("a grant proposed as an admin command")
	}
}

// TestLeasedChecksOnCluster: services over the three nodes of a real cluster
// answer a leased policy's checks mostly from leases (the followers' grants
// forwarded to the leader and re-stamped there), and once every node gives
// its leases back the key's remaining is exactly the limit minus what was
// allowed.
func TestLeasedChecksOnCluster(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, nil)
	l := c.Leader()
	ctx := context.Background()
	putLeasedPolicy(t, c, algo.Lease{Share: 10_000, MaxTTL: time.Minute})
	var svcs []*service.Service
	for i := 0; i < 3; i++ {
		svcs = append(svcs, leasedService(t, c, i))
	}
	allowed := 0
	for i := 0; i < 600; i++ {
		res, e := svcs[i%3].Check(ctx, &service.CheckRequest{Key: "k", Policy: "q", Cost: 1})
		if e != nil {
			t.Fatal(e)
		}
		if service.Allowed(&res.Decision) {
			allowed++
		}
	}
	var answered uint64
	for _, s := range svcs {
		s.CloseLeases(ctx)
		answered += s.LeaseStats().Answered
	}
	if answered == 0 {
		t.Fatal("no check was answered from a lease")
	}
	rs, err := c.Node(l).Check(ctx, []fsm.Op{{Checks: []fsm.Check{{Key: "k", Policy: "q"}}}})
	if err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	if got, want := rs[0].Decisions[0].Remaining, int64(1_000_000-allowed); got != want {
		t.Fatalf("remaining %d after every lease went back, want %d (%d allowed, %d from leases)", got, want, allowed, answered)
	}
	t.Logf("%d allowed, %d from leases", allowed, answered)
}

// TestLeaseStrictOnCluster: the recall reaches a lease's holder through its
// own replica (fsm.LeaseHook wired by Node.SetLeaseHook). One node's service
// holds every unit left of a key in a lease valid for a minute; a strict
// check on another node is refused at first only until the holder has
// given the lease back, not for the minute.
func TestLeaseStrictOnCluster(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, nil)
	ctx := context.Background()
	putLeasedPolicy(t, c, algo.Lease{Share: 1_000_000, MaxTTL: time.Minute})
	var svcs []*service.Service
	for i := 0; i < 2; i++ {
		s := leasedService(t, c, i)
		t.Cleanup(func() { s.CloseLeases(context.Background()) })
		svcs = append(svcs, s)
	}
	// A check that fails (a leadership change on a loaded machine) is
	// sent again: what is tested is the answers.
	check := func(s *service.Service) fsm.Decision {
		t.Helper()
		for i := 0; ; i++ {
			res, e := s.Check(ctx, &service.CheckRequest{Key: "k", Policy: "q", Cost: 1})
			if e == nil {
				return res.Decision
			}
			if i == 20 {
				t.Fatal(e)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	holder, other := svcs[0], svcs[1]
	check(holder)
	check(holder)                                // asks for a lease of everything left
	deadline := time.Now().Add(30 * time.Second) // only against a hang: nothing here waits on time
	for holder.LeaseStats().Taken == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no lease taken")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The holder keeps checking, so its lease never goes back for being
	// idle: only a recall can end it before its minute.
	stop := make(chan struct{})
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				_, _ = holder.Check(ctx, &service.CheckRequest{Key: "k", Policy: "q", Cost: 1})
			}
		}
	}()
	defer func() { close(stop); <-busy }()
	// Without the recall the other node is refused until the lease's
	// minute is over; with it, as soon as the holder has given back.
	for d := check(other); !d.Allowed; d = check(other) {
		if !d.LeasedElsewhere || d.RetryAfter > time.Minute {
			t.Fatalf("refusal %+v while a lease holds the rest", d)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused after 30 s: %+v, holder %+v", d, holder.LeaseStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := holder.LeaseStats(); st.Recalled == 0 {
		t.Fatalf("holder %+v: allowed without a recall", st)
	}
}

// putLeasedPolicy puts policy "q", a fixed window of 1,000,000 per hour with
// lease, through the leader.
func putLeasedPolicy(t *testing.T, c *clustertest.Cluster, lease algo.Lease) {
	t.Helper()
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1_000_000, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Node(c.Leader()).Catalog().PutPolicy(context.Background(), fsm.Policy{Name: "q", Spec: spec, Lease: lease}); err != nil {
		t.Fatal(err)
	}
}

// leasedService is a service over node i once its replica knows policy "q"
// (before, the service could not see the lease option).
func leasedService(t *testing.T, c *clustertest.Cluster, i int) *service.Service {
	t.Helper()
	for deadline := time.Now().Add(clustertest.Timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, ok := c.Node(i).Catalog().Policy("q"); ok {
			return service.New(clustertest.ServiceDeps(c.Node(i)), service.Config{})
		}
	}
	t.Fatalf("node %d's replica has no policy q after %v", i, clustertest.Timeout)
	return nil
}
