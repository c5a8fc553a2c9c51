package fsm

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

func planOf(t testing.TB, name string, limits map[string]algo.Config) Plan {
	t.Helper()
	p := Plan{Name: name}
	for _, n := range sortedKeys(limits) {
		p.Limits = append(p.Limits, PlanLimit{Name: n, Spec: mustSpec(t, limits[n])})
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func (d *driver) ok(cmd []byte) {
	d.t.Helper()
	if r := d.apply(cmd); r != nil {
		d.t.Fatalf("apply: %v", r)
	}
}

func (d *driver) refused(cmd []byte, code Code, field string) {
	d.t.Helper()
	r := d.apply(cmd)
	var e *Error
	if err, _ := r.(error); !errors.As(err, &e) || e.Code != code || e.Field != field {
		d.t.Fatalf("got %v, want %s on %q", r, code, field)
	}
}

func (d *driver) planCheck(now int64, key string, cost int64) Result {
	d.t.Helper()
	return d.check(now, Op{Checks: []Check{{Key: key, ByPlan: true, Cost: cost}}})[0]
}

var (
	freeLimits = map[string]algo.Config{
		"per_second": {Algorithm: "token_bucket", Limit: 2, Window: "1s"},
		"daily":      {Algorithm: "fixed_window", Limit: 5, Calendar: "day", Timezone: "UTC"},
	}
	proLimits = map[string]algo.Config{
		"per_second": {Algorithm: "token_bucket", Limit: 100, Window: "1s"},
		"daily":      {Algorithm: "fixed_window", Limit: 1000, Calendar: "day", Timezone: "UTC"},
	}
)

func TestPlanCheckResolvesAndDecidesAtomically(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(planOf(t, "free", freeLimits)))
	d.ok(EncodePutPlan(planOf(t, "pro", proLimits)))

	r := d.planCheck(t0, "tenant:acme", 1)
	if r.Err == nil || r.Err.Code != CodeNotFound || r.Err.Field != "policy" {
		t.Fatalf("no plan: %+v", r)
	}
	d.ok(EncodeSetDefaultPlan("free"))
	r = d.planCheck(t0, "tenant:acme", 1)
	if r.Err != nil || !r.Allowed || r.Decisions[0].Plan == nil || r.Decisions[0].Plan.Plan != "free" {
		t.Fatalf("default: %+v", r)
	}
	pd := r.Decisions[0].Plan
	if len(pd.Limits) != 2 || pd.Limits[0].Name != "daily" || pd.Limits[1].Name != "per_second" || pd.Limit != "per_second" {
		t.Fatalf("plan decision %+v", pd)
	}
	// per_second (2) refuses the third check in the same second; the
	// refusal consumes nothing in daily either (atomic group).
	d.planCheck(t0, "tenant:acme", 1)
	r = d.planCheck(t0, "tenant:acme", 1)
	if r.Allowed || r.Decisions[0].Plan.Limit != "per_second" {
		t.Fatalf("third: %+v %+v", r, r.Decisions[0].Plan)
	}
	if got := r.Decisions[0].Plan.Limits[0].Remaining; got != 3 {
		t.Fatalf("daily remaining reported by a refused group = %d, want 3", got)
	}
	if got := d.planCheck(t0, "tenant:acme", 0).Decisions[0].Plan.Limits[0].Remaining; got != 3 {
		t.Fatalf("daily remaining after a refused group = %d, want 3", got)
	}

	// A prefix rule beats the default; an assignment beats the rule.
	d.ok(EncodePutPrefixRule(PrefixRule{Prefix: "tenant:", Plan: "pro"}))
	if r := d.planCheck(t0, "tenant:acme", 1); r.Decisions[0].Plan.Plan != "pro" {
		t.Fatalf("rule: %+v", r.Decisions[0].Plan)
	}
	// The shared limit "daily" kept what the key consumed under free (2, then 1 under pro).
	if r := d.planCheck(t0, "tenant:acme", 0); r.Decisions[0].Plan.Limits[0].Remaining != 1000-3 {
		t.Fatalf("daily under pro: %+v", r.Decisions[0].Plan.Limits[0])
	}
	d.ok(EncodeAssignPlans([]Assignment{{Key: "tenant:acme", Plan: "free"}}))
	if r := d.planCheck(t0+2*sec, "tenant:acme", 1); r.Decisions[0].Plan.Plan != "free" {
		t.Fatalf("assignment: %+v", r.Decisions[0].Plan)
	}
	d.ok(EncodeAssignPlans([]Assignment{{Key: "tenant:acme", Plan: ""}}))
	if r := d.planCheck(t0+2*sec, "tenant:acme", 0); r.Decisions[0].Plan.Plan != "pro" {
		t.Fatalf("unassigned: %+v", r.Decisions[0].Plan)
	}

	// Overlapping rules are refused; so is deleting a plan in use.
	d.refused(EncodePutPrefixRule(PrefixRule{Prefix: "tenant:a", Plan: "free"}), CodeInvalidArgument, "prefix")
	d.refused(EncodePutPrefixRule(PrefixRule{Prefix: "ten", Plan: "free"}), CodeInvalidArgument, "prefix")
	d.refused(EncodePutPrefixRule(PrefixRule{Prefix: "x:", Plan: "nope"}), CodeNotFound, "plan")
	d.ok(EncodePutPrefixRule(PrefixRule{Prefix: "tenant:", Plan: "free"})) // replacing the same prefix is fine
	d.refused(EncodeDeletePlan("free"), CodeConflict, "plan")
	d.refused(EncodeDeletePlan("nope"), CodeNotFound, "plan")

	// A plan check is alone in its op.
	rs := d.check(t0, Op{All: true, Checks: []Check{{Key: "k", ByPlan: true, Cost: 1}, {Key: "k", ByPlan: true, Cost: 1}}})
	if rs[0].Err == nil || rs[0].Err.Field != "policy" {
		t.Fatalf("two plan checks: %+v", rs[0])
	}
}

func TestBulkAssignIsAllOrNothing(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(planOf(t, "free", freeLimits)))
	d.refused(EncodeAssignPlans([]Assignment{{Key: "a", Plan: "free"}, {Key: "b", Plan: "nope"}}), CodeNotFound, "assignments[1].plan")
	if kp, _ := f.KeyPlan("a", t0); kp.Plan != "" {
		t.Fatalf("partly applied: %+v", kp)
	}
	d.refused(EncodeAssignPlans(nil), CodeInvalidArgument, "assignments")
	d.ok(EncodeAssignPlans([]Assignment{{Key: "a", Plan: "free"}, {Key: "b", Plan: "free"}}))
	if kp, _ := f.KeyPlan("b", t0); kp.Plan != "free" || kp.Source != nodeapi.SourceAssignment {
		t.Fatalf("b: %+v", kp)
	}
}

