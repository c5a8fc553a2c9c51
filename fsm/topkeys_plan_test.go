package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// topView renders a top-keys view as "key=count ..." for comparison.
func topView(f *FSM, q nodeapi.TopKeysQuery) string {
	if q.Limit == 0 {
		q.Limit = topK
	}
	s := ""
	for _, k := range f.TopKeys(q).Keys {
		s += fmt.Sprintf("%s=%d ", k.Key, k.Count)
	}
	return s
}

// TestTopKeysOfPlanChecks: a check decided under the key's plan is counted
// under the plan (allowed cost, refusals) and, for a refusal, under each
// limit that refused; a limit's allowed view is its plan's. Fails if plan
// checks are left out of the sketches, counted under the wrong plan or
// limit, or if a deleted plan's or a removed limit's view survives.
func TestTopKeysOfPlanChecks(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(planOf(t, "free", freeLimits))) // per_second 2/s, daily 5
	d.ok(EncodePutPlan(planOf(t, "pro", proLimits)))
	d.ok(EncodeSetDefaultPlan("free"))
	d.ok(EncodeAssignPlans([]Assignment{{Key: "big", Plan: "pro"}}))
	// A policy named like the plan: its view is apart.
	d.putPolicy(Policy{Name: "free", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"})})
	start := t0 - t0%hour
	// a: 3 checks in one second: 2 allowed, the 3rd refused by per_second.
	for i := 0; i < 3; i++ {
		d.planCheck(start+int64(i), "a", 1)
	}
	// b: 5 allowed over 5 seconds (daily is then spent), the 6th refused by
	// daily alone.
	for i := 0; i < 6; i++ {
		d.planCheck(start+int64(i)*sec, "b", 1)
	}
	// c: refused by both limits, twice (cost 6 > 2 per second and > 5 a
	// day).
	d.planCheck(start+10*sec, "c", 6)
	d.planCheck(start+20*sec, "c", 6)
	// big (plan pro): cost 7, allowed.
	d.planCheck(start+30*sec, "big", 7)
	d.planCheck(start+31*sec, "big", 0) // a peek counts nothing
	d.one(start+32*sec, "free", "p", 4) // the policy "free"

	q := func(plan, lim, by string, w time.Duration) string {
		return topView(f, nodeapi.TopKeysQuery{Plan: plan, PlanLimit: lim, By: by, Window: w})
	}
	for _, w := range []time.Duration{5 * time.Minute, time.Hour} {
		for _, c := range []struct{ plan, lim, by, want string }{
			{"free", "", nodeapi.TopByAllowed, "b=5 a=2 "},
			{"free", "daily", nodeapi.TopByAllowed, "b=5 a=2 "},
			{"free", "per_second", nodeapi.TopByAllowed, "b=5 a=2 "},
			{"free", "", nodeapi.TopByRefused, "c=2 a=1 b=1 "},
			{"free", "per_second", nodeapi.TopByRefused, "c=2 a=1 "},
			{"free", "daily", nodeapi.TopByRefused, "c=2 b=1 "},
			{"pro", "", nodeapi.TopByAllowed, "big=7 "},
			{"pro", "", nodeapi.TopByRefused, ""},
			{"none", "", nodeapi.TopByAllowed, ""},
		} {
			if got := q(c.plan, c.lim, c.by, w); got != c.want {
				t.Errorf("plan %s limit %q by %s over %v: %q, want %q", c.plan, c.lim, c.by, w, got, c.want)
			}
		}
	}
	if got := topView(f, nodeapi.TopKeysQuery{Policy: "free", By: nodeapi.TopByAllowed, Window: time.Hour}); got != "p=4 " {
		t.Fatalf("policy free: %q", got)
	}

	// The plan changed without per_second: that limit's view goes, the
	// plan's stays.
	d.ok(EncodePutPlan(planOf(t, "free", map[string]algo.Config{"daily": freeLimits["daily"]})))
	if got := q("free", "per_second", nodeapi.TopByRefused, time.Hour); got != "" {
		t.Fatalf("removed limit: %q", got)
	}
	if got := q("free", "daily", nodeapi.TopByRefused, time.Hour); got != "c=2 b=1 " {
		t.Fatalf("kept limit: %q", got)
	}
	d.ok(EncodeSetDefaultPlan(""))
	d.ok(EncodeDeletePlan("free"))
	if got := q("free", "", nodeapi.TopByAllowed, time.Hour); got != "" {
		t.Fatalf("deleted plan: %q", got)
	}
	if got := q("pro", "", nodeapi.TopByAllowed, time.Hour); got != "big=7 " {
		t.Fatalf("other plan after a delete: %q", got)
	}
	f.top.mu.Lock()
	sets := f.top.planSets
	f.top.mu.Unlock()
	if sets != 1 {
		t.Fatalf("%d plan sketch sets counted, want 1 (pro)", sets)
	}
}

// TestTopKeysPlanSetsBounded: past maxTopPlanSets new plans are not
// tracked, and deleting plans frees their sets for others.
func TestTopKeysPlanSetsBounded(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	lim := map[string]algo.Config{"daily": {Algorithm: "fixed_window", Limit: 1, Calendar: "day", Timezone: "UTC"}}
	for i := 0; i <= maxTopPlanSets/2; i++ {
		name := fmt.Sprintf("p%d", i)
		d.ok(EncodePutPlan(planOf(t, name, lim)))
		d.ok(EncodeAssignPlans([]Assignment{{Key: name, Plan: name}}))
		d.planCheck(t0, name, 1)
		d.planCheck(t0, name, 1) // refused: the plan's set and its limit's
	}
	f.top.mu.Lock()
	sets, n := f.top.planSets, len(f.top.plans)
	f.top.mu.Unlock()
	if sets != maxTopPlanSets || n != maxTopPlanSets/2 {
		t.Fatalf("%d sets over %d plans, want %d over %d", sets, n, maxTopPlanSets, maxTopPlanSets/2)
	}
	last := fmt.Sprintf("p%d", maxTopPlanSets/2)
	if got := topView(f, nodeapi.TopKeysQuery{Plan: last, By: nodeapi.TopByAllowed, Window: time.Hour}); got != "" {
		t.Fatalf("past the bound: %q", got)
	}
	d.ok(EncodeDeletePlan("p0"))
	d.planCheck(t0+sec, last, 0)
	d.planCheck(t0+sec, last, 1) // refused (daily 1 spent above): now tracked
	if got := topView(f, nodeapi.TopKeysQuery{Plan: last, PlanLimit: "daily", By: nodeapi.TopByRefused, Window: time.Hour}); got != last+"=1 " {
		t.Fatalf("after a delete freed sets: %q", got)
	}
}
