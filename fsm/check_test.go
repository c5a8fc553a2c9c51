package fsm

import (
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

func newChecker(t *testing.T, policies ...Policy) *driver {
	t.Helper()
	d := newDriver(t, openFSM(t, "", Options{NoSync: true}))
	for _, p := range policies {
		d.putPolicy(p)
	}
	return d
}

func TestTimeNeverRunsBackwards(t *testing.T) {
	fw := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1m"})
	d := newChecker(t, Policy{Name: "fw", Spec: fw})
	late := t0 + 61*sec // in the window [t0+60s, t0+120s)
	for i := 0; i < 2; i++ {
		if r := d.one(late, "fw", "k", 1); !r.Allowed {
			t.Fatalf("check %d refused", i)
		}
	}
	// A new leader whose clock reads 59 s is still in the previous window,
	// where this key spent nothing. Deciding at its time would reopen the
	// budget; the state machine decides at the latest time it has seen.
	r := d.one(t0+59*sec, "fw", "k", 1)
	if r.Allowed {
		t.Fatal("an earlier leader time reopened a closed window")
	}
	if got, want := r.Decisions[0].RetryAfter, time.Duration(t0+120*sec-late); got != want {
		t.Fatalf("RetryAfter = %v, want %v (measured from the clamped time)", got, want)
	}
	if d.f.LastTime() != late {
		t.Fatalf("LastTime = %d, want %d", d.f.LastTime(), late)
	}
	// Expire entries are clamped too.
	d.apply(EncodeExpire(t0, 10))
	if d.f.LastTime() != late {
		t.Fatal("an expire entry moved time backwards")
	}
}

func TestAllOpIsAtomic(t *testing.T) {
	perSec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1s"})
	perMin := mustSpec(t, algo.Config{Algorithm: "sliding_log", Limit: 10, Window: "1m", CountRefused: true})
	d := newChecker(t, Policy{Name: "sec", Spec: perSec}, Policy{Name: "min", Spec: perMin})
	both := Op{All: true, Checks: []Check{{Key: "u", Policy: "min", Cost: 1}, {Key: "u", Policy: "sec", Cost: 1}}}

	r := d.check(t0, both)[0]
	if !r.Allowed || !r.Decisions[0].Allowed || !r.Decisions[1].Allowed {
		t.Fatalf("first group: %+v", r)
	}
	r = d.check(t0+sec/2, both)[0]
	if r.Allowed || !r.Decisions[0].Allowed || r.Decisions[1].Allowed {
		t.Fatalf("second group: want per-minute allowed, per-second refused: %+v", r)
	}
	if r.Decisions[0].Remaining != 8 {
		t.Fatalf("per-minute answered remaining %d, want what it would have answered (8)", r.Decisions[0].Remaining)
	}
	// Nothing was consumed: not the per-minute budget, and not a
	// count_refused penalty either.
	if got := d.remaining(t0+sec/2, "min", "u"); got != 9 {
		t.Fatalf("per-minute remaining after a refused group = %d, want 9", got)
	}
	r = d.check(t0+sec, both)[0]
	if !r.Allowed {
		t.Fatalf("group in the next second refused: %+v", r)
	}
	if got := d.remaining(t0+sec, "min", "u"); got != 8 {
		t.Fatalf("per-minute remaining = %d, want 8", got)
	}
}

func TestAllOpWithDuplicateKeys(t *testing.T) {
	for _, tc := range []struct {
		limit         int64
		wantAllowed   []bool
		wantRemaining int64 // afterwards
	}{
		// The second check sees the first's tentative spend.
		{limit: 1, wantAllowed: []bool{true, false}, wantRemaining: 1},
		{limit: 2, wantAllowed: []bool{true, true}, wantRemaining: 0},
		{limit: 3, wantAllowed: []bool{true, true}, wantRemaining: 1},
	} {
		s := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: tc.limit, Window: "1h"})
		d := newChecker(t, Policy{Name: "p", Spec: s})
		r := d.check(t0, Op{All: true, Checks: []Check{{Key: "k", Policy: "p", Cost: 1}, {Key: "k", Policy: "p", Cost: 1}}})[0]
		for i, want := range tc.wantAllowed {
			if r.Decisions[i].Allowed != want {
				t.Fatalf("limit %d: check %d allowed %v, want %v", tc.limit, i, r.Decisions[i].Allowed, want)
			}
		}
		if got := d.remaining(t0, "p", "k"); got != tc.wantRemaining {
			t.Fatalf("limit %d: remaining %d, want %d", tc.limit, got, tc.wantRemaining)
		}
	}
}

