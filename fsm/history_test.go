package fsm

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

const hour = 3600 * sec

func histPolicy(t testing.TB, name string, limit int64, history time.Duration) Policy {
	return Policy{Name: name, Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: limit, Window: "1h"}),
		Options: nodeapi.LimitOptions{History: history}}
}

func keyUsage(t testing.TB, f *FSM, q UsageQuery) KeyUsageHistory {
	t.Helper()
	h, err := f.KeyUsage(q)
	if err != nil {
		t.Fatalf("KeyUsage(%+v): %v", q, err)
	}
	return h
}

func export(t testing.TB, f *FSM, q ExportQuery) (ExportHeader, map[string]ExportRow) {
	t.Helper()
	var hd ExportHeader
	rows := map[string]ExportRow{}
	err := f.ExportUsage(q, func(h ExportHeader) error { hd = h; return nil }, func(r ExportRow) error {
		if _, dup := rows[r.Key]; dup {
			t.Fatalf("export lists %q twice", r.Key)
		}
		rows[r.Key] = r
		return nil
	})
	if err != nil {
		t.Fatalf("ExportUsage(%+v): %v", q, err)
	}
	return hd, rows
}

func TestRefusedCountsPerWindowAndSortRefused(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.putPolicy(histPolicy(t, "api", 2, time.Hour))
	d.putPolicy(Policy{Name: "plain", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1h"})})
	start := t0 - t0%hour
	for _, k := range []string{"a", "b", "c"} {
		d.one(start, "api", k, 2)
	}
	for i := 0; i < 3; i++ {
		d.one(start+sec, "api", "a", 1)
	}
	d.one(start+sec, "api", "c", 1)
	d.one(start+sec, "api", "c", 0) // a peek is no refusal
	p := listKeys(t, f, KeysQuery{Policy: "api", Sort: nodeapi.SortRefused, Limit: 10})
	if got := pageKeys(p); !slices.Equal(got, []string{"a", "c", "b"}) {
		t.Fatalf("by refused: %q", got)
	}
	want := map[string]int64{"a": 3, "c": 1, "b": 0}
	for _, u := range p.Keys {
		if u.Refused == nil || *u.Refused != want[u.Key] {
			t.Fatalf("%s refused %v, want %d", u.Key, u.Refused, want[u.Key])
		}
	}
	if u := listKeys(t, f, KeysQuery{Policy: "api"}).Keys[0]; u.Key != "a" || u.Refused == nil || *u.Refused != 3 {
		t.Fatalf("key order: %+v", u)
	}
	// A limit without a history option counts no refusals (they store
	// nothing): unknown, not 0.
	d.one(start, "plain", "a", 3)
	d.one(start, "plain", "a", 2)
	if u := listKeys(t, f, KeysQuery{Policy: "plain"}).Keys[0]; u.Refused != nil {
		t.Fatalf("without history: refused %d", *u.Refused)
	}
	// The next window counts afresh.
	d.one(start+hour, "api", "a", 2)
	d.one(start+hour+sec, "api", "a", 1)
	if u := listKeys(t, f, KeysQuery{Policy: "api"}).Keys[0]; u.Key != "a" || *u.Refused != 1 {
		t.Fatalf("next window: %+v refused %d", u, *u.Refused)
	}
}

func TestHistoryKeepsClosedWindowsAndExportEqualsAllowed(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.putPolicy(histPolicy(t, "api", 5, 3*time.Hour))
	start := t0 - t0%hour
	allowed := map[int64]map[string]int64{} // window start → key → allowed cost
	refused := map[int64]map[string]int64{}
	for w := int64(0); w < 5; w++ {
		ws := start + w*hour
		allowed[ws], refused[ws] = map[string]int64{}, map[string]int64{}
		for i, k := range []string{"a", "b", "a", "a", "c", "a"} {
			if k == "c" && w%2 == 1 {
				continue
			}
			cost := int64(i%3 + 1)
			r := d.one(ws+int64(i)*sec, "api", k, cost)
			if r.Allowed {
				allowed[ws][k] += cost
			} else {
				refused[ws][k]++
			}
		}
	}
	now := start + 4*hour + 10*sec
	h := keyUsage(t, f, UsageQuery{Key: "a", Policy: "api"})
	// Kept: windows ending within 3h of now (2 and 3), and the current one (4).
	var starts []int64
	for _, w := range h.Windows {
		starts = append(starts, w.Start)
		if w.Used != allowed[w.Start]["a"] || w.Refused != refused[w.Start]["a"] || w.End != w.Start+hour {
			t.Fatalf("window %d: %+v, want used %d refused %d", (w.Start-start)/hour, w, allowed[w.Start]["a"], refused[w.Start]["a"])
		}
		if w.Current != (w.Start == start+4*hour) {
			t.Fatalf("window %+v: current wrong at %d", w, now)
		}
	}
	if !slices.Equal(starts, []int64{start + 1*hour, start + 2*hour, start + 3*hour, start + 4*hour}) {
		t.Fatalf("windows %v (hours from start)", starts)
	}
	if h := keyUsage(t, f, UsageQuery{Key: "a", Policy: "api", From: start + 2*hour, To: start + 4*hour}); len(h.Windows) != 2 {
		t.Fatalf("from/to: %+v", h.Windows)
	}
	for _, w := range []int64{2, 3} {
		ws := start + w*hour
		hd, rows := export(t, f, ExportQuery{Policy: "api", Window: ws + 5*sec})
		if hd.Start != ws || hd.End != ws+hour {
			t.Fatalf("header %+v", hd)
		}
		for k, r := range rows {
			if r.Used != allowed[ws][k] || r.Refused != refused[ws][k] {
				t.Fatalf("window %d key %s: %+v, want %d/%d", w, k, r, allowed[ws][k], refused[ws][k])
			}
		}
		for k, n := range allowed[ws] {
			if n > 0 && rows[k].Key != k {
				t.Fatalf("window %d: %s missing from the export %+v", w, k, rows)
			}
		}
	}
	var e *Error
	err := f.ExportUsage(ExportQuery{Policy: "api", Window: now}, func(ExportHeader) error { return nil }, func(ExportRow) error { return nil })
	if !errors.As(err, &e) || e.Field != "window" {
		t.Fatalf("export of the open window: %v", err)
	}
	d.putPolicy(Policy{Name: "plain", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})})
	err = f.ExportUsage(ExportQuery{Policy: "plain", Window: start}, func(ExportHeader) error { return nil }, func(ExportRow) error { return nil })
	if !errors.As(err, &e) || e.Field != "policy" {
		t.Fatalf("export without history: %v", err)
	}
}

