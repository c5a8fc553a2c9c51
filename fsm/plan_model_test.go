package fsm

import (
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// planModel is the specification of plan resolution: a few maps and the
// precedence rule, assignment > longest prefix rule > default, with an
// override applying until its expiry.
type planModel struct {
	assign   map[string]string
	rules    map[string]string
	def      string
	override map[string]int64 // key → expires (0: never)
}

func (m *planModel) resolve(key string) string {
	if p, ok := m.assign[key]; ok {
		return p
	}
	best := ""
	for prefix := range m.rules {
		if strings.HasPrefix(key, prefix) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best != "" {
		return m.rules[best]
	}
	return m.def
}

func (m *planModel) overlaps(prefix string) bool {
	for other := range m.rules {
		if other != prefix && (strings.HasPrefix(other, prefix) || strings.HasPrefix(prefix, other)) {
			return true
		}
	}
	return false
}

// TestPlanResolutionModel drives assignments, prefix rules, the default plan
// and overrides with expiry at random against planModel, checking every
// key's plan and override after each step.
func TestPlanResolutionModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		path := filepath.Join(t.TempDir(), "fsm.db")
		opts := Options{NoSync: true, CommitEvery: 64}
		f := openFSM(t, path, opts)
		d := newDriver(t, f)
		d.ok(EncodePutPlan(planOf(t, "free", freeLimits)))
		d.ok(EncodePutPlan(planOf(t, "pro", proLimits)))
		m := &planModel{assign: map[string]string{}, rules: map[string]string{}, override: map[string]int64{}}
		keys := []string{"a:1", "a:2", "ab:1", "b:1", "c"}
		prefixes := []string{"a", "a:", "ab", "b:", "c"}
		plans := []string{"free", "pro"}
		now := t0
		for step := 0; step < 40; step++ {
			now += rapid.Int64Range(0, 3*sec).Draw(rt, "dt")
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			plan := rapid.SampledFrom(plans).Draw(rt, "plan")
			switch rapid.IntRange(0, 8).Draw(rt, "op") {
			case 0:
				d.ok(EncodeAssignPlans([]Assignment{{Key: key, Plan: plan}}))
				m.assign[key] = plan
			case 1:
				d.ok(EncodeAssignPlans([]Assignment{{Key: key}}))
				delete(m.assign, key)
			case 2:
				prefix := rapid.SampledFrom(prefixes).Draw(rt, "prefix")
				r := d.apply(EncodePutPrefixRule(PrefixRule{Prefix: prefix, Plan: plan}))
				if want := m.overlaps(prefix); (r != nil) != want {
					rt.Fatalf("put rule %q: %v, model overlaps %v", prefix, r, want)
				}
				if r == nil {
					m.rules[prefix] = plan
				}
			case 3:
				prefix := rapid.SampledFrom(prefixes).Draw(rt, "prefix")
				r := d.apply(EncodeDeletePrefixRule(prefix))
				if _, ok := m.rules[prefix]; ok != (r == nil) {
					rt.Fatalf("delete rule %q: %v", prefix, r)
				}
				delete(m.rules, prefix)
			case 4:
				if rapid.Bool().Draw(rt, "clear") {
					plan = ""
				}
				d.ok(EncodeSetDefaultPlan(plan))
				m.def = plan
			case 5:
				exp := int64(0)
				if rapid.Bool().Draw(rt, "expires") {
					exp = now + rapid.Int64Range(1, 5*sec).Draw(rt, "ttl")
				}
				r := d.apply(EncodePutOverride(key, Override{Limits: []LimitOverride{{Name: "daily", Limit: 77}}, Expires: exp}))
				if (m.resolve(key) != "") != (r == nil) {
					rt.Fatalf("put override %q: %v, model plan %q", key, r, m.resolve(key))
				}
				if r == nil {
					m.override[key] = exp
				}
			case 6:
				r := d.apply(EncodeDeleteOverride(key))
				exp, ok := m.override[key]
				if live := ok && (exp == 0 || exp > now); live && r != nil || !ok && r == nil {
					rt.Fatalf("delete override %q: %v, model %v %d", key, r, ok, exp)
				}
				delete(m.override, key)
			case 7:
				// a check, below
			case 8:
				// A restart: the assignment and override counts the plan
				// check skips its lookups by are recounted from the file
				// (planRecordGroup), so a record outlives them.
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				f = openFSM(t, path, opts)
				d = newDriver(t, f)
			}
			for _, k := range keys {
				r := d.planCheck(now, k, 0)
				want := m.resolve(k)
				if want == "" {
					if r.Err == nil || r.Err.Field != "policy" {
						rt.Fatalf("%q: want no plan, got %+v", k, r)
					}
					continue
				}
				if r.Err != nil || r.Decisions[0].Plan.Plan != want {
					rt.Fatalf("%q: want plan %q, got %+v %+v", k, want, r.Err, r.Decisions)
				}
				exp, ok := m.override[k]
				live := ok && (exp == 0 || exp > now)
				if ok && !live {
					delete(m.override, k) // cleaned by the check
				}
				if got := r.Decisions[0].Plan.Overridden; got != live {
					rt.Fatalf("%q at %d: overridden %v, model %v (expires %d)", k, now, got, live, exp)
				}
			}
		}
	})
}
