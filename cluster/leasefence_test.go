package cluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/service"
)

// TestLoweredLimitBindsCutOffLeaseHolder: a follower holding a lease is cut
// off from the others while its clients still reach it; the limit is
// lowered through the leader. Once the change is acknowledged, the units
// allowed in the window — by the cut-off holder, still spending what it
// holds, and by the leader — stay within the new limit: the acknowledgement
// waits until the holder's lease is over (cluster/leasefence.go).
func TestLoweredLimitBindsCutOffLeaseHolder(t *testing.T) {
	const window = 20 * time.Second
	c := clustertest.MakeCluster(t, 3, nil)
	l := c.Leader()
	f := (l + 1) % 3
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "20s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	pol := fsm.Policy{Name: "q", Spec: spec, Lease: algo.Lease{Share: 300_000, MaxTTL: 2 * time.Second}}
	ctx := context.Background()
	// Everything below must fall in one window (about 6 s of it).
	for in := time.Duration(time.Now().UnixNano() % int64(window)); in < 500*time.Millisecond || in > 12*time.Second; in = time.Duration(time.Now().UnixNano() % int64(window)) {
		time.Sleep(100 * time.Millisecond)
	}
	windowOf := func(at time.Time) int64 { return at.UnixNano() / int64(window) }
	if err := c.Node(l).Catalog().PutPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	holder, leader := leasedService(t, c, f), leasedService(t, c, l)
	t.Cleanup(func() { holder.CloseLeases(context.Background()) })
	deadline := time.Now().Add(clustertest.Timeout)
	for holder.LeaseStats().Taken == 0 {
		if _, e := holder.Check(ctx, &service.CheckRequest{Key: "k", Policy: "q", Cost: 1}); e != nil {
			t.Fatal(e)
		}
		if time.Now().After(deadline) {
			t.Fatal("no lease taken")
		}
		time.Sleep(5 * time.Millisecond)
	}
	begin := time.Now()
	c.Partition(f)

	// The cut-off holder answers its clients, one check every 4 ms.
	type answer struct {
		sent    time.Time
		allowed bool
	}
	var (
		mu      sync.Mutex
		answers []answer
		stop    = make(chan struct{})
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(4 * time.Millisecond):
			}
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			sent := time.Now()
			res, e := holder.Check(cctx, &service.CheckRequest{Key: "k", Policy: "q", Cost: 1})
			cancel()
			mu.Lock()
			answers = append(answers, answer{sent, e == nil && service.Allowed(&res.Decision)})
			mu.Unlock()
		}
	}()

	lowered := pol
	lowered.Spec.Limit = 200
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = c.Node(l).Catalog().PutPolicy(pctx, lowered)
	cancel()
	ack := time.Now()
	if err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	// The rest of the cluster is checked too, for a while after the ack.
	after := 0
	for end := ack.Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		sent := time.Now()
		res, e := leader.Check(ctx, &service.CheckRequest{Key: "k", Policy: "q", Cost: 1})
		if e == nil && service.Allowed(&res.Decision) && sent.After(ack) {
			after++
		}
	}
	close(stop)
	<-done
	if windowOf(begin) != windowOf(time.Now()) {
		t.Fatalf("the test crossed a window boundary (began %v, now %v)", begin, time.Now())
	}
	before, fromHolder := 0, 0
	mu.Lock()
	for _, a := range answers {
		switch {
		case !a.allowed:
		case a.sent.After(ack):
			fromHolder++
		default:
			before++
		}
	}
	mu.Unlock()
	t.Logf("acknowledged %v after the cut; allowed by the cut-off holder before the ack %d, after %d; by the leader after %d",
		ack.Sub(begin).Round(time.Millisecond), before, fromHolder, after)
	if got := fromHolder + after; got > int(lowered.Spec.Limit) {
		t.Fatalf("%d allowed in the window after the change to %d was acknowledged (%d by the cut-off holder)", got, lowered.Spec.Limit, fromHolder)
	}
	if before+fromHolder == 0 {
		t.Fatal("the cut-off holder spent nothing from its lease: the test tests nothing")
	}
}

// TestLeaseFenceForwardedAndDeadline: with a lease outstanding, a lowering
// put through a follower whose deadline ends before the old max_ttl answers
// unavailable at once,
// saying why; repeated while the fence is live (by the log's time), it is
// acknowledged only after the old max_ttl (the fence travels in the
// forwarded answer).
func TestLeaseFenceForwardedAndDeadline(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, nil)
	f := (c.Leader() + 1) % 3
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	pol := fsm.Policy{Name: "q", Spec: spec, Lease: algo.Lease{Share: 300_000, MaxTTL: ttl}}
	ctx := context.Background()
	if err := c.Node(f).Catalog().PutPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	// A lease outstanding under the policy is what the change waits for.
	holder := leasedService(t, c, f)
	t.Cleanup(func() { holder.CloseLeases(context.Background()) })
	takeLease(t, holder)
	pol.Spec.Limit = 200
	short, cancel := context.WithTimeout(ctx, ttl/4)
	defer cancel()
	err = c.Node(f).Catalog().PutPolicy(short, pol)
	var fe *fsm.Error
	if !errors.As(err, &fe) || fe.Code != fsm.CodeUnavailable || !strings.Contains(fe.Message, "leases") {
		t.Fatalf("a put whose deadline ends before the fence: %v", err)
	}
	start := time.Now()
	if err := c.Node(f).Catalog().PutPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < ttl {
		t.Fatalf("the repeated put was acknowledged after %v, before the old max_ttl %v", took, ttl)
	}
}

// TestLeaseFenceNeedsALease: a stricter change of a policy under which no
// lease was granted is acknowledged at once, whatever its max_ttl.
func TestLeaseFenceNeedsALease(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, nil)
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	pol := fsm.Policy{Name: "q", Spec: spec, Lease: algo.Lease{Share: 300_000, MaxTTL: 10 * time.Minute}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, limit := range []int64{1000, 10, 1} {
		pol.Spec.Limit = limit
		if err := c.Node(c.Leader()).Catalog().PutPolicy(ctx, pol); err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
}
