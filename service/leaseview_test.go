package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// TestLeaseSnapshot: the status page's view of the lease table lists the
// keys with units left, most spent first, each with what it has left (the
// units counted in the replicated state minus those spent) and when its
// lease ends; the cap keeps the first ones and counts the rest; an expired
// lease is not listed.
func TestLeaseSnapshot(t *testing.T) {
	r := newReplicated(t)
	c := &clock{t: time.Unix(1000, 0)}
	s := leasedServices(t, r, 1, c)[0]
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1000, Calendar: "day"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.deps.Policies.PutPolicy(context.Background(), nodeapi.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 100_000, MaxTTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if views, more := s.LeaseSnapshot(10); len(views) != 0 || more != 0 {
		t.Fatalf("no leases yet: %+v, %d more", views, more)
	}
	const keys = 5
	for i := 0; i < keys; i++ {
		// Two checks through the log take the lease; each one after is
		// spent from it: key i spends 1+i units.
		for j := 0; j < 3+i; j++ {
			if _, e := s.Check(context.Background(), &CheckRequest{Key: fmt.Sprint("k", i), Policy: "daily", Cost: 1}); e != nil {
				t.Fatal(e)
			}
			waitGrants(s)
		}
	}
	views, more := s.LeaseSnapshot(3)
	if len(views) != 3 || more != keys-3 {
		t.Fatalf("capped at 3: %d views, %d more; want 3 and %d", len(views), more, keys-3)
	}
	for n, v := range views {
		i := keys - 1 - n // the most spent first
		if v.Policy != "daily" || v.Key != fmt.Sprint("k", i) || v.Spent != int64(1+i) {
			t.Errorf("view %d: %+v, want k%d with %d spent", n, v, i, 1+i)
		}
		peek, e := s.Peek(context.Background(), &CheckRequest{Key: v.Key, Policy: "daily"})
		if e != nil {
			t.Fatal(e)
		}
		// The lease's units are counted in the state besides the two checks
		// that went through the log.
		if units := 1000 - 2 - peek.Decision.Remaining; v.Left+v.Spent != units || v.Left <= 0 {
			t.Errorf("%s: %d left + %d spent, want the %d units leased", v.Key, v.Left, v.Spent, units)
		}
		if v.ExpiresIn <= 0 || v.ExpiresIn > time.Minute {
			t.Errorf("%s: expires in %s, want within the minute of its grant (the clock has not moved)", v.Key, v.ExpiresIn)
		}
	}
	first := views[0].ExpiresIn
	if all, more := s.LeaseSnapshot(keys + 1); len(all) != keys || more != 0 || all[keys-1].Key != "k0" {
		t.Errorf("uncapped: %+v, %d more", all, more)
	}
	if none, more := s.LeaseSnapshot(0); len(none) != 0 || more != keys {
		t.Errorf("cap 0: %+v, %d more", none, more)
	}
	c.add(time.Minute / 2)
	if v, _ := s.LeaseSnapshot(1); len(v) != 1 || v[0].ExpiresIn != first-time.Minute/2 {
		t.Errorf("half way: %+v, want %s less than %s", v, time.Minute/2, first)
	}
	c.add(time.Minute / 2)
	if v, more := s.LeaseSnapshot(10); len(v) != 0 || more != 0 {
		t.Errorf("expired leases listed: %+v, %d more", v, more)
	}
}
