package fsm

import (
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Inflight lists the slots a concurrency key holds (not the released one)
// with their hold's end, and the open reservations of a key (not the
// settled one) with their estimate and hold's end, as of the applied
// leader time: a hold that ended is not listed, though no sweep ran.
func TestInflightListsHeldSlotsAndOpenReservations(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "conc", Spec: mustSpec(t, algo.Config{Algorithm: "concurrency", Limit: 3, Hold: "10s"})})
	d.putPolicy(Policy{Name: "tok", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"})})
	for _, id := range []string{"a", "b"} {
		if r := d.check(t0, Op{RequestID: id, Checks: []Check{{Key: "k", Policy: "conc", Cost: 1}}})[0]; !r.Allowed {
			t.Fatalf("acquire %s: %+v", id, r)
		}
	}
	if r := d.check(t0+sec, Op{Checks: []Check{{Key: "k", Policy: "conc", SlotOp: SlotRelease, Slot: "a"}}})[0]; r.Err != nil {
		t.Fatalf("release: %v", r.Err)
	}
	var ids []string
	for i, cost := range []int64{5, 7} {
		r := d.check(t0+2*sec, Op{Checks: []Check{{Key: "k", Policy: "tok", Cost: cost, Reserve: time.Duration(i+1) * time.Minute}}})[0]
		if !r.Allowed || r.Decisions[0].Reservation == "" {
			t.Fatalf("reserve: %+v", r)
		}
		ids = append(ids, r.Decisions[0].Reservation)
	}
	if r := d.check(t0+3*sec, Op{Checks: []Check{{Key: "k", Policy: "tok", Cost: 2, Settle: ids[0]}}})[0]; r.Err != nil {
		t.Fatalf("settle: %v", r.Err)
	}
	read := func(q nodeapi.InflightQuery) nodeapi.Inflight {
		t.Helper()
		v, err := f.Inflight(q)
		if err != nil {
			t.Fatalf("Inflight(%+v): %v", q, err)
		}
		return v
	}
	v := read(nodeapi.InflightQuery{Key: "k", Policy: "conc"})
	if !v.Concurrency || v.SlotsHeld != 1 || len(v.Slots) != 1 || v.Slots[0] != (nodeapi.InflightSlot{Slot: "b", Acquired: t0, Expires: t0 + 10*sec}) ||
		len(v.Reservations) != 0 || v.Now != t0+3*sec {
		t.Fatalf("slots: %+v", v)
	}
	v = read(nodeapi.InflightQuery{Key: "k", Policy: "tok"})
	if v.Concurrency || len(v.Slots) != 0 || len(v.Reservations) != 1 || v.MoreReservations ||
		v.Reservations[0] != (nodeapi.InflightReservation{Reservation: ids[1], Cost: 7, Expires: t0 + 2*sec + 2*int64(time.Minute)}) {
		t.Fatalf("reservations: %+v (ids %v)", v, ids)
	}
	// The bound: one listed, the rest said to exist.
	r := d.check(t0+4*sec, Op{Checks: []Check{{Key: "k", Policy: "tok", Cost: 1, Reserve: time.Minute}}})[0]
	if v = read(nodeapi.InflightQuery{Key: "k", Policy: "tok", Max: 1}); len(v.Reservations) != 1 || !v.MoreReservations {
		t.Fatalf("bounded to 1: %+v", v)
	}
	// At t0+11s (another key's check moves the leader time) the slot's hold
	// has ended, and at t0+65s the first open reservation's.
	d.one(t0+11*sec, "tok", "other", 1)
	if v = read(nodeapi.InflightQuery{Key: "k", Policy: "conc"}); v.SlotsHeld != 0 || len(v.Slots) != 0 {
		t.Fatalf("a slot past its hold is listed: %+v", v)
	}
	d.one(t0+65*sec, "tok", "other", 1)
	if v = read(nodeapi.InflightQuery{Key: "k", Policy: "tok"}); len(v.Reservations) != 1 || v.Reservations[0].Reservation != ids[1] {
		t.Fatalf("after the 1 min reservation ended (%s): %+v", r.Decisions[0].Reservation, v)
	}
	// Unknown names are not_found naming their field.
	var fe *Error
	if _, err := f.Inflight(nodeapi.InflightQuery{Key: "k", Policy: "nope"}); !errors.As(err, &fe) || fe.Code != CodeNotFound || fe.Field != "policy" {
		t.Fatalf("unknown policy: %v", err)
	}
	if _, err := f.Inflight(nodeapi.InflightQuery{Key: "k"}); !errors.As(err, &fe) || fe.Code != CodeNotFound || fe.Field != "key" {
		t.Fatalf("a key without a plan: %v", err)
	}
}

// A damaged reservation record is refused, never served.
func TestInflightRefusesADamagedReservation(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "tok", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"})})
	r := d.check(t0, Op{Checks: []Check{{Key: "k", Policy: "tok", Cost: 5, Reserve: time.Minute}}})[0]
	key := reservationKey(nil, append(appendLimitPrefix(nil, 'p', "tok"), 'k'), []byte(r.Decisions[0].Reservation))
	if err := f.store.Update(func(tx *persist.Tx) error {
		prev, err := tx.State(key)
		if err != nil || !prev.Found {
			t.Fatalf("the reservation record: %+v %v", prev, err)
		}
		return tx.PutState(key, prev, []byte{9, 9}, prev.Expiry)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Inflight(nodeapi.InflightQuery{Key: "k", Policy: "tok"}); !errors.Is(err, persist.ErrCorrupt) {
		t.Fatalf("a damaged record read as %v", err)
	}
}

// A reservation whose hold has ended is not listed though the bounded
// expiry sweep has not reached its record yet: apply decides it ended at
// that time on every replica, and the read answers the same.
func TestInflightHidesEndedReservationsBeforeTheSweep(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "tok", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1h"})})
	ops := make([]Op, 60) // more than one entry's sweep removes (2 per op + 16)
	for i := range ops {
		ops[i] = Op{Checks: []Check{{Key: "k", Policy: "tok", Cost: 1, Reserve: time.Minute}}}
	}
	for _, r := range d.check(t0, ops...) {
		if !r.Allowed {
			t.Fatalf("reserve: %+v", r)
		}
	}
	d.one(t0+2*int64(time.Minute), "tok", "other", 1)
	left := 0
	if err := f.store.View(func(tx *persist.Tx) error {
		return tx.ScanStates([]byte{reservationKeyPrefix}, nil, func([]byte, persist.State) (bool, error) { left++; return true, nil })
	}); err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		t.Fatal("the sweep removed every record: this test would prove nothing")
	}
	if v, err := f.Inflight(nodeapi.InflightQuery{Key: "k", Policy: "tok"}); err != nil || len(v.Reservations) != 0 || v.MoreReservations {
		t.Fatalf("%d records left by the sweep; listed %+v %v", left, v.Reservations, err)
	}
}