func TestHistoryOptionOnlyForFixedWindowsAndBounded(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	for _, c := range []struct {
		cfg     algo.Config
		history time.Duration
		ok      bool
	}{
		{algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"}, 400 * time.Hour, true},
		{algo.Config{Algorithm: "fixed_window", Limit: 5, Calendar: "day", Timezone: "UTC"}, 400 * 24 * time.Hour, true},
		{algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1m"}, 400 * 24 * time.Hour, false}, // 576,000 windows
		{algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1h"}, time.Hour, false},
		{algo.Config{Algorithm: "sliding_window", Limit: 5, Window: "1h"}, time.Hour, false},
	} {
		r := d.apply(EncodePutPolicy(Policy{Name: "p", Spec: mustSpec(t, c.cfg), Options: nodeapi.LimitOptions{History: c.history}}))
		var e *Error
		if c.ok != (r == nil) || !c.ok && (!errors.As(r.(error), &e) || e.Field != "history") {
			t.Fatalf("%+v history %s: %v", c.cfg, c.history, r)
		}
	}
	// A plan limit's history is judged the same way, named by the limit.
	p := planOf(t, "free", map[string]algo.Config{"rate": {Algorithm: "token_bucket", Limit: 5, Window: "1s"}})
	p.Limits[0].Options.History = time.Hour
	if r := d.apply(EncodePutPlan(p)); r == nil {
		t.Fatalf("a token_bucket plan limit took a history option")
	}
}

func TestPlanHistoryCountsAdjustmentsAndExportsByPlan(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	p := planOf(t, "free", map[string]algo.Config{"hourly": {Algorithm: "fixed_window", Limit: 10, Window: "1h"}})
	p.Limits[0].Options.History = 5 * time.Hour
	d.ok(EncodePutPlan(p))
	d.ok(EncodeSetDefaultPlan("free"))
	start := t0 - t0%hour
	plan := func(now int64, key string, cost int64) Result {
		return d.check(now, Op{Checks: []Check{{Key: key, ByPlan: true, Cost: cost}}})[0]
	}
	adjust := func(now int64, key string, cost int64) {
		r := d.check(now, Op{Checks: []Check{{Key: key, Adjust: true, Policy: "hourly", Cost: cost}}})[0]
		if r.Err != nil {
			t.Fatalf("adjust: %v", r.Err)
		}
	}
	plan(start, "k", 4)
	adjust(start+sec, "k", 3) // 3 units credited back: used 1
	plan(start+2*sec, "k", 2) // used 3
	plan(start+3*sec, "k", 9) // refused
	plan(start+hour, "k", 1)  // closes the first window
	h := keyUsage(t, f, UsageQuery{Key: "k"})
	if len(h.Windows) != 2 || h.Plan != "free" || h.Limit != "hourly" {
		t.Fatalf("%+v", h)
	}
	if w := h.Windows[0]; w.Used != 3 || w.Refused != 1 || w.Current {
		t.Fatalf("closed window %+v", w)
	}
	if w := h.Windows[1]; w.Used != 1 || !w.Current {
		t.Fatalf("current window %+v", w)
	}
	_, rows := export(t, f, ExportQuery{Plan: "free", Window: start})
	if r := rows["k"]; r.Used != 3 || r.Refused != 1 || len(rows) != 1 {
		t.Fatalf("export %+v", rows)
	}
}
