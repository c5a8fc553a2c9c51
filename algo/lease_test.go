package algo

import (
	"testing"
	"time"
)

// TestGrantLeaseCalendarWindow: a lease on a calendar day is valid until the
// local midnight at the latest, and its units go back only that same day.
func TestGrantLeaseCalendarWindow(t *testing.T) {
	s, err := Config{Algorithm: "fixed_window", Limit: 1000, Calendar: "day", Timezone: "Europe/Paris"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	now := time.Date(2026, 3, 28, 23, 59, 59, 0, paris).UnixNano() // one second before midnight
	l := Lease{Share: 100_000, MaxTTL: time.Minute}
	g, state, err := GrantLease(nil, &s, l, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if g.Units != 100 || g.Valid != time.Second || g.Window != time.Date(2026, 3, 28, 0, 0, 0, 0, paris).UnixNano() || g.Remaining != 900 {
		t.Fatalf("grant %+v, want 100 units for 1s in the day of the 28th", g)
	}
	// The next grant takes a share of what remains.
	g2, state2, err := GrantLease(nil, &s, l, state, now)
	if err != nil || g2.Units != 90 || g2.Remaining != 810 {
		t.Fatalf("second grant %+v, %v", g2, err)
	}
	credited, back, changed, err := ReturnLease(nil, &s, state2, now, g2.Window, 90)
	if err != nil || credited != 90 || !changed || string(back) != string(state) {
		t.Fatalf("same-day return: credited %d changed %v err %v; state %x, want %x", credited, changed, err, back, state)
	}
	// After midnight (a 23-hour day follows: DST), nothing goes back.
	if credited, _, changed, _ := ReturnLease(nil, &s, state2, now+2*int64(time.Second), g2.Window, 90); credited != 0 || changed {
		t.Fatalf("next-day return credited %d", credited)
	}
	// A return never credits more than the state counts.
	if credited, next, _, _ := ReturnLease(nil, &s, state, now, g.Window, 5000); credited != 100 || next != nil {
		t.Fatalf("over-return credited %d (state %x)", credited, next)
	}
}

// TestGrantLeaseShares: n = max(1, floor(share × remaining)), nothing when
// nothing remains (and then when to retry).
func TestGrantLeaseShares(t *testing.T) {
	s, _ := Config{Algorithm: "fixed_window", Limit: 3, Window: "10s"}.Spec()
	l := Lease{Share: 1, MaxTTL: MaxLeaseTTL}
	var state []byte
	for i, want := range []int64{1, 1, 1, 0} {
		g, next, err := GrantLease(nil, &s, l, state, 4*int64(time.Second))
		if err != nil || g.Units != want {
			t.Fatalf("grant %d: %+v %v, want %d units", i, g, err, want)
		}
		if want > 0 && g.Valid != 6*time.Second {
			t.Fatalf("grant %d valid %v, want the 6s to the window's end", i, g.Valid)
		}
		if want == 0 && (g.RetryAfter != 6*time.Second || next != nil) {
			t.Fatalf("empty grant %+v next %x", g, next)
		}
		if next != nil {
			state = next
		}
	}
	if _, _, err := GrantLease(nil, &s, Lease{}, nil, 0); err == nil {
		t.Fatal("a grant without a lease option")
	}
	sl, _ := Config{Algorithm: "sliding_log", Limit: 3, Window: "10s"}.Spec()
	if _, _, err := GrantLease(nil, &sl, Lease{Share: 1, MaxTTL: time.Second}, nil, 0); err == nil {
		t.Fatal("a grant on a sliding log")
	}
}

// TestHoldLeased: after a reset, units outstanding in the current window stay
// counted; those of another window do not.
func TestHoldLeased(t *testing.T) {
	s, _ := Config{Algorithm: "fixed_window", Limit: 10, Window: "10s"}.Spec()
	now := 14 * int64(time.Second)
	st, ra, err := HoldLeased(nil, &s, now, []LeasedUnits{{Window: 10 * int64(time.Second), Units: 4}, {Window: 0, Units: 5}})
	if err != nil || ra != 6*time.Second {
		t.Fatal(err, ra)
	}
	d, _, _ := Decide(nil, &s, st, now, 0)
	if d.Remaining != 6 {
		t.Fatalf("remaining %d after holding 4, want 6", d.Remaining)
	}
	if st, _, _ := HoldLeased(nil, &s, now, []LeasedUnits{{Window: 0, Units: 5}}); st != nil {
		t.Fatalf("held units of an old window: %x", st)
	}
}

func TestLeaseConfig(t *testing.T) {
	half := 0.5
	yes, no := true, false
	for _, c := range []struct {
		in    LeaseConfig
		want  Lease
		field string
	}{
		{LeaseConfig{}, Lease{Share: DefaultLeaseShare, MaxTTL: DefaultLeaseTTL}, ""},
		{LeaseConfig{Share: &half, MaxTTL: "1m"}, Lease{Share: 500_000, MaxTTL: time.Minute}, ""},
		{LeaseConfig{Strict: &yes}, Lease{Share: DefaultLeaseShare, MaxTTL: DefaultLeaseTTL}, ""},
		{LeaseConfig{Strict: &no}, Lease{Share: DefaultLeaseShare, MaxTTL: DefaultLeaseTTL, NoStrict: true}, ""},
		{LeaseConfig{MaxTTL: "11m"}, Lease{}, "lease.max_ttl"},
		{LeaseConfig{MaxTTL: "-1s"}, Lease{}, "lease.max_ttl"},
	} {
		got, err := c.in.Lease()
		if c.field != "" {
			if fe, ok := err.(*FieldError); !ok || fe.Field != c.field {
				t.Errorf("%+v: %v, want an error on %s", c.in, err, c.field)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if back, err := got.Config().Lease(); err != nil || back != got {
			t.Errorf("%+v does not round-trip: %+v %v", got, back, err)
		}
	}
}
