package lease

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// grantingNode grants every request units for valid, and records the
// returns.
type grantingNode struct {
	units int64
	valid time.Duration

	mu      sync.Mutex
	grants  int
	returns []nodeapi.LeaseReturn
}

// LastTime: no replica time, so no lease counts as rolled.
func (*grantingNode) LastTime() int64 { return 0 }

func (n *grantingNode) GrantLeases(_ context.Context, reqs []nodeapi.LeaseRequest) ([]nodeapi.LeaseGrant, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	gs := make([]nodeapi.LeaseGrant, len(reqs))
	for i, r := range reqs {
		gs[i] = nodeapi.LeaseGrant{ID: r.ID, Units: n.units, Valid: n.valid, Limit: 100, Remaining: 50}
		n.grants++
	}
	return gs, nil
}

func (n *grantingNode) ReturnLeases(_ context.Context, rets []nodeapi.LeaseReturn) ([]int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.returns = append(n.returns, rets...)
	return make([]int64, len(rets)), nil
}

// A key is leased after leaseAfterChecks misses; its lease is spent to the
// unit and no further, never after its end, and what is left goes back at
// Close. Fails if the table spends beyond a grant, past its local end, or
// keeps units at Close.
func TestTableSpendsWithinTheGrant(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	n := &grantingNode{units: 3, valid: 10 * time.Second}
	tb := New(n, Options{Now: clock, Linger: time.Hour})
	spec, _ := algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"}.Spec()
	opt := algo.Lease{Share: 500_000, MaxTTL: 10 * time.Second}
	for i := 0; i < leaseAfterChecks; i++ {
		if _, hit := tb.Spend("p", "k", spec, opt, 1); hit {
			t.Fatalf("check %d answered from a lease before any grant", i)
		}
	}
	tb.Flush() // the grant the second miss asked for
	for i := 0; i < 2; i++ {
		if d, hit := tb.Spend("p", "k", spec, opt, 1); !hit || !d.Allowed {
			t.Fatalf("spend %d of a 3-unit lease: hit %v, %+v", i, hit, d)
		}
	}
	if _, hit := tb.Spend("p", "k", spec, opt, 2); hit {
		t.Fatal("a cost of 2 spent from a lease with 1 unit left")
	}
	if st := tb.Stats(); st.Taken != 1 || st.Answered != 2 || st.Held != 1 {
		t.Fatalf("stats %+v", st)
	}
	mu.Lock()
	now = now.Add(10 * time.Second) // past the lease's deadline
	mu.Unlock()
	if _, hit := tb.Spend("p", "k", spec, opt, 1); hit {
		t.Fatal("a lease spent past its deadline")
	}
	tb.Close(context.Background())
	n.mu.Lock()
	defer n.mu.Unlock()
	var unspent int64
	for _, r := range n.returns {
		unspent += r.Unspent
	}
	if unspent != 1 {
		t.Fatalf("returned %d unspent units (%+v), want the 1 left", unspent, n.returns)
	}
}
