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
	"github.com/limitd/limitd/nodeapi"
)

// TestCostMetricsCountReturnedReservations: a reservation that ends open
// under reservation_expiry "return" is counted by
// limitd_reservations_returned_total with its units in
// limitd_reservations_returned_units_total, and not as expired (settled at
// its estimate); one under the default is counted as expired.
func TestCostMetricsCountReturnedReservations(t *testing.T) {
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), fsm.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	index := uint64(0)
	apply := func(cmd []byte) interface{} {
		index++
		return f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: cmd})
	}
	for _, p := range []fsm.Policy{{Name: "ret", Spec: spec, Options: nodeapi.LimitOptions{ReservationExpiry: nodeapi.ExpiryReturn}}, {Name: "keep", Spec: spec}} {
		if r := apply(fsm.EncodePutPolicy(p)); r != nil {
			t.Fatalf("put %s: %v", p.Name, r)
		}
	}
	for _, p := range []string{"ret", "keep"} {
		rs, ok := apply(fsm.EncodeCheck(nil, now, 0, []fsm.Op{{Checks: []fsm.Check{{Key: "k", Policy: p, Cost: 30, Reserve: time.Second}}}})).([]fsm.Result)
		if !ok || rs[0].Err != nil || !rs[0].Allowed {
			t.Fatalf("reserve under %s: %+v", p, rs)
		}
	}
	apply(fsm.EncodeExpire(now+int64(time.Second), 100))
	reg := prometheus.NewRegistry()
	reg.MustRegister(costCollectors(f)...)
	for name, want := range map[string]float64{
		"limitd_reservations_returned_total":       1,
		"limitd_reservations_returned_units_total": 30,
		"limitd_reservations_expired_total":        1,
		"limitd_reservations_total":                2,
	} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != 1 {
			t.Fatalf("%s: %d series, %v", name, got, err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name {
				if got := mf.GetMetric()[0].GetCounter().GetValue(); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		}
	}
}