func TestIndependentChecksInOneOp(t *testing.T) {
	// Without All, each check of an op stands alone: a refusal does not undo
	// the others.
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"})
	d := newChecker(t, Policy{Name: "p", Spec: s})
	d.one(t0, "p", "b", 1)
	r := d.check(t0, Op{Checks: []Check{{Key: "a", Policy: "p", Cost: 1}, {Key: "b", Policy: "p", Cost: 1}}})[0]
	if r.Allowed || !r.Decisions[0].Allowed || r.Decisions[1].Allowed {
		t.Fatalf("result %+v", r)
	}
	if d.remaining(t0, "p", "a") != 0 {
		t.Fatal("the allowed check of a non-atomic op was not consumed")
	}
}

func TestShadowPolicy(t *testing.T) {
	s := mustSpec(t, algo.Config{Algorithm: "sliding_log", Limit: 2, Window: "1m", CountRefused: true})
	d := newChecker(t, Policy{Name: "dry", Spec: s, Shadow: true}, Policy{Name: "real", Spec: s})
	for i, wantShadow := range []bool{false, false, true, true} {
		r := d.one(t0+int64(i)*sec, "dry", "k", 1)
		dec := r.Decisions[0]
		if !r.Allowed || !dec.Allowed || dec.ShadowRefused != wantShadow {
			t.Fatalf("check %d: %+v", i, r)
		}
	}
	// The shadow refusals consumed nothing, not even the count_refused
	// penalty: once the first two age out the key is open again.
	if r := d.one(t0+61*sec, "dry", "k", 1); r.Decisions[0].ShadowRefused {
		t.Fatal("shadow refusals were logged as penalties")
	}
	// A shadow check inside an All group never blocks the group.
	d.one(t0, "real", "g", 0)
	r := d.check(t0+62*sec, Op{All: true, Checks: []Check{{Key: "k", Policy: "dry", Cost: 2}, {Key: "g", Policy: "real", Cost: 1}}})[0]
	if !r.Allowed || !r.Decisions[0].ShadowRefused {
		t.Fatalf("group with a refusing shadow check: %+v", r)
	}
	if d.remaining(t0+62*sec, "real", "g") != 1 {
		t.Fatal("the real check of the group was not consumed")
	}
}

