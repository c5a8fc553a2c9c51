package fsm

import (
	"reflect"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// The costs fields survive the entry and results encodings, an unknown
// costs flag stops decoding (unknown means stop), and a reserve, settle,
// refund or overdraft inside a group is refused naming its field: fails if
// the codec dropped a field or accepted a flag it does not know.
func TestCostsEncodingRoundTrips(t *testing.T) {
	spec := algo.Spec{Algorithm: algo.FixedWindow, Limit: 10, Window: time.Minute}
	ops := []Op{
		{RequestID: "r", Checks: []Check{{Key: "k", Policy: "p", Cost: 5, Reserve: time.Minute, Overdraft: true}}},
		{Checks: []Check{{Key: "k", Spec: &spec, Cost: 3, Settle: "9.0"}}},
		{Checks: []Check{{Cost: 2, Refund: "job-1"}}},
		{Checks: []Check{{Key: "k", Policy: "p", Cost: 4, Credit: true}}},
	}
	enc := AppendOps(nil, ops)
	got, err := DecodeOps(enc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		w, g := ops[i].Checks[0], got[i].Checks[0]
		if w.Spec != nil {
			if g.Spec == nil || *g.Spec != *w.Spec {
				t.Fatalf("op %d: spec %v", i, g.Spec)
			}
			w.Spec, g.Spec = nil, nil
		}
		if !reflect.DeepEqual(w, g) || got[i].RequestID != ops[i].RequestID {
			t.Fatalf("op %d: %+v, want %+v", i, g, w)
		}
	}
	// An unknown costs flag: the byte after the key's limit.
	bad := AppendOps(nil, []Op{{Checks: []Check{{Key: "k", Policy: "p", Cost: 1, Overdraft: true}}}})
	for i := range bad {
		if bad[i] == costOverdraft && i > 0 && bad[i-1] == 'p' {
			bad[i] = 0x40
		}
	}
	if _, err := DecodeOps(bad); err == nil {
		t.Fatal("an unknown costs flag decoded")
	}
	rs := []Result{{Allowed: true, Decisions: []Decision{{Decision: algo.Decision{Allowed: true, Limit: 10}, Reservation: "9.0", ReservationHold: time.Minute, Credited: -3, Debt: 2, Rolled: true}}}}
	back, err := DecodeResults(AppendResults(nil, rs))
	if err != nil || !reflect.DeepEqual(back, rs) {
		t.Fatalf("results: %+v %v", back, err)
	}
}

func TestCostsOpsAreAloneInTheirRequest(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1m"})})
	for _, tc := range []struct {
		c     Check
		field string
	}{
		{Check{Key: "k", Policy: "p", Cost: 1, Reserve: time.Minute}, "reserve"},
		{Check{Key: "k", Policy: "p", Cost: 1, Overdraft: true}, "overdraft"},
		{Check{Key: "k", Policy: "p", Cost: 1, Settle: "x"}, "reservation"},
	} {
		op := Op{All: true, Checks: []Check{{Key: "a", Policy: "p", Cost: 1}, tc.c}}
		r := d.apply(EncodeCheck(nil, t0, 0, []Op{op})).([]Result)[0]
		if r.Err == nil || r.Err.Field != tc.field {
			t.Errorf("%+v in a group: %+v", tc.c, r.Err)
		}
	}
	r := d.apply(EncodeCheck(nil, t0, 0, []Op{single("a", "p", 0)})).([]Result)[0]
	if r.Decisions[0].Remaining != 10 {
		t.Fatal("a refused group spent something")
	}
}
