package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// TestDegradedPartitionStaysWithinTheBound: a node cut off from the two
// others (which keep the quorum) answers a degraded policy alone, marked
// degraded, with its share ceil(limit/3) per key and window; the checks
// admitted in the window on both sides stay within limit + ceil(limit/3)
// (docs/CLUSTER.md, one node alone); after the heal the replicated usage
// includes every unit admitted alone (none lost, none twice) and a policy
// without the option still failed fast (503) while cut off.
func TestDegradedPartitionStaysWithinTheBound(t *testing.T) {
	const limit, share = 30, 10
	c := clustertest.MakeCluster(t, 3, nil)
	l := c.Leader()
	x := (l + 1) % 3
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: limit, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	d := fsm.Policy{Name: "d", Spec: spec}
	d.Options.Degraded = nodeapi.DegradedShare
	for _, p := range []fsm.Policy{d, {Name: "plain", Spec: spec}} {
		if err := c.Node(l).Catalog().PutPolicy(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitConverged()
	quorum := service.New(clustertest.ServiceDeps(c.Node(l)), service.Config{})
	alone := service.New(clustertest.ServiceDeps(c.Node(x)), service.Config{RequestTimeout: 300 * time.Millisecond})
	check := func(s *service.Service, policy, key string) (nodeapi.Decision, *service.Error) {
		res, e := s.Check(context.Background(), &service.CheckRequest{Key: key, Policy: policy, Cost: 1})
		return res.Decision, e
	}
	c.Disconnect(x)
	admitted := map[string]int{}
	// "a": the quorum side spends 5; "b": it spends the whole limit.
	for key, n := range map[string]int{"a": 5, "b": limit + 1} {
		for range n {
			if dec, e := check(quorum, "d", key); e != nil {
				t.Fatal(e)
			} else if dec.Allowed {
				admitted[key]++
			}
		}
	}
	for _, key := range []string{"a", "b"} {
		alonePhase := 0
		for range share + 3 {
			dec, e := check(alone, "d", key)
			if e != nil {
				t.Fatalf("the node alone failed %q instead of answering degraded: %v", key, e)
			}
			if !dec.Degraded {
				t.Fatalf("the node alone answered %+v, not marked degraded", dec)
			}
			if dec.Allowed {
				admitted[key]++
				alonePhase++
			}
		}
		if alonePhase != share {
			t.Errorf("key %q: the node alone admitted %d, want its share %d", key, alonePhase, share)
		}
		if admitted[key] > limit+share {
			t.Errorf("key %q: %d admitted in the window, over the bound limit + ceil(limit/3) = %d", key, admitted[key], limit+share)
		}
	}
	if _, e := check(alone, "plain", "a"); e == nil || e.Code != service.CodeUnavailable {
		t.Errorf("a policy without the option answered %v alone, want unavailable (503)", e)
	}
	c.Heal()
	for deadline := time.Now().Add(3 * clustertest.Timeout); ; time.Sleep(50 * time.Millisecond) {
		if st := alone.DegradedStats(); st.Pending == 0 && st.Charged == 2*share {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the degraded admissions were never charged after the heal: %+v", alone.DegradedStats())
		}
	}
	rs, err := c.Node(c.Leader()).Check(context.Background(), []fsm.Op{{Checks: []fsm.Check{{Key: "a", Policy: "d"}}}})
	if err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	if got, want := rs[0].Decisions[0].Remaining, int64(limit-admitted["a"]); got != want {
		t.Errorf("after the heal key \"a\" has %d remaining, want %d: the replicated usage lacks what was admitted alone (admitted %d)", got, want, admitted["a"])
	}
	if dec, e := check(quorum, "d", "b"); e != nil || dec.Allowed {
		t.Errorf("after the heal key \"b\" (overdrawn) allowed another: %+v %v", dec, e)
	}
}
