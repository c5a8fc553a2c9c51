package fsm

import (
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/persist"
)

// recallCounter is a LeaseHook that counts recalls.
type recallCounter struct {
	mu      sync.Mutex
	recalls int
}

func (r *recallCounter) Recall(policy, key string) {
	r.mu.Lock()
	r.recalls++
	r.mu.Unlock()
}

func (r *recallCounter) Returned(policy, key string) {}

func (r *recallCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recalls
}

const grace = int64(LeaseReturnGrace)

// TestLeaseLateReturnCredited: a return applied after its lease expired
// (its holder's returns failed through a leader election, say) but within
// LeaseReturnGrace credits the unspent units once; a second identical
// return, another holder's, and a return once the grace is over credit
// nothing. A repeated grant request in the grace answers the same grant,
// valid no more, and consumes nothing.
func TestLeaseLateReturnCredited(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"}, 500_000, 2*time.Second))
	g := d.grant(t0, "n1", 1, "q")
	if g.Units != 50 || g.Valid != 2*time.Second {
		t.Fatalf("grant %+v, want 50 units for 2s", g)
	}
	expiry := t0 + 2*sec
	if r := d.grant(expiry+sec, "n1", 1, "q"); r.Units != 50 || r.Valid != 0 || r.Window != g.Window {
		t.Fatalf("repeated grant in the grace: %+v, want the same 50 units, valid 0", r)
	}
	if got := d.remaining(expiry+sec, "q", "k"); got != 50 {
		t.Fatalf("remaining %d after a repeated grant, want 50 (nothing consumed again)", got)
	}
	if n := d.giveBack(expiry+grace-1, "n2", 1, "q", 30); n != 0 {
		t.Fatalf("another holder's return credited %d", n)
	}
	if n := d.giveBack(expiry+grace-1, "n1", 1, "q", 30); n != 30 {
		t.Fatalf("a return in the grace credited %d, want 30", n)
	}
	if n := d.giveBack(expiry+grace-1, "n1", 1, "q", 30); n != 0 {
		t.Fatalf("a second return credited %d", n)
	}
	if got := d.remaining(expiry+grace, "q", "k"); got != 80 {
		t.Fatalf("remaining %d, want 80 (30 credited once)", got)
	}

	// A lease returned only once its grace is over: nothing.
	at := expiry + grace
	g = d.grant(at, "n1", 2, "q")
	if g.Units != 40 {
		t.Fatalf("second grant %+v, want 40", g)
	}
	if n := d.giveBack(at+2*sec+grace, "n1", 2, "q", 40); n != 0 {
		t.Fatalf("a return at the end of the grace credited %d", n)
	}
	if got := d.remaining(at+2*sec+grace, "q", "k"); got != 40 {
		t.Fatalf("remaining %d, want 40", got)
	}
}

// TestLeaseGraceNotOutstanding: a lease in its grace counts nowhere but for
// its return: not toward MaxLeasesPerKey, not in a refused grant's
// retry_after, not as leased elsewhere (nor a recall) for a refused check.
// A record keeps at most maxLeaseRecord leases, dropping those in their
// grace that expired first.
func TestLeaseGraceNotOutstanding(t *testing.T) {
	hook := &recallCounter{}
	f := openFSM(t, "", Options{NoSync: true, Leases: hook})
	d := newDriver(t, f)
	d.putPolicy(leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 1_000_000, Window: "1h"}, 1, time.Second))
	for i := 0; i < MaxLeasesPerKey; i++ {
		if g := d.grant(t0, "n1", uint64(i), "q"); g.Units != 1 {
			t.Fatalf("grant %d: %+v", i, g)
		}
	}
	// At t0+1s all of them are in their grace: a full set again.
	for i := MaxLeasesPerKey; i < 2*MaxLeasesPerKey; i++ {
		if g := d.grant(t0+sec, "n1", uint64(i), "q"); g.Units != 1 {
			t.Fatalf("grant %d with the first %d in their grace: %+v", i, MaxLeasesPerKey, g)
		}
	}
	// Full: refused until the first outstanding lease ends (t0+2s), not
	// at once (the leases in their grace ended at t0+1s).
	if g := d.grant(t0+sec, "n1", 1000, "q"); g.Units != 0 || g.RetryAfter != time.Second {
		t.Fatalf("grant beyond the bound: %+v, want none, retry after 1s", g)
	}
	// At t0+2s every one is in its grace and the record is full
	// (maxLeaseRecord): a grant drops the first to expire (id 0).
	if g := d.grant(t0+2*sec, "n1", 2000, "q"); g.Units != 1 {
		t.Fatalf("grant on a full record: %+v", g)
	}
	if n := d.giveBack(t0+2*sec, "n1", 0, "q", 1); n != 0 {
		t.Fatalf("the dropped lease's return credited %d", n)
	}
	if n := d.giveBack(t0+2*sec, "n1", 1, "q", 1); n != 1 {
		t.Fatalf("a kept lease's return in its grace credited %d, want 1", n)
	}

	// A refused check with only leases in their grace on the key is not
	// leased elsewhere: its retry_after is the window's end, and no
	// holder is recalled.
	p := leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1h"}, 500_000, 2*time.Second)
	p.Name = "r"
	d.putPolicy(p)
	at := t0 + 10*sec
	if g := d.grant(at, "n1", 1, "r"); g.Units != 5 {
		t.Fatalf("grant %+v", g)
	}
	if r := d.one(at+3*sec, "r", "k", 6); r.Allowed || r.Decisions[0].LeasedElsewhere ||
		r.Decisions[0].RetryAfter != time.Duration(t0+3600*sec-at-3*sec) || hook.count() != 0 {
		t.Fatalf("refused with a lease in its grace: %+v, %d recalls; want not leased elsewhere, retry at the window's end, none recalled",
			r.Decisions[0], hook.count())
	}
	// With one outstanding (until at+5s) too: leased elsewhere, retry
	// when that one ends.
	if g := d.grant(at+3*sec, "n2", 2, "r"); g.Units != 2 {
		t.Fatalf("grant %+v", g)
	}
	if r := d.one(at+3*sec, "r", "k", 6); r.Allowed || !r.Decisions[0].LeasedElsewhere ||
		r.Decisions[0].RetryAfter != 2*time.Second || hook.count() != 1 {
		t.Fatalf("refused with a lease outstanding for 2s: %+v, %d recalls", r.Decisions[0], hook.count())
	}
}