func TestOverrideReplacesFieldsUntilItExpires(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(planOf(t, "free", freeLimits)))
	d.refused(EncodePutOverride("k", Override{Limits: []LimitOverride{{Name: "daily", Limit: 7}}}), CodeNotFound, "policy")
	d.ok(EncodeAssignPlans([]Assignment{{Key: "k", Plan: "free"}}))
	d.refused(EncodePutOverride("k", Override{Limits: []LimitOverride{{Name: "monthly", Limit: 7}}}), CodeInvalidArgument, "limits.monthly")
	d.refused(EncodePutOverride("k", Override{Limits: []LimitOverride{{Name: "daily", Burst: 7}}}), CodeInvalidArgument, "limits.daily.burst")
	d.ok(EncodePutOverride("k", Override{Limits: []LimitOverride{{Name: "daily", Limit: 7}}, Expires: t0 + 10*sec}))
	r := d.planCheck(t0, "k", 1)
	if !r.Decisions[0].Plan.Overridden || r.Decisions[0].Plan.Limits[0].Limit != 7 {
		t.Fatalf("overridden: %+v", r.Decisions[0].Plan)
	}
	if kp, _ := f.KeyPlan("k", t0); kp.Override == nil {
		t.Fatal("KeyPlan has no override")
	}
	r = d.planCheck(t0+10*sec, "k", 1)
	if r.Decisions[0].Plan.Overridden || r.Decisions[0].Plan.Limits[0].Limit != 5 {
		t.Fatalf("expired override still applied: %+v", r.Decisions[0].Plan)
	}
	d.refused(EncodeDeleteOverride("k"), CodeNotFound, "key") // cleaned at the check that found it expired
}

