package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Under budgets the meter takes each group's CFS counters over the
// measured interval (end − begin), as it does CPU time.
func TestCPUMeterThrottle(t *testing.T) {
	cpu := map[int]time.Duration{1: time.Second, 2: time.Second}
	thr := map[int]Throttle{1: {Periods: 100, Throttled: 10}, 2: {Periods: 7, Throttled: 0}}
	read := func(pid int) func() (Throttle, error) { return func() (Throttle, error) { return thr[pid], nil } }
	m := NewCPUMeter(ProcessCPU{Role: "leader", PID: 1, Budget: 0.25, ReadThrottle: read(1)},
		ProcessCPU{Role: "load generator", PID: 2})
	m.readCPU = func(pid int) (time.Duration, error) { return cpu[pid], nil }
	now := time.Unix(0, 0)
	m.now = func() time.Time { return now }
	m.Begin()
	now = now.Add(2 * time.Second)
	cpu[1] += 490 * time.Millisecond
	thr[1] = Throttle{Periods: 300, Throttled: 190}
	got, err := m.End()
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Throttle != (Throttle{Periods: 200, Throttled: 180}) || got[0].Throttle.ThrottledFraction() != 0.9 {
		t.Errorf("leader's throttle over the interval: %+v", got[0].Throttle)
	}
	if u := got[0].BudgetUsed(m.Interval()); u < 0.979 || u > 0.981 {
		t.Errorf("leader used %v of 0.25 CPU over 2 s with 0.49 s, want 0.98", u)
	}
	if got[1].Throttle != (Throttle{}) || got[1].BudgetUsed(m.Interval()) != 0 {
		t.Errorf("the generator had no budget: %+v", got[1])
	}
}

// What a budgeted row says of itself: nodes throttled of budgeted, the
// generator's saturation (void), in the JSON line (and back) and the table.
func TestBudgetJudgement(t *testing.T) {
	r := Result{System: "limitd", Allowed: 1000, CPUInterval: 10 * time.Second, LoadAvg: 3.5, CPU: []ProcessCPU{
		{Role: "leader", Name: "bench1", CPU: 2500 * time.Millisecond, Budget: 0.25, Throttle: Throttle{Periods: 1000, Throttled: 900}},
		{Role: "follower", Name: "bench2", CPU: 1000 * time.Millisecond, Budget: 0.25, Throttle: Throttle{Periods: 1000, Throttled: 100}},
		{Role: "follower", Name: "bench3", CPU: 900 * time.Millisecond, Budget: 0.25, Throttle: Throttle{Periods: 1000, Throttled: 99}},
		{Role: "load generator", Name: "limitd bench", CPU: 4 * time.Second, Budget: 0.5},
	}}
	if th, n := r.BudgetedNodes(); th != 2 || n != 3 {
		t.Errorf("throttled %d of %d nodes, want 2 of 3 (10%% counts, 9.9%% does not)", th, n)
	}
	if r.GeneratorSaturated() {
		t.Error("a generator at 80% of its budget is saturated: only above 80% is")
	}
	s := budgetString(r)
	for _, want := range []string{"bench1 0.25 CPU: used 100%, throttled in 90% of 1,000 periods", "2 of 3 nodes throttled", "limitd bench 0.5 CPU: used 80%"} {
		if !strings.Contains(s, want) {
			t.Errorf("budget row %q lacks %q", s, want)
		}
	}
	if strings.Contains(s, "VOID") {
		t.Errorf("budget row %q: void at 80%%", s)
	}
	r.CPU[3].CPU = 4100 * time.Millisecond
	if !r.GeneratorSaturated() || !strings.Contains(budgetString(r), "VOID") {
		t.Errorf("a generator at 82%% of its budget: not void (%q)", budgetString(r))
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	json.Unmarshal(b, &j)
	if j["budgeted_nodes"] != 3.0 || j["throttled_nodes"] != 2.0 || j["generator_saturated"] != true || j["load_avg_1m"] != 3.5 {
		t.Errorf("JSON line %s", b)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.CPU[0].Budget != 0.25 || back.CPU[0].Throttle != r.CPU[0].Throttle || back.LoadAvg != 3.5 || !back.GeneratorSaturated() {
		t.Errorf("read back %+v", back.CPU[0])
	}
	var tbl strings.Builder
	if err := WriteTable(&tbl, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CPU budget", "3.50 (1-minute load average"} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tbl.String())
		}
	}
}
