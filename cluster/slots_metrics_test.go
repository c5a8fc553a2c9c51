package cluster

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

// TestSlotAndDebtMetrics: limitd_slots_acquired_total counts allowed
// acquires only (not a refusal, not a retried acquire), and
// limitd_slots_released_total releases of a held slot only (not a repeated
// release, not an unknown slot); limitd_cost_debited_units_total counts
// the units overdrafts charged (all of each one's cost), and limitd_overdrafts_total
// the overdrafts.
func TestSlotAndDebtMetrics(t *testing.T) {
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), fsm.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conc, err := algo.Config{Algorithm: "concurrency", Limit: 2, Hold: "10s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	fw, err := algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	index := uint64(0)
	apply := func(c fsm.Check, id string) fsm.Result {
		t.Helper()
		index++
		rs, ok := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand,
			Data: fsm.EncodeCheck(nil, now, int64(time.Hour), []fsm.Op{{RequestID: id, Checks: []fsm.Check{c}}})}).([]fsm.Result)
		if !ok || len(rs) != 1 || rs[0].Err != nil {
			t.Fatalf("apply %+v: %+v", c, rs)
		}
		return rs[0]
	}
	acq := func(id string) fsm.Result { return apply(fsm.Check{Key: "k", Spec: &conc, Cost: 1}, id) }
	rel := func(slot string) fsm.Result {
		return apply(fsm.Check{Key: "k", Spec: &conc, SlotOp: fsm.SlotRelease, Slot: slot}, "")
	}
	if !acq("a").Allowed || !acq("b").Allowed || acq("c").Allowed {
		t.Fatal("two slots then a refusal")
	}
	acq("a") // a retry: replayed, not a second acquire
	rel("a")
	rel("a") // freed already
	index++  // a slot never held is refused with a field error, counted nowhere
	if rs, _ := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: fsm.EncodeCheck(nil, now, int64(time.Hour),
		[]fsm.Op{{Checks: []fsm.Check{{Key: "k", Spec: &conc, SlotOp: fsm.SlotRelease, Slot: "unknown"}}}})}).([]fsm.Result); len(rs) != 1 || rs[0].Err == nil {
		t.Fatalf("release of an unknown slot: %+v", rs)
	}
	if r := apply(fsm.Check{Key: "d", Spec: &fw, Cost: 25, Overdraft: true}, ""); !r.Allowed {
		t.Fatalf("overdraft: %+v", r)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(slotCollectors(f)...)
	reg.MustRegister(costCollectors(f)...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	for name, want := range map[string]float64{
		"limitd_slots_acquired_total":     2,
		"limitd_slots_released_total":     1,
		"limitd_overdrafts_total":         1,
		"limitd_cost_debited_units_total": 25, // the overdraft's whole charge, as fsm counts it (not only the 15 past the limit)
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