func TestRequestIDs(t *testing.T) {
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "24h"})
	d := newChecker(t, Policy{Name: "p", Spec: s})
	op := Op{RequestID: "req-1", Checks: []Check{{Key: "k", Policy: "p", Cost: 3}}}
	retention := int64(time.Minute)
	check := func(now int64, ops ...Op) []Result {
		t.Helper()
		rs, ok := d.apply(EncodeCheck(nil, now, retention, ops)).([]Result)
		if !ok {
			t.Fatal("bad response")
		}
		return rs
	}

	first := check(t0, op)[0]
	if first.Replayed || first.Decisions[0].Remaining != 7 {
		t.Fatalf("first: %+v", first)
	}
	// Repeated in a later entry and twice within one entry: answered from
	// the table, consuming nothing.
	later := check(t0+sec, op)[0]
	same := check(t0+2*sec, op, op)
	for i, r := range []Result{later, same[0], same[1]} {
		if !r.Replayed || r.Allowed != first.Allowed || r.Decisions[0] != first.Decisions[0] {
			t.Fatalf("repeat %d: %+v, want the first result replayed", i, r)
		}
	}
	if got := d.remaining(t0+2*sec, "p", "k"); got != 7 {
		t.Fatalf("remaining = %d, want 7: a repeat was counted", got)
	}
	if d.f.Stats().RequestIDs != 1 {
		t.Fatalf("RequestIDs = %d", d.f.Stats().RequestIDs)
	}
	// Refusals are remembered too.
	big := Op{RequestID: "req-2", Checks: []Check{{Key: "k", Policy: "p", Cost: 100}}}
	if r := check(t0+3*sec, big)[0]; r.Allowed || r.Replayed {
		t.Fatalf("big: %+v", r)
	}
	if r := check(t0+4*sec, big)[0]; r.Allowed || !r.Replayed {
		t.Fatalf("big repeated: %+v", r)
	}

	// Just before the retention ends the id is still known; at its end it
	// is new again, and an expire entry removes both ids.
	if r := check(t0+retention-1, op)[0]; !r.Replayed {
		t.Fatal("id forgotten before its retention ended")
	}
	if r := check(t0+retention, op)[0]; r.Replayed || r.Decisions[0].Remaining != 4 {
		t.Fatalf("after retention: %+v, want a fresh decision", r)
	}
	d.apply(EncodeExpire(t0+retention+5*sec, 100))
	if got := d.f.Stats().RequestIDs; got != 1 {
		t.Fatalf("RequestIDs after expiry = %d, want 1 (req-1 was re-recorded)", got)
	}
	d.apply(EncodeExpire(t0+3*retention, 100))
	if got := d.f.Stats().RequestIDs; got != 0 {
		t.Fatalf("RequestIDs after full expiry = %d", got)
	}
}

func TestOpErrorsConsumeNothing(t *testing.T) {
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})
	bad := algo.Spec{Algorithm: algo.FixedWindow, Limit: 5} // no window
	long := make([]byte, MaxKeyBytes+1)
	for _, tc := range []struct {
		name  string
		op    Op
		code  Code
		field string
	}{
		{"unknown policy in a group", Op{All: true, RequestID: "r", Checks: []Check{{Key: "k", Policy: "p", Cost: 1}, {Key: "k", Policy: "nope", Cost: 1}}}, "not_found", "policy"},
		{"unknown policy alone", Op{RequestID: "r", Checks: []Check{{Key: "k", Policy: "nope", Cost: 1}}}, "not_found", "policy"},
		{"invalid inline limit", Op{Checks: []Check{{Key: "k", Policy: "p", Cost: 1}, {Key: "k", Spec: &bad, Cost: 1}}}, "invalid_argument", "limit.window"},
		{"policy and limit", Op{Checks: []Check{{Key: "k", Policy: "p", Spec: &s, Cost: 1}}}, "invalid_argument", "limit"},
		{"no limit", Op{Checks: []Check{{Key: "k", Cost: 1}}}, "invalid_argument", "limit"},
		{"negative cost", Op{Checks: []Check{{Key: "k", Policy: "p", Cost: 1}, {Key: "k", Policy: "p", Cost: -1}}}, "invalid_argument", "cost"},
		{"empty key", Op{Checks: []Check{{Policy: "p", Cost: 1}}}, "invalid_argument", "key"},
		{"long key", Op{Checks: []Check{{Key: string(long), Policy: "p", Cost: 1}}}, "invalid_argument", "key"},
		{"no checks", Op{}, "invalid_argument", "checks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newChecker(t, Policy{Name: "p", Spec: s})
			r := d.check(t0, tc.op)[0]
			if r.Err == nil || r.Err.Code != tc.code || r.Err.Field != tc.field || r.Allowed {
				t.Fatalf("result %+v err %+v, want %s on %s", r, r.Err, tc.code, tc.field)
			}
			if got := d.remaining(t0, "p", "k"); got != 5 {
				t.Fatalf("remaining %d: an op that failed consumed budget", got)
			}
			if d.f.Stats().RequestIDs != 0 {
				t.Fatal("a failed op's request id was remembered")
			}
		})
	}
}

