package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// TestReservationExpiryOptionIsTagR: "return" is written as tag 'r' with
// one byte and read back; "settle", the default, writes nothing (a policy
// encodes as before the option existed); any other byte stops the decoder,
// as an unknown mode would.
func TestReservationExpiryOptionIsTagR(t *testing.T) {
	spec := algo.Spec{Algorithm: algo.FixedWindow, Limit: 5, Window: 1e9}
	o := nodeapi.LimitOptions{ReservationExpiry: nodeapi.ExpiryReturn}
	if got, want := appendLimitOptions(nil, &o), []byte{1, 'r', 1, 1}; string(got) != string(want) {
		t.Fatalf("return wrote %x, want %x", got, want)
	}
	settle := nodeapi.LimitOptions{ReservationExpiry: nodeapi.ExpirySettle}
	if got := appendLimitOptions(nil, &settle); len(got) != 0 {
		t.Fatalf("settle wrote %x", got)
	}
	p := Policy{Name: "p", Spec: spec, Options: nodeapi.LimitOptions{History: 10 * time.Second, ReservationExpiry: nodeapi.ExpiryReturn}}
	d := decoder{b: appendPolicy(nil, p)}
	if got, inv := decodePolicy(&d); d.err != nil || inv != nil || got.Options != p.Options {
		t.Fatalf("policy with history and return: %+v %v %v", got.Options, d.err, inv)
	}
	for _, body := range [][]byte{{0}, {2}, {1, 1}, {}} {
		block := append([]byte{1, 'r', byte(len(body))}, body...)
		d := decoder{b: block}
		if _, _ = decodeLimitOptions(&d); d.err == nil || !strings.Contains(d.err.Error(), "reservation expiry") {
			t.Errorf("reservation expiry %x decoded: %v", body, d.err)
		}
	}
	// After 'n', in increasing order: 'r' before 'n' is out of order.
	d = decoder{b: []byte{2, 'r', 1, 1, 'n', 1, 0}}
	if _, _ = decodeLimitOptions(&d); d.err == nil {
		t.Fatal("'r' before 'n' decoded")
	}
}

// TestReservationReturnedAtHoldEnd: under reservation_expiry "return" the
// expiry sweep gives an open reservation's estimate back once, at the
// entry's time; a sweep again returns nothing more, a settled reservation is
// never returned, one whose window rolled before its hold ended gives back
// nothing (never into a later window), a settle after the hold's end is
// refused and says the estimate was returned, and a policy of the default
// "settle" keeps its expired reservations charged.
func TestReservationReturnedAtHoldEnd(t *testing.T) {
	d := newDriver(t, openFSM(t, "", Options{NoSync: true}))
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 50, Window: "1m"})
	d.putPolicy(Policy{Name: "ret", Spec: spec, Options: nodeapi.LimitOptions{ReservationExpiry: nodeapi.ExpiryReturn}})
	d.putPolicy(Policy{Name: "keep", Spec: spec})
	reserve := func(now int64, policy string, est int64, hold time.Duration) string {
		t.Helper()
		r := d.check(now, Op{Checks: []Check{{Key: "k", Policy: policy, Cost: est, Reserve: hold}}})[0]
		if r.Err != nil || !r.Allowed || r.Decisions[0].Reservation == "" {
			t.Fatalf("reserve %d under %s: %+v %v", est, policy, r, r.Err)
		}
		return r.Decisions[0].Reservation
	}
	open := reserve(t0, "ret", 10, 10*time.Second)
	settled := reserve(t0, "ret", 7, 10*time.Second)
	reserve(t0, "keep", 10, 10*time.Second)
	if r := d.check(t0+sec, Op{Checks: []Check{{Key: "k", Policy: "ret", Settle: settled, Cost: 2}}})[0]; r.Err != nil || r.Decisions[0].Credited != 5 {
		t.Fatalf("settle: %+v %v", r, r.Err)
	}
	if got := d.remaining(t0+sec, "ret", "k"); got != 50-10-2 {
		t.Fatalf("before the hold's end: remaining %d", got)
	}
	d.apply(EncodeExpire(t0+10*sec, 100))
	if got := d.remaining(t0+10*sec, "ret", "k"); got != 50-2 {
		t.Fatalf("after the hold's end: remaining %d, want the open estimate back and the settled cost kept", got)
	}
	if got := d.remaining(t0+10*sec, "keep", "k"); got != 40 {
		t.Fatalf("settle policy: remaining %d, want its estimate kept", got)
	}
	d.apply(EncodeExpire(t0+11*sec, 100))
	if got := d.remaining(t0+11*sec, "ret", "k"); got != 48 {
		t.Fatalf("a second sweep: remaining %d", got)
	}
	c := d.f.CostCounts()
	if c.Returned != 1 || c.ReturnedUnits != 10 || c.Expired != 1 {
		t.Fatalf("counts %+v: want 1 returned (10 units) and 1 expired", c)
	}
	r := d.check(t0+12*sec, Op{Checks: []Check{{Key: "k", Policy: "ret", Settle: open, Cost: 1}}})[0]
	if r.Err == nil || r.Err.Field != "reservation" {
		t.Fatalf("settle after the return: %+v", r)
	}

	// A hold that ends in the next window gives nothing back to it.
	late := reserve(t0+50*sec, "ret", 20, 30*time.Second)
	d.apply(EncodeExpire(t0+80*sec, 100))
	if got := d.remaining(t0+80*sec, "ret", "k"); got != 50 {
		t.Fatalf("the next window: remaining %d, want it untouched", got)
	}
	if c := d.f.CostCounts(); c.Returned != 2 || c.ReturnedUnits != 10 {
		t.Fatalf("counts %+v: the rolled return counted with 0 units", c)
	}
	r = d.check(t0+81*sec, Op{Checks: []Check{{Key: "k", Policy: "ret", Settle: late, Cost: 1}}})[0]
	if r.Err == nil || r.Err.Code != CodeNotFound && !strings.Contains(r.Err.Message, "returned") {
		t.Fatalf("settle of the swept one: %+v", r.Err)
	}
}

// TestReservationReturnUsesTheReservesPolicy: the choice is kept in the
// record at the reserve: a policy changed to "settle" while a hold runs
// still returns it, and one changed to "return" does not return holds made
// before.
func TestReservationReturnUsesTheReservesPolicy(t *testing.T) {
	d := newDriver(t, openFSM(t, "", Options{NoSync: true}))
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 50, Window: "1m"})
	ret := nodeapi.LimitOptions{ReservationExpiry: nodeapi.ExpiryReturn}
	d.putPolicy(Policy{Name: "a", Spec: spec, Options: ret})
	d.putPolicy(Policy{Name: "b", Spec: spec})
	for _, p := range []string{"a", "b"} {
		if r := d.check(t0, Op{Checks: []Check{{Key: "k", Policy: p, Cost: 10, Reserve: 5 * time.Second}}})[0]; r.Err != nil || !r.Allowed {
			t.Fatalf("reserve under %s: %+v", p, r)
		}
	}
	d.putPolicy(Policy{Name: "a", Spec: spec})
	d.putPolicy(Policy{Name: "b", Spec: spec, Options: ret})
	d.apply(EncodeExpire(t0+5*sec, 100))
	if a, b := d.remaining(t0+5*sec, "a", "k"), d.remaining(t0+5*sec, "b", "k"); a != 50 || b != 40 {
		t.Fatalf("remaining a %d (want 50: returned), b %d (want 40: kept)", a, b)
	}
}
