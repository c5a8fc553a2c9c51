package fsm

import (
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// TestRequestIDBoundToRequest: a request id reused for a request that
// differs in key, limit, policy, cost or shape is refused as a conflict
// naming the field, consumes nothing and leaves the first request's record,
// so a true retry is still replayed exactly.
func TestRequestIDBoundToRequest(t *testing.T) {
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "24h"})
	other := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1h"})
	d := newChecker(t, Policy{Name: "p", Spec: s}, Policy{Name: "q", Spec: s})
	one := func(c Check) Op { return Op{RequestID: "id", Checks: []Check{c}} }
	first := d.check(t0, one(Check{Key: "k", Policy: "p", Cost: 3}))[0]
	if first.Err != nil || first.Replayed || first.Decisions[0].Remaining != 7 {
		t.Fatalf("first: %+v", first)
	}
	for _, tc := range []struct {
		name  string
		op    Op
		field string
	}{
		{"key", one(Check{Key: "other", Policy: "p", Cost: 3}), "key"},
		{"policy", one(Check{Key: "k", Policy: "q", Cost: 3}), "policy"},
		{"inline limit for a policy", one(Check{Key: "k", Spec: &s, Cost: 3}), "limit"},
		{"cost", one(Check{Key: "k", Policy: "p", Cost: 5}), "cost"},
		{"all-or-nothing", Op{RequestID: "id", All: true, Checks: []Check{{Key: "k", Policy: "p", Cost: 3}}}, "request_id"},
		{"more checks", Op{RequestID: "id", All: true, Checks: []Check{{Key: "k", Policy: "p", Cost: 3}, {Key: "k", Policy: "p", Cost: 3}}}, "request_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := d.check(t0+sec, tc.op)[0]
			if r.Err == nil || r.Err.Code != CodeConflict || r.Err.Field != tc.field || r.Replayed || len(r.Decisions) != 0 {
				t.Fatalf("reuse with a different %s: %+v (err %+v), want conflict on %q", tc.name, r, r.Err, tc.field)
			}
			for _, c := range tc.op.Checks {
				pol := c.Policy
				if pol == "" {
					continue
				}
				want := int64(10)
				if pol == "p" && c.Key == "k" {
					want = 7
				}
				if got := d.remaining(t0+sec, pol, c.Key); got != want {
					t.Fatalf("%s/%s remaining %d, want %d: a conflict consumed budget", pol, c.Key, got, want)
				}
			}
		})
	}
	// The conflicts left the first request's record: a true retry replays it.
	again := d.check(t0+2*sec, one(Check{Key: "k", Policy: "p", Cost: 3}))[0]
	if again.Err != nil || !again.Replayed || again.Decisions[0] != first.Decisions[0] {
		t.Fatalf("retry after conflicts: %+v, want the first decision replayed", again)
	}

	// A group: any differing check is a conflict on "checks"; the same
	// group again is a replay.
	group := Op{RequestID: "g", All: true, Checks: []Check{{Key: "a", Policy: "p", Cost: 1}, {Key: "b", Spec: &s, Cost: 1}}}
	if r := d.check(t0, group)[0]; r.Err != nil || r.Replayed {
		t.Fatalf("group: %+v", r)
	}
	changed := group
	changed.Checks = []Check{group.Checks[0], {Key: "b", Spec: &other, Cost: 1}}
	if r := d.check(t0, changed)[0]; r.Err == nil || r.Err.Code != CodeConflict || r.Err.Field != "checks" {
		t.Fatalf("group with another limit: %+v (err %+v), want conflict on checks", r, r.Err)
	}
	// Keys swapped between checks: the same multiset, another request.
	swapped := group
	swapped.Checks = []Check{{Key: "b", Policy: "p", Cost: 1}, {Key: "a", Spec: &s, Cost: 1}}
	if r := d.check(t0, swapped)[0]; r.Err == nil || r.Err.Code != CodeConflict {
		t.Fatalf("group with keys swapped: %+v, want conflict", r)
	}
	if r := d.check(t0, group)[0]; r.Err != nil || !r.Replayed {
		t.Fatalf("group retried: %+v, want replay", r)
	}
}

func TestRequestRecordRoundTrip(t *testing.T) {
	r := Result{Decisions: []Decision{{Decision: algo.Decision{Limit: 3, RetryAfter: time.Second}, ShadowRefused: true}}}
	ops := []opRef{{all: true}, {}}
	for _, op := range ops {
		checks := []checkRef{{kind: limitPolicy, key: []byte("k"), policy: []byte("p"), cost: -1}}
		fp := fingerprintOf(&op, checks)
		got, res, err := decodeRequestRecord(appendRequestRecord(nil, fp, &r))
		if err != nil || got != fp || res.Decisions[0] != r.Decisions[0] || res.Allowed != r.Allowed {
			t.Fatalf("round trip: %+v %+v %v, want %+v", got, res, err, fp)
		}
	}
	// A record without its version (such as the bare results encoding) is
	// not one: the apply reports the store corrupt rather than replaying it.
	bare := AppendResults(nil, []Result{r})
	for _, bad := range [][]byte{{requestRecordVersion}, {requestRecordVersion, 0}, {requestRecordVersion, 0x80, 1}, {requestRecordVersion, 0, 1, 1, 2}, {9}, bare} {
		if _, _, err := decodeRequestRecord(bad); err == nil {
			t.Fatalf("decodeRequestRecord(%x) accepted", bad)
		}
	}
}
