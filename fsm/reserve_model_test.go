package fsm

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"pgregory.net/rapid"
)

// costModel is the specification of one fixed_window key's costs: the count
// of the current window, the reservations and what each request id spent.
type costModel struct {
	window, count int64
	res           map[string]*modelReservation
	spent         map[string]*modelSpent
	reserveIDs    map[string]int64 // a reserve's request id: its retention's end
	// settled, expired: reservations settled, and ended open (settled at
	// their estimate) since the last restart (the counters are per process).
	settled, expired int
	// returns: the policy's reservation_expiry is "return"; returned,
	// returnedUnits: reservations ended open and given back since the last
	// restart, and the units credited.
	returns                 bool
	returned, returnedUnits int
}

type modelReservation struct {
	estimate, window, end int64
	settled               int64 // -1: open
	credited              int64
	expiredCounted        bool
}

type modelSpent struct {
	cost, window, refunded, expiry int64
}

const costWindow = int64(time.Minute)

func (m *costModel) at(now int64) {
	if w := now - now%costWindow; w != m.window {
		m.window, m.count = w, 0
	}
}

// TestReserveSettleModel drives reserves, settles (less, equal, more than the
// estimate, repeated, of unknown or ended reservations), overdrafts, checks
// with request ids and their refunds, time advances across windows and holds,
// expiry sweeps, restarts and snapshot restores at random against costModel:
// after every entry the key's count is the model's (so the units spent equal
// the estimates of reservations plus every settle's difference, exactly
// once), each settle is answered as the model says (credited, charged,
// replayed, conflict, expired, unknown), a refund gives back at most what its
// request spent and nothing after its window rolled, and reservations that
// ended open are counted as settled at their estimate exactly once — or,
// under reservation_expiry "return" (drawn), are given back exactly once,
// into the window they were spent in, and never after a settle.
func TestReserveSettleModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "fsm.db")
		opts := Options{NoSync: true, CommitEvery: rapid.SampledFrom([]int{1, 8}).Draw(rt, "commitEvery")}
		f, err := Open(path, opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		const limit = 50
		spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: limit, Window: "1m"})
		next := uint64(1)
		apply := func(cmd []byte) interface{} {
			rs, err := f.applyEntries(logOf(next, cmd))
			if err != nil {
				rt.Fatal(err)
			}
			next++
			return rs[0]
		}
		one := func(now int64, op Op) Result {
			return apply(EncodeCheck(nil, now, 0, []Op{op})).([]Result)[0]
		}
		m := &costModel{res: map[string]*modelReservation{}, spent: map[string]*modelSpent{}, reserveIDs: map[string]int64{}, returns: rapid.Bool().Draw(rt, "returnAtExpiry")}
		pol := Policy{Name: "f", Spec: spec}
		if m.returns {
			pol.Options.ReservationExpiry = nodeapi.ExpiryReturn
		}
		if r := apply(EncodePutPolicy(pol)); r != nil {
			rt.Fatal(r)
		}
		const key = "k"
		now := t0
		m.at(now)
		var ids, reqs []string
		pick := func(from []string, label string) string {
			if len(from) == 0 || rapid.IntRange(0, 9).Draw(rt, label+"Unknown") == 0 {
				return "never-made"
			}
			return rapid.SampledFrom(from).Draw(rt, label)
		}
		run := 0
		for step := 0; step < 60; step++ {
			m.at(now)
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1: // a reserve
				est := rapid.Int64Range(1, 30).Draw(rt, "estimate")
				hold := rapid.SampledFrom([]time.Duration{10 * time.Second, 30 * time.Second}).Draw(rt, "hold")
				op := Op{Checks: []Check{{Key: key, Policy: "f", Cost: est, Reserve: hold}}}
				if rapid.Bool().Draw(rt, "requestID") {
					op.RequestID = fmt.Sprintf("rsv%d", step)
				}
				r := one(now, op)
				if r.Err != nil {
					rt.Fatalf("reserve: %v", r.Err)
				}
				if want := m.count+est <= limit; r.Allowed != want {
					rt.Fatalf("reserve of %d with %d spent: allowed %v", est, m.count, r.Allowed)
				}
				d := r.Decisions[0]
				if !r.Allowed {
					if d.Reservation != "" {
						rt.Fatalf("a refused reserve holds %q", d.Reservation)
					}
					break
				}
				if d.Reservation == "" || d.ReservationHold != hold || op.RequestID != "" && d.Reservation != op.RequestID {
					rt.Fatalf("reserve answered %+v", d)
				}
				if m.res[d.Reservation] != nil {
					rt.Fatalf("reservation %q handed out twice", d.Reservation)
				}
				m.count += est
				m.res[d.Reservation] = &modelReservation{estimate: est, window: m.window, end: now + int64(hold), settled: -1}
				ids = append(ids, d.Reservation)
				if op.RequestID != "" { // refunded never: its settle or return gives back
					m.reserveIDs[op.RequestID] = now + int64(DefaultRetention)
					reqs = append(reqs, op.RequestID)
				}
			case 2, 3: // a settle, sometimes late: past holds the sweep has not yet reached
				if rapid.IntRange(0, 3).Draw(rt, "late") == 0 {
					now += rapid.SampledFrom([]int64{10 * sec, 30 * sec}).Draw(rt, "lateBy")
					m.at(now)
				}
				id := pick(ids, "reservation")
				actual := rapid.Int64Range(0, 40).Draw(rt, "actual")
				r := one(now, Op{Checks: []Check{{Key: key, Policy: "f", Settle: id, Cost: actual}}})
				mr := m.res[id]
				switch {
				case mr == nil:
					if r.Err == nil || r.Err.Code != CodeNotFound || r.Err.Field != "reservation" {
						rt.Fatalf("settle of unknown %s: %+v", id, r)
					}
				case mr.settled >= 0 && mr.settled == actual && mr.end > now:
					if r.Err != nil || !r.Replayed || r.Decisions[0].Credited != mr.credited {
						rt.Fatalf("repeated settle of %s: %+v %v", id, r, r.Err)
					}
				case mr.settled >= 0 && mr.end > now:
					if r.Err == nil || r.Err.Code != CodeConflict || r.Err.Field != "cost" {
						rt.Fatalf("settle of %s settled at %d, again at %d: %+v", id, mr.settled, actual, r)
					}
				case mr.end <= now:
					// Ended: refused whether or not the sweep removed it.
					if r.Err == nil || r.Err.Field != "reservation" {
						rt.Fatalf("settle of ended %s: %+v", id, r)
					}
					if !mr.expiredCounted && mr.settled < 0 && r.Err.Code != CodeInvalidArgument {
						rt.Fatalf("settle of ended %s, not yet swept: %v", id, r.Err)
					}
				default:
					if r.Err != nil || !r.Allowed {
						rt.Fatalf("settle of open %s: %+v %v", id, r, r.Err)
					}
					delta := actual - mr.estimate
					var credited int64
					if delta > 0 {
						credited = -delta
					} else if delta < 0 && mr.window == m.window {
						credited = min(-delta, m.count)
					}
					if got := r.Decisions[0].Credited; got != credited {
						rt.Fatalf("settle of %s (estimate %d, actual %d): credited %d, want %d", id, mr.estimate, actual, got, credited)
					}
					if rolled := delta < 0 && credited < -delta; r.Decisions[0].Rolled != rolled {
						rt.Fatalf("settle of %s: rolled %v", id, r.Decisions[0].Rolled)
					}
					m.count -= credited
					mr.settled, mr.credited = actual, credited
					m.settled++
					if debt := max(m.count-limit, 0); r.Decisions[0].Debt != debt {
						rt.Fatalf("settle of %s: debt %d, want %d", id, r.Decisions[0].Debt, debt)
					}
				}
			case 4: // an overdraft: always applies
				c := rapid.Int64Range(1, 30).Draw(rt, "overdraft")
				r := one(now, Op{Checks: []Check{{Key: key, Policy: "f", Cost: c, Overdraft: true}}})
				if r.Err != nil || !r.Allowed {
					rt.Fatalf("overdraft: %+v %v", r, r.Err)
				}
				m.count += c
				if debt := max(m.count-limit, 0); r.Decisions[0].Debt != debt {
					rt.Fatalf("overdraft of %d: debt %d, want %d", c, r.Decisions[0].Debt, debt)
				}
			case 5: // a check with a request id
				c := rapid.Int64Range(1, 20).Draw(rt, "cost")
				id := fmt.Sprintf("q%d", step)
				r := one(now, Op{RequestID: id, Checks: []Check{{Key: key, Policy: "f", Cost: c}}})
				if want := m.count+c <= limit; r.Err != nil || r.Allowed != want {
					rt.Fatalf("check: %+v %v", r, r.Err)
				}
				if r.Allowed {
					m.count += c
					m.spent[id] = &modelSpent{cost: c, window: m.window, expiry: now + int64(DefaultRetention)}
					reqs = append(reqs, id)
				}
			case 6: // a refund
				id := pick(reqs, "request")
				n := rapid.Int64Range(0, 25).Draw(rt, "refund")
				r := one(now, Op{Checks: []Check{{Refund: id, Cost: n}}})
				sp := m.spent[id]
				switch {
				case n == 0:
					if r.Err == nil || r.Err.Field != "cost" {
						rt.Fatalf("refund of 0: %+v", r)
					}
				case sp == nil && m.reserveIDs[id] > now:
					// A reserve's estimate is given back once, by its settle
					// or its return: a refund of its request id gives nothing.
					if r.Err == nil || r.Err.Code != CodeInvalidArgument || r.Err.Field != "request_id" {
						rt.Fatalf("refund of reserve %s: %+v", id, r)
					}
				case sp == nil || sp.expiry <= now:
					if r.Err == nil || r.Err.Code != CodeNotFound || r.Err.Field != "request_id" {
						rt.Fatalf("refund of unknown %s: %+v", id, r)
					}
				case n > sp.cost-sp.refunded:
					if r.Err == nil || r.Err.Field != "cost" {
						rt.Fatalf("refund of %d of %s (spent %d, refunded %d): %+v", n, id, sp.cost, sp.refunded, r)
					}
				default:
					var credited int64
					if sp.window == m.window {
						credited = min(n, m.count)
					}
					if r.Err != nil || r.Decisions[0].Credited != credited || r.Decisions[0].Rolled != (credited < n) {
						rt.Fatalf("refund of %d of %s: %+v %v, want credited %d", n, id, r, r.Err, credited)
					}
					m.count -= credited
					sp.refunded += credited
				}
			case 7: // time passes, and the sweep runs
				now += rapid.SampledFrom([]int64{sec, 5 * sec, 10 * sec, 40 * sec}).Draw(rt, "advance")
			case 8: // a restart
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				if f, err = Open(path, opts); err != nil {
					rt.Fatal(err)
				}
				m.settled, m.expired, m.returned, m.returnedUnits = 0, 0, 0, 0
				for _, mr := range m.res {
					mr.expiredCounted = mr.expiredCounted || mr.end <= now // swept before, or never counted here
				}
			case 9: // a snapshot restored into a new replica, which goes on
				snap, err := f.Snapshot()
				if err != nil {
					rt.Fatal(err)
				}
				sink := &memSink{}
				if err := snap.Persist(sink); err != nil {
					rt.Fatal(err)
				}
				snap.Release()
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				run++
				path = filepath.Join(dir, fmt.Sprintf("fsm%d.db", run))
				if f, err = Open(path, opts); err != nil {
					rt.Fatal(err)
				}
				if err := f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
					rt.Fatal(err)
				}
				next = f.AppliedIndex() + 1
				m.settled, m.expired, m.returned, m.returnedUnits = 0, 0, 0, 0
				for _, mr := range m.res {
					mr.expiredCounted = mr.expiredCounted || mr.end <= now
				}
			}
			m.at(now)
			apply(EncodeExpire(now, 1000))
			for _, mr := range m.res {
				if mr.end <= now && mr.settled < 0 && !mr.expiredCounted {
					mr.expiredCounted = true
					if !m.returns {
						m.expired++
						continue
					}
					// Given back once, only into the window it was spent in.
					var credited int64
					if mr.window == m.window {
						credited = min(mr.estimate, m.count)
					}
					m.count -= credited
					m.returned++
					m.returnedUnits += int(credited)
				}
			}
			r := one(now, single(key, "f", 0))
			if want := max(limit-m.count, 0); r.Decisions[0].Remaining != want {
				rt.Fatalf("step %d: remaining %d, the model's count %d", step, r.Decisions[0].Remaining, m.count)
			}
			c := f.CostCounts()
			if c.Settled != uint64(m.settled) || c.Expired != uint64(m.expired) {
				rt.Fatalf("step %d: counted %d settled, %d expired; the model %d, %d", step, c.Settled, c.Expired, m.settled, m.expired)
			}
			if c.Returned != uint64(m.returned) || c.ReturnedUnits != uint64(m.returnedUnits) {
				rt.Fatalf("step %d: counted %d returned (%d units); the model %d (%d)", step, c.Returned, c.ReturnedUnits, m.returned, m.returnedUnits)
			}
		}
	})
}
