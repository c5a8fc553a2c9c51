package fsm

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"pgregory.net/rapid"
)

// TestInflightModel drives acquires, releases, reserves, settles and time
// advances at random on one key against a model of what it holds: after
// every entry, Inflight lists exactly the model's held slots (with their
// acquisition and hold's end, in acquisition order) and its open
// reservations (estimate and hold's end), as of the applied leader time,
// whether or not the expiry sweep has removed the ended ones.
func TestInflightModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := openFSM(t, "", Options{NoSync: true})
		d := newDriver(t, f)
		const limit = 3
		hold := 10 * sec
		d.putPolicy(Policy{Name: "c", Spec: mustSpec(t, algo.Config{Algorithm: "concurrency", Limit: limit, Hold: "10s"})})
		d.putPolicy(Policy{Name: "t", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1_000_000, Window: "1h"})})
		type slotM struct{ acquired, end int64 }
		type resM struct{ cost, end int64 }
		held := map[string]slotM{}
		open := map[string]resM{}
		var slotIDs, resIDs []string
		now := t0
		n := 0
		check := func(c Check, requestID string) Result {
			return d.check(now, Op{RequestID: requestID, Checks: []Check{c}})[0]
		}
		check(Check{Key: "other", Policy: "t", Cost: 1}, "") // the leader time starts at t0
		rt.Repeat(map[string]func(*rapid.T){
			"advance": func(rt *rapid.T) {
				now += rapid.Int64Range(0, 8*sec).Draw(rt, "dt")
				check(Check{Key: "other", Policy: "t", Cost: 1}, "") // an entry at the new time
			},
			"acquire": func(rt *rapid.T) {
				n++
				id := fmt.Sprintf("s%d", n)
				for k, s := range held {
					if s.end <= now {
						delete(held, k)
					}
				}
				r := check(Check{Key: "k", Policy: "c", Cost: 1}, id)
				if r.Allowed != (len(held) < limit) {
					rt.Fatalf("acquire %s with %d held: %+v", id, len(held), r)
				}
				if r.Allowed {
					held[id] = slotM{now, now + hold}
					slotIDs = append(slotIDs, id)
				}
			},
			"release": func(rt *rapid.T) {
				if len(slotIDs) == 0 {
					rt.Skip("no slot")
				}
				id := rapid.SampledFrom(slotIDs).Draw(rt, "slot")
				if r := check(Check{Key: "k", Policy: "c", SlotOp: SlotRelease, Slot: id}, ""); r.Err != nil {
					rt.Fatalf("release %s: %v", id, r.Err)
				}
				delete(held, id)
			},
			"reserve": func(rt *rapid.T) {
				n++
				id := fmt.Sprintf("r%d", n)
				cost := rapid.Int64Range(1, 5).Draw(rt, "cost")
				h := time.Duration(rapid.Int64Range(1, 20).Draw(rt, "hold")) * time.Second
				r := check(Check{Key: "k", Policy: "t", Cost: cost, Reserve: h}, id)
				if !r.Allowed || r.Decisions[0].Reservation != id {
					rt.Fatalf("reserve %s: %+v", id, r)
				}
				open[id] = resM{cost, now + int64(h)}
				resIDs = append(resIDs, id)
			},
			"settle": func(rt *rapid.T) {
				if len(resIDs) == 0 {
					rt.Skip("no reservation")
				}
				id := rapid.SampledFrom(resIDs).Draw(rt, "reservation")
				_ = check(Check{Key: "k", Policy: "t", Cost: rapid.Int64Range(1, 10).Draw(rt, "actual"), Settle: id}, "")
				delete(open, id) // settled, or refused past its hold: open no more either way
			},
			"": func(rt *rapid.T) {
				v, err := f.Inflight(nodeapi.InflightQuery{Key: "k", Policy: "c"})
				if err != nil {
					rt.Fatal(err)
				}
				var want []nodeapi.InflightSlot
				for _, id := range slotIDs {
					if s, ok := held[id]; ok && s.end > now {
						want = append(want, nodeapi.InflightSlot{Slot: id, Acquired: s.acquired, Expires: s.end})
					}
				}
				if !slices.Equal(v.Slots, want) || v.SlotsHeld != len(want) || v.Now != now {
					rt.Fatalf("at %d s: slots %+v (%d held), want %+v", (now-t0)/sec, v.Slots, v.SlotsHeld, want)
				}
				v, err = f.Inflight(nodeapi.InflightQuery{Key: "k", Policy: "t"})
				if err != nil {
					rt.Fatal(err)
				}
				var wantRes []nodeapi.InflightReservation
				for id, r := range open {
					if r.end > now {
						wantRes = append(wantRes, nodeapi.InflightReservation{Reservation: id, Cost: r.cost, Expires: r.end})
					}
				}
				sort.Slice(wantRes, func(i, j int) bool { return wantRes[i].Reservation < wantRes[j].Reservation })
				if !slices.Equal(v.Reservations, wantRes) || v.MoreReservations {
					rt.Fatalf("at %d s: reservations %+v, want %+v", (now-t0)/sec, v.Reservations, wantRes)
				}
			},
		})
	})
}
