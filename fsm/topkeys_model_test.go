package fsm

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"pgregory.net/rapid"
)

// topEvent is one count the model keeps: at leader time t, n of kind under
// view (a policy, "plan/P" or "plan/P/L" for a limit's refusals).
type topEvent struct {
	t       int64
	view    string
	key     string
	refused bool
	n       int64
}

// topModel is the specification of the top-keys views: the sum of every
// count in the window's buckets, computed from the answers the checks got.
// With fewer keys than the sketch holds, every count is exact.
type topModel struct{ ev []topEvent }

func (m *topModel) view(view string, refused bool, w time.Duration, now int64) string {
	width, n := topMinute, int64(5)
	if w == time.Hour {
		width, n = topFive, 12
	}
	sum := map[string]int64{}
	for _, e := range m.ev {
		if e.view == view && e.refused == refused && e.t/width > now/width-n {
			sum[e.key] += e.n
		}
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if sum[keys[i]] != sum[keys[j]] {
			return sum[keys[i]] > sum[keys[j]]
		}
		return keys[i] < keys[j]
	})
	s := ""
	for _, k := range keys {
		s += fmt.Sprintf("%s=%d ", k, sum[k])
	}
	return s
}

// TestTopKeysPlanModel drives plan checks (keys moving between two plans),
// policy checks and time at random, and checks every view — each plan by
// allowed and refused, each plan limit by refused and allowed (its plan's),
// the policy — over both windows against topModel after each step. Fails
// if a plan check is counted under another plan, a limit that did not
// refuse, the policy of the same name, or outside its window.
func TestTopKeysPlanModel(t *testing.T) {
	tight := map[string]algo.Config{
		"burst": {Algorithm: "token_bucket", Limit: 3, Window: "10s"},
		"daily": {Algorithm: "fixed_window", Limit: 8, Window: "20m"},
	}
	rapid.Check(t, func(rt *rapid.T) {
		f := openFSM(t, "", Options{NoSync: true, CommitEvery: 64})
		d := newDriver(t, f)
		plans := map[string]Plan{"free": planOf(t, "free", tight), "pro": planOf(t, "pro", proLimits)}
		for _, p := range plans {
			d.ok(EncodePutPlan(p))
		}
		d.ok(EncodeSetDefaultPlan("free"))
		d.putPolicy(Policy{Name: "free", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 4, Window: "1m"})})
		keys := []string{"k1", "k2", "k3", "k4"}
		m := &topModel{}
		now := t0
		for step := 0; step < 60; step++ {
			now += rapid.Int64Range(0, 4*int64(time.Minute)).Draw(rt, "dt") / rapid.SampledFrom([]int64{1, 60, 600}).Draw(rt, "scale")
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			cost := rapid.Int64Range(0, 4).Draw(rt, "cost")
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				d.ok(EncodeAssignPlans([]Assignment{{Key: key, Plan: rapid.SampledFrom([]string{"", "pro", "free"}).Draw(rt, "plan")}}))
			case 1:
				r := d.one(now, "free", key, cost)
				if r.Err != nil {
					rt.Fatal(r.Err)
				}
				if cost > 0 {
					m.ev = append(m.ev, topEvent{t: now, view: "free", key: key, refused: !r.Allowed, n: map[bool]int64{true: cost, false: 1}[r.Allowed]})
				}
			default:
				r := d.planCheck(now, key, cost)
				if r.Err != nil {
					rt.Fatal(r.Err)
				}
				pd := r.Decisions[0].Plan
				if cost == 0 {
					break
				}
				if r.Allowed {
					m.ev = append(m.ev, topEvent{t: now, view: "plan/" + pd.Plan, key: key, n: cost})
					break
				}
				m.ev = append(m.ev, topEvent{t: now, view: "plan/" + pd.Plan, key: key, refused: true, n: 1})
				for _, l := range pd.Limits {
					if !l.Allowed {
						m.ev = append(m.ev, topEvent{t: now, view: "plan/" + pd.Plan + "/" + l.Name, key: key, refused: true, n: 1})
					}
				}
			}
			last := f.LastTime()
			for _, w := range []time.Duration{5 * time.Minute, time.Hour} {
				for _, refused := range []bool{false, true} {
					by := map[bool]string{false: nodeapi.TopByAllowed, true: nodeapi.TopByRefused}[refused]
					check := func(q nodeapi.TopKeysQuery, view string) {
						q.Window, q.By = w, by
						if got, want := topView(f, q), m.view(view, refused, w, last); got != want {
							rt.Fatalf("step %d, %+v: %q, model %q", step, q, got, want)
						}
					}
					check(nodeapi.TopKeysQuery{Policy: "free"}, "free")
					for name, p := range plans {
						check(nodeapi.TopKeysQuery{Plan: name}, "plan/"+name)
						for _, l := range p.Limits {
							view := "plan/" + name + "/" + l.Name
							if !refused {
								view = "plan/" + name // a limit's allowed cost is its plan's
							}
							check(nodeapi.TopKeysQuery{Plan: name, PlanLimit: l.Name}, view)
						}
					}
				}
			}
		}
	})
}
