package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
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
	if err := c.Node(l).PutPolicy(ctx, fsm.Policy{Name: "q", Spec: spec, Lease: algo.Lease{Share: 100_000, MaxTTL: time.Minute}}); err != nil {
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
