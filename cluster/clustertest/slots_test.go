package clustertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

func slotCheck(t *testing.T, n *cluster.Node, c fsm.Check) fsm.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := n.Check(ctx, []fsm.Op{{Checks: []fsm.Check{c}}})
	if err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	if res[0].Err != nil {
		t.Fatalf("%+v: %v", c, res[0].Err)
	}
	return res[0]
}

// A slot acquired through a follower is released through another node; a
// leader change neither frees a held slot early nor keeps it past its hold,
// because every node decides a slot's end from the leader-stamped time in
// the log (fsm/slots.go).
func TestSlotsAcrossNodesAndLeaderChange(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, nil)
	spec, err := algo.Config{Algorithm: "concurrency", Limit: 1, Hold: "4s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	l := c.Leader()
	f1, f2 := (l+1)%3, (l+2)%3
	acquire := func(n int, key string) fsm.Result {
		return slotCheck(t, c.Node(n), fsm.Check{Key: key, Spec: &spec, Cost: 1})
	}
	release := func(n int, key, slot string) fsm.Result {
		return slotCheck(t, c.Node(n), fsm.Check{Key: key, Spec: &spec, SlotOp: fsm.SlotRelease, Slot: slot})
	}

	r := acquire(f1, "a")
	slot := r.Decisions[0].Slot
	if !r.Allowed || slot == "" {
		t.Fatalf("acquire through follower %d: %+v", f1, r)
	}
	if r := acquire(f2, "a"); r.Allowed {
		t.Fatalf("a second slot through follower %d: %+v", f2, r)
	}
	if r := release(f2, "a", slot); !r.Allowed {
		t.Fatalf("release through follower %d: %+v", f2, r)
	}
	if r := release(l, "a", slot); r.Allowed {
		t.Fatalf("a repeated release through the leader freed it again: %+v", r)
	}
	if r := acquire(l, "a"); !r.Allowed {
		t.Fatalf("acquire after the release: %+v", r)
	}

	// A slot held across a leader change.
	r = acquire(f1, "b")
	if !r.Allowed {
		t.Fatalf("acquire b: %+v", r)
	}
	end := time.Now().Add(r.Decisions[0].SlotHold)
	c.Stop(l)
	nl := c.WaitLeader(10 * time.Second)
	other := f1
	if nl == f1 {
		other = f2
	}
	if time.Now().Before(end.Add(-500 * time.Millisecond)) {
		r = acquire(other, "b")
		if r.Allowed {
			t.Fatalf("the slot was freed early by the leader change (%v before its end)", time.Until(end))
		}
		if ra := r.Decisions[0].RetryAfter; ra <= 0 || ra > spec.Window {
			t.Fatalf("retry_after %v, want within the hold", ra)
		}
	} else {
		t.Logf("the election took until the slot's end: the early-free check is skipped")
	}
	// Past its end (leader time and this clock agree within the test's
	// slack) the slot is free on the new leader.
	time.Sleep(time.Until(end) + 300*time.Millisecond)
	if r := acquire(other, "b"); !r.Allowed {
		t.Fatalf("the slot was kept past its hold after the leader change: %+v", r)
	}
}
