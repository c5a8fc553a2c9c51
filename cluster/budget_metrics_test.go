package cluster

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

// Every reason of limitd_key_budget_refusals_total is one series of the
// same metric (a registry refuses mismatched descriptors), and the
// max_inline_keys series counts the state machine's inline refusals.
func TestBudgetMetricsCountInlineRefusals(t *testing.T) {
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), fsm.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range budgetCollectors(f) {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "10s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	b := fsm.Bounds{MaxKeys: 100, MaxInlineKeys: 1}
	for i, k := range []string{"a", "b", "c"} {
		op := fsm.Op{Checks: []fsm.Check{{Key: k, Spec: &spec, Cost: 1}}}
		f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: fsm.EncodeCheckBounded(nil, now, 0, b, []fsm.Op{op})})
	}
	if n, err := testutil.GatherAndCount(reg, "limitd_key_budget_refusals_total"); err != nil || n != 4 {
		t.Fatalf("%d series (%v), want 4 reasons", n, err)
	}
	want := map[string]float64{fsm.ReasonMaxInlineKeys: 2, fsm.ReasonMaxKeys: 0, fsm.ReasonDisk: 0, fsm.ReasonMaxRequestIDs: 0}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mfs[0].GetMetric() {
		r := m.GetLabel()[0].GetValue()
		if got := m.GetCounter().GetValue(); got != want[r] {
			t.Errorf("reason %s: %v, want %v", r, got, want[r])
		}
	}
}