// TestLeaseGraceDroppedByReset: a key reset holds the units of the leases
// outstanding only, and drops those in their grace: their units were
// forgiven with the rest, so a late return must not take them off what the
// reset held for a lease that may still be spent.
func TestLeaseGraceDroppedByReset(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1h"}, 500_000, 2*time.Second))
	if g := d.grant(t0, "n1", 1, "q"); g.Units != 5 {
		t.Fatalf("grant %+v", g)
	}
	at := t0 + 3*sec // n1's lease is in its grace
	if g := d.grant(at, "n2", 2, "q"); g.Units != 2 {
		t.Fatalf("grant %+v", g)
	}
	d.apply(EncodeResetKey(Check{Key: "k", Policy: "q"}))
	if got := d.remaining(at, "q", "k"); got != 8 {
		t.Fatalf("remaining %d after the reset, want 8 (n2's 2 units held, n1's expired 5 not)", got)
	}
	if n := d.giveBack(at+sec, "n1", 1, "q", 5); n != 0 {
		t.Fatalf("a late return of a lease expired before the reset credited %d", n)
	}
	if got := d.remaining(at+sec, "q", "k"); got != 8 {
		t.Fatalf("remaining %d, want 8", got)
	}
	if n := d.giveBack(at+sec, "n2", 2, "q", 2); n != 2 {
		t.Fatalf("the held lease's return credited %d, want 2", n)
	}
}

// leaseRecordLen is the number of leases in the record of key "k" under
// policy name.
func leaseRecordLen(t *testing.T, f *FSM, name string) int {
	t.Helper()
	lkey := append([]byte{'L', 'p', byte(len(name))}, name+"k"...)
	var n int
	err := f.store.View(func(tx *persist.Tx) error {
		st, err := tx.State(lkey)
		if err != nil || !st.Found {
			return err
		}
		es, err := decodeLeaseRecord(st.Data, nil)
		n = len(es)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLeaseGracePrunedAfterWindow: a lease past its expiry whose window is
// over leaves the record, grace or not (no return could credit it), so a key
// of short windows whose leases are spent out, never returned, keeps a small
// record; a repeated grant request then gets a fresh grant.
func TestLeaseGracePrunedAfterWindow(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1s"}, 1000, 2*time.Second))
	for i := int64(0); i < 40; i++ {
		if g := d.grant(t0+i*sec, "n1", uint64(i), "q"); g.Units != 1 || g.Valid != time.Second {
			t.Fatalf("grant %d: %+v", i, g)
		}
	}
	if n := leaseRecordLen(t, f, "q"); n != 1 {
		t.Fatalf("%d leases in the record, want 1 (those of past windows pruned)", n)
	}
	// Lease 39 expired at t0+40s; in the next window, in its grace, it is
	// gone: the same id is granted afresh.
	if g := d.grant(t0+40*sec, "n1", 39, "q"); g.Units != 1 || g.Valid != time.Second || g.Window != t0+40*sec {
		t.Fatalf("repeat after the window: %+v, want a fresh grant", g)
	}
}