func TestPlanResultsRoundTrip(t *testing.T) {
	in := []Result{{Allowed: true, Decisions: []Decision{{Decision: algo.Decision{Allowed: true, Limit: 5, Remaining: 4},
		Plan: &nodeapi.PlanDecision{Plan: "pro", Limit: "daily", Overridden: true, Limits: []nodeapi.NamedDecision{
			{Name: "daily", Decision: algo.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 3}},
			{Name: "per_second", Decision: algo.Decision{Limit: 2, RetryAfter: 9}},
		}}}}}}
	out, err := DecodeResults(AppendResults(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	p := out[0].Decisions[0].Plan
	if p == nil || p.Plan != "pro" || p.Limit != "daily" || !p.Overridden || len(p.Limits) != 2 || p.Limits[1].RetryAfter != 9 || !p.Limits[0].Allowed || p.Limits[1].Allowed {
		t.Fatalf("round trip: %+v", p)
	}
	ops, err := DecodeOps(AppendOps(nil, []Op{{Checks: []Check{{Key: "k", ByPlan: true, Cost: 2}}}}))
	if err != nil || !ops[0].Checks[0].ByPlan {
		t.Fatalf("ops round trip: %+v %v", ops, err)
	}
}

// TestPlanStateSurvivesSnapshotAndReopen: plans, rules, the default,
// assignments and overrides are in the snapshot, the digest and the file.
func TestPlanStateSurvivesSnapshotAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := openFSM(t, path, Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(planOf(t, "free", freeLimits)))
	d.ok(EncodePutPlan(planOf(t, "pro", proLimits)))
	d.ok(EncodePutPrefixRule(PrefixRule{Prefix: "org:", Plan: "pro"}))
	d.ok(EncodeSetDefaultPlan("free"))
	d.ok(EncodeAssignPlans([]Assignment{{Key: "k", Plan: "pro"}}))
	d.ok(EncodePutOverride("k", Override{Limits: []LimitOverride{{Name: "daily", Limit: 9}}}))
	d.planCheck(t0, "k", 1)
	before := digest(t, f)
	snap := takeSnapshot(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openFSM(t, path, Options{})
	dst := openFSM(t, "", Options{})
	dd := newDriver(t, dst)
	dd.ok(EncodePutPlan(planOf(t, "junk", freeLimits)))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*FSM{f, dst} {
		if ps := g.Plans(); len(ps) != 2 || ps[0].Name != "free" || ps[1].Name != "pro" {
			t.Fatalf("plans %+v", ps)
		}
		if rs := g.PrefixRules(); len(rs) != 1 || rs[0] != (PrefixRule{Prefix: "org:", Plan: "pro"}) {
			t.Fatalf("rules %+v", rs)
		}
		if g.DefaultPlan() != "free" {
			t.Fatal("default lost")
		}
		kp, err := g.KeyPlan("k", t0)
		if err != nil || kp.Plan != "pro" || kp.Override == nil || kp.Override.Limits[0].Limit != 9 {
			t.Fatalf("key plan %+v %v", kp, err)
		}
		if kp, _ := g.KeyPlan("org:x", t0); kp.Source != nodeapi.SourcePrefixRule {
			t.Fatalf("org:x %+v", kp)
		}
		if got := digest(t, g); got != before {
			t.Fatalf("digest %s, want %s", got, before)
		}
		if ps := g.Policies(); len(ps) != 0 {
			t.Fatalf("plans show up as policies: %+v", ps)
		}
	}
	r := newDriver(t, dst).planCheck(t0, "k", 0)
	if r.Decisions[0].Plan.Limits[0].Remaining != 8 {
		t.Fatalf("consumption lost in restore: %+v", r.Decisions[0].Plan.Limits[0])
	}
}

func TestPlanCommandsValidate(t *testing.T) {
	bad := planOf(t, "p", freeLimits)
	bad.Limits[0].Spec.Limit = 0
	if err := ValidateCommand(EncodePutPlan(bad)); err == nil {
		t.Fatal("invalid plan accepted")
	}
	for _, cmd := range [][]byte{EncodePutPlan(planOf(t, "p", freeLimits)), EncodeDeletePlan("p"), EncodePutPrefixRule(PrefixRule{Prefix: "a", Plan: "p"}),
		EncodeDeletePrefixRule("a"), EncodeSetDefaultPlan(""), EncodeAssignPlans([]Assignment{{Key: "k", Plan: "p"}}),
		EncodePutOverride("k", Override{Limits: []LimitOverride{{Name: "daily", Limit: 1}}}), EncodeDeleteOverride("k")} {
		if err := ValidateCommand(cmd); err != nil {
			t.Fatalf("type %d: %v", cmd[0], err)
		}
	}
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.refused(EncodePutPlan(bad), CodeInvalidArgument, "limits.daily.limit")
	d.refused(EncodePutPlan(Plan{Name: "e"}), CodeInvalidArgument, "limits")
}

func (d *driver) adjust(now int64, key, limit string, add int64, requestID string) Result {
	d.t.Helper()
	return d.check(now, Op{RequestID: requestID, Checks: []Check{{Key: key, Policy: limit, Adjust: true, Cost: add}}})[0]
}

func TestAdjustCreditsTheCurrentWindowOnce(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(planOf(t, "free", freeLimits)))
	d.ok(EncodePutPlan(planOf(t, "logged", map[string]algo.Config{"log": {Algorithm: "sliding_log", Limit: 5, Window: "1m"}})))
	d.ok(EncodeAssignPlans([]Assignment{{Key: "k", Plan: "free"}, {Key: "l", Plan: "logged"}}))
	for i := 0; i < 2; i++ {
		d.planCheck(t0+int64(i)*sec, "k", 1)
	}
	r := d.adjust(t0+2*sec, "k", "daily", 1, "adj-1")
	if r.Err != nil || r.Decisions[0].Plan.Adjusted != 1 || r.Decisions[0].Remaining != 4 {
		t.Fatalf("credit: %+v %+v", r, r.Decisions)
	}
	r = d.adjust(t0+2*sec, "k", "daily", 1, "adj-1") // a retry
	if !r.Replayed || r.Decisions[0].Plan.Adjusted != 1 {
		t.Fatalf("retry: %+v", r)
	}
	if got := d.planCheck(t0+2*sec, "k", 0).Decisions[0].Plan.Limits[0].Remaining; got != 4 {
		t.Fatalf("daily remaining %d after one credit of 1, want 4", got)
	}
	r = d.adjust(t0+2*sec, "k", "daily", 1, "adj-1")
	if r = d.check(t0, Op{RequestID: "adj-1", Checks: []Check{{Key: "k", ByPlan: true, Cost: 1}}})[0]; r.Err == nil || r.Err.Code != CodeConflict {
		t.Fatalf("request id reused by a check: %+v", r)
	}
	r = d.adjust(t0+2*sec, "k", "daily", -10, "")
	if r.Err != nil || r.Decisions[0].Plan.Adjusted != -10 || r.Decisions[0].Remaining != 0 {
		t.Fatalf("debit: %+v", r.Decisions[0])
	}
	if r := d.adjust(t0, "k", "monthly", 1, ""); r.Err == nil || r.Err.Field != "limit" {
		t.Fatalf("unknown limit: %+v", r)
	}
	if r := d.adjust(t0, "l", "log", 1, ""); r.Err == nil || r.Err.Field != "limit" {
		t.Fatalf("sliding_log: %+v", r)
	}
	if r := d.adjust(t0, "nobody", "daily", 1, ""); r.Err == nil || r.Err.Field != "policy" {
		t.Fatalf("no plan: %+v", r)
	}
	ops, err := DecodeOps(AppendOps(nil, []Op{{Checks: []Check{{Key: "k", Policy: "daily", Adjust: true, Cost: -3}}}}))
	if err != nil || !ops[0].Checks[0].Adjust || ops[0].Checks[0].Policy != "daily" || ops[0].Checks[0].Cost != -3 {
		t.Fatalf("adjust ops round trip: %+v %v", ops, err)
	}
}