func TestInlineLimitsAndPoliciesAreSeparateIdentities(t *testing.T) {
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "1h"})
	other := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "2h"})
	d := newChecker(t, Policy{Name: "p", Spec: s}, Policy{Name: "q", Spec: s})
	inline := func(spec *algo.Spec, cost int64) Result {
		return d.check(t0, Op{Checks: []Check{{Key: "k", Spec: spec, Cost: cost}}})[0]
	}
	d.one(t0, "p", "k", 1)
	if got := d.remaining(t0, "q", "k"); got != 3 {
		t.Fatalf("policy q sees policy p's spend: %d", got)
	}
	if r := inline(&s, 2); r.Decisions[0].Remaining != 1 {
		t.Fatalf("inline limit shares state with a policy of the same spec: %+v", r)
	}
	// The same inline spec, decoded afresh, is the same limit.
	same := s
	if r := inline(&same, 0); r.Decisions[0].Remaining != 1 {
		t.Fatalf("equal inline specs are different limits: %+v", r)
	}
	if r := inline(&other, 0); r.Decisions[0].Remaining != 3 {
		t.Fatalf("different inline specs share state: %+v", r)
	}
	if d.f.Stats().Keys != 2 {
		t.Fatalf("Keys = %d, want 2 (p/k and the inline limit's k)", d.f.Stats().Keys)
	}
}

func TestResetKey(t *testing.T) {
	s := mustSpec(t, algo.Config{Algorithm: "sliding_window", Limit: 3, Window: "1h"})
	d := newChecker(t, Policy{Name: "p", Spec: s})
	d.one(t0, "p", "a", 3)
	d.one(t0, "p", "b", 3)
	d.check(t0, Op{Checks: []Check{{Key: "a", Spec: &s, Cost: 3}}})
	if r := d.apply(EncodeResetKey(Check{Key: "a", Policy: "p"})); r != nil {
		t.Fatalf("reset = %v", r)
	}
	if d.remaining(t0, "p", "a") != 3 || d.remaining(t0, "p", "b") != 0 {
		t.Fatal("reset did not reset exactly the one key")
	}
	if r := d.check(t0, Op{Checks: []Check{{Key: "a", Spec: &s, Cost: 0}}})[0]; r.Decisions[0].Remaining != 0 {
		t.Fatal("reset under a policy touched the inline limit of the same key")
	}
	if r := d.apply(EncodeResetKey(Check{Key: "a", Spec: &s})); r != nil {
		t.Fatalf("inline reset = %v", r)
	}
	if d.f.Stats().Keys != 1 {
		t.Fatalf("Keys = %d after resets, want 1", d.f.Stats().Keys)
	}
	if e, ok := d.apply(EncodeResetKey(Check{Key: "a", Policy: "nope"})).(*Error); !ok || e.Code != "not_found" {
		t.Fatal("reset under an unknown policy not refused")
	}
	// Resetting an absent key is not an error.
	if r := d.apply(EncodeResetKey(Check{Key: "zzz", Policy: "p"})); r != nil {
		t.Fatalf("reset of an absent key = %v", r)
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	s := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 2, Window: "1h"})
	d := newChecker(t, Policy{Name: "p", Spec: s})
	for i := 0; i < 3; i++ {
		if r := d.one(t0, "p", "k", 0); !r.Allowed || r.Decisions[0].Remaining != 2 {
			t.Fatalf("peek %d: %+v", i, r)
		}
	}
	if d.f.Stats().Keys != 0 {
		t.Fatal("peeking a fresh key stored state")
	}
}
