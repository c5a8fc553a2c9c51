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

// TestEndsAgreedWhateverAFollowersClock: a deny-list entry's and a ban's
// end are decided on the replicated leader time, so followers whose clocks
// are an hour ahead and an hour behind agree with the leader: both deny
// and list the ban before the end (the one ahead would have ended them an
// hour early by its own clock), and neither once it has applied the
// leader's sweep at the end (reached with no check arriving).
func TestEndsAgreedWhateverAFollowersClock(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, nil)
	l := c.Leader()
	ahead, behind := (l+1)%3, (l+2)%3
	c.SetClockOffset(ahead, time.Hour)
	c.SetClockOffset(behind, -time.Hour)
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	const span = 4 * time.Second
	if err := c.Node(l).Catalog().PutPolicy(context.Background(), fsm.Policy{Name: "p", Spec: spec, OnExceed: nodeapi.OnExceed{Ban: span}}); err != nil {
		t.Fatal(err)
	}
	ls := service.New(clustertest.ServiceDeps(c.Node(l)), service.Config{})
	end := time.Now().Add(span)
	if _, e := ls.PutList(context.Background(), service.ListRequest{Name: "block", Kind: service.ListDeny,
		Entries: []service.ListEntry{{Key: "bad", Expires: end.UTC().Format(time.RFC3339Nano)}}}); e != nil {
		t.Fatal(e)
	}
	for _, key := range []string{"k", "k"} { // the second is an offence: banned for span
		if _, e := ls.Check(context.Background(), &service.CheckRequest{Key: key, Policy: "p", Cost: 1}); e != nil {
			t.Fatal(e)
		}
	}
	banEnd := c.Node(l).LastTime() + int64(span)
	c.WaitConverged()
	svc := map[int]*service.Service{l: ls}
	for _, i := range []int{ahead, behind} {
		svc[i] = service.New(clustertest.ServiceDeps(c.Node(i)), service.Config{})
	}
	reason := func(i int, key string) nodeapi.Reason {
		res, e := svc[i].Check(context.Background(), &service.CheckRequest{Key: key, Policy: "p", Cost: 1})
		if e != nil {
			t.Fatalf("node %d: %v", i, e)
		}
		return res.Decision.Reason
	}
	for _, i := range []int{l, ahead, behind} {
		if r := reason(i, "bad"); r != nodeapi.ReasonDenied {
			t.Errorf("node %d (clock %s) answers %q for the deny-listed key before the entry's end, want denied", i, map[int]string{l: "true", ahead: "+1h", behind: "-1h"}[i], r)
		}
		if bans, _, e := svc[i].ListBans("", 10); e != nil || len(bans) != 1 || bans[0].Until != banEnd {
			t.Errorf("node %d lists bans %+v %v before the ban's end, want the one until %d", i, bans, e, banEnd)
		}
	}
	if t.Failed() {
		return
	}
	last := max(end.UnixNano(), banEnd)
	for _, i := range []int{l, ahead, behind} {
		for deadline := time.Now().Add(span + clustertest.Timeout); c.Node(i).LastTime() < last; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node %d's replicated time never reached the ends: no sweep at them", i)
			}
		}
	}
	for _, i := range []int{l, ahead, behind} {
		if bans, _, _ := svc[i].ListBans("", 10); len(bans) != 0 {
			t.Errorf("node %d lists %+v after applying the sweep past the ban's end", i, bans)
		}
	}
	for _, i := range []int{l, ahead, behind} { // (the second "bad" counted is an offence: checked last)
		if r := reason(i, "bad"); r == nodeapi.ReasonDenied {
			t.Errorf("node %d still denies after applying the sweep past the entry's end", i)
		}
	}
}