// TestPlanLimitStateOutlivesAWindowThatGrew: the expiry sweep keeps a plan
// limit's state while any plan's limit of that name still counts it.
func TestPlanLimitStateOutlivesAWindowThatGrew(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(planOf(t, "p", map[string]algo.Config{"w": {Algorithm: "sliding_window", Limit: 5, Window: "1s"}})))
	d.ok(EncodeSetDefaultPlan("p"))
	d.planCheck(t0, "k", 3)
	d.ok(EncodePutPlan(planOf(t, "p", map[string]algo.Config{"w": {Algorithm: "sliding_window", Limit: 5, Window: "1h"}})))
	if n := d.apply(EncodeExpire(t0+3*sec, 100)); n != 0 {
		t.Fatalf("expired %v", n)
	}
	if got := d.planCheck(t0+3*sec, "k", 0).Decisions[0].Remaining; got != 2 {
		t.Fatalf("remaining %d after the sweep, want 2", got)
	}
}

func TestPlanInfoReadsThroughTheLog(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true, CommitEvery: 1000}) // reads of the file would lag
	d := newDriver(t, f)
	info := func(key string) *nodeapi.PlanDecision {
		t.Helper()
		r := d.check(t0, Op{Checks: []Check{{Key: key, PlanInfo: true}}})[0]
		if r.Err != nil || len(r.Decisions) != 1 || r.Decisions[0].Plan == nil {
			t.Fatalf("info %q: %+v", key, r)
		}
		return r.Decisions[0].Plan
	}
	if p := info("k"); p.Plan != "" || p.Source != "" {
		t.Fatalf("no plan: %+v", p)
	}
	d.ok(EncodePutPlan(planOf(t, "free", freeLimits)))
	d.ok(EncodeAssignPlans([]Assignment{{Key: "k", Plan: "free"}}))
	d.ok(EncodePutOverride("k", Override{Limits: []LimitOverride{{Name: "daily", Limit: 9}}, Expires: t0 + sec}))
	p := info("k")
	if p.Plan != "free" || p.Source != nodeapi.SourceAssignment || p.Assigned != "free" || p.Override == nil || p.Override.Limits[0].Limit != 9 {
		t.Fatalf("info: %+v", p)
	}
	out, err := DecodeResults(AppendResults(nil, []Result{{Allowed: true, Decisions: []Decision{{Plan: p}}}}))
	if err != nil || out[0].Decisions[0].Plan.Override == nil || out[0].Decisions[0].Plan.Assigned != "free" || out[0].Decisions[0].Plan.Source != nodeapi.SourceAssignment {
		t.Fatalf("round trip: %+v %v", out, err)
	}
	d.ok(EncodeSetDefaultPlan("free"))
	if p := info("other"); p.Plan != "free" || p.Source != nodeapi.SourceDefault || p.Assigned != "" || p.Override != nil {
		t.Fatalf("default: %+v", p)
	}
}
