package fsm

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/persist"
)

// hsReplica is one group's state machine in the model test, reopened at
// will (a clean restart, or a new replica restored from a snapshot).
type hsReplica struct {
	rt   *rapid.T
	f    *FSM
	dir  string
	path string
	opts Options
	next uint64
	run  int
}

func openReplica(rt *rapid.T, dir string, opts Options) *hsReplica {
	r := &hsReplica{rt: rt, dir: dir, path: filepath.Join(dir, "fsm.db"), opts: opts, next: 1}
	f, err := Open(r.path, opts)
	if err != nil {
		rt.Fatal(err)
	}
	r.f = f
	return r
}

func (r *hsReplica) apply(cmd []byte) interface{} {
	rs, err := r.f.applyEntries(logOf(r.next, cmd))
	if err != nil {
		r.rt.Fatalf("apply: %v", err)
	}
	r.next++
	return rs[0]
}

func (r *hsReplica) ok(cmd []byte) {
	if e := r.apply(cmd); e != nil {
		r.rt.Fatalf("command %d: %v", cmd[0], e)
	}
}

func (r *hsReplica) check(now int64, op Op) Result {
	return r.apply(EncodeCheck(nil, now, 0, []Op{op})).([]Result)[0]
}

// reopen is a crash of the group's replica: a clean restart, or (snapshot)
// a new replica rebuilt from the latest snapshot, which is what an unclean
// stop amounts to (the dirty marker rebuilds from Raft).
func (r *hsReplica) reopen(snapshot bool) {
	var snap []byte
	if snapshot {
		s, err := r.f.Snapshot()
		if err != nil {
			r.rt.Fatal(err)
		}
		sink := &memSink{}
		if err := s.Persist(sink); err != nil {
			r.rt.Fatal(err)
		}
		s.Release()
		snap = sink.Bytes()
	}
	if err := r.f.Close(); err != nil {
		r.rt.Fatal(err)
	}
	if snapshot {
		r.run++
		r.path = filepath.Join(r.dir, fmt.Sprintf("fsm%d.db", r.run))
	}
	f, err := Open(r.path, r.opts)
	if err != nil {
		r.rt.Fatal(err)
	}
	if snapshot {
		if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			r.rt.Fatal(err)
		}
	}
	r.f, r.next = f, f.AppliedIndex()+1
}

func (r *hsReplica) state(s hashslot.Slot) uint8 {
	t := r.f.hashSlots.cur.Load()
	if t == nil {
		return hsOwned
	}
	return t.state[s]
}

// moveStep is where a slot's move stands: 0 none, 1 frozen in the old group,
// 2 imported into the new one (the map committed), then dropped (back to 0
// with the owner changed).
type hsMove struct {
	slot     hashslot.Slot
	from, to int
	id       uint64
	step     int
	blob     []byte
}

// TestHashSlotMoveModel drives checks on many keys in several slots —
// under a fixed window, a sliding window, a ban policy, an inline limit, a
// concurrency limit (acquires and releases), reservations and their
// settles, a plan with a key's assignment and override, with and without
// request ids and their retries — through two groups that move slots
// between them (freeze, export, import, drop, an abort by unfreeze, every
// step repeated at random as a resuming mover would), with restarts and
// snapshot restores of either group, against a reference replica that
// never moves anything. Invariants, after every step: each slot is owned
// by exactly one group (frozen counts as held, never as owned by two);
// every check routed to the slot's owner decides exactly as the reference
// does (same allowed, remaining, retry, replay, bans, slots, reservations);
// a check sent to the old group while the slot is frozen answers
// slot_moving, and after the drop wrong_group, counting nothing there or
// anywhere (the reference never sees it, and later answers still agree).
func TestHashSlotMoveModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		opts := Options{NoSync: true, CommitEvery: rapid.SampledFrom([]int{1, 8}).Draw(rt, "commitEvery")}
		ref := openReplica(rt, t.TempDir(), opts)
		groups := []*hsReplica{openReplica(rt, t.TempDir(), opts), openReplica(rt, t.TempDir(), opts)}
		defer func() {
			for _, g := range append(groups, ref) {
				_ = g.f.Close()
			}
		}()
		all := func(cmd []byte) {
			for _, g := range append([]*hsReplica{ref}, groups...) {
				g.ok(cmd)
			}
		}
		fw := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "10s"})
		sw := mustSpec(t, algo.Config{Algorithm: "sliding_window", Limit: 4, Window: "10s"})
		inline := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 3, Window: "6s"})
		conc := mustSpec(t, algo.Config{Algorithm: "concurrency", Limit: 2, Hold: "10s", MaxHold: "25s"})
		all(EncodePutPolicy(Policy{Name: "fw", Spec: fw}))
		all(EncodePutPolicy(Policy{Name: "sw", Spec: sw}))
		all(EncodePutPolicy(Policy{Name: "ban", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "10s"}), OnExceed: onExceed(20*time.Second, time.Minute)}))
		all(EncodePutPolicy(Policy{Name: "c", Spec: conc}))
		all(EncodePutPlan(planOf(t, "free", map[string]algo.Config{"daily": {Algorithm: "fixed_window", Limit: 4, Window: "60s"}})))
		all(EncodePutPlan(planOf(t, "pro", map[string]algo.Config{"daily": {Algorithm: "fixed_window", Limit: 6, Window: "60s"}})))
		all(EncodeSetDefaultPlan("free"))

		now := t0
		// Group 0 starts tracking its slots (every one); group 1 is a new
		// group that owns none yet.
		every := make([]uint16, hashslot.Count)
		for i := range every {
			every[i] = uint16(i)
		}
		groups[0].ok(EncodeHashSlotsOwn(now, every))
		groups[1].ok(EncodeHashSlotsOwn(now, nil))
		groups[0].ok(EncodeHashSlotsOwn(now, every)) // a retry changes nothing
		if e, _ := groups[1].apply(EncodeHashSlotsOwn(now, every[:1])).(*Error); e == nil || e.Code != CodeConflict {
			rt.Fatalf("a second, different table: %v", e)
		}

		keys := []string{"{u1}a", "{u1}b", "{u2}a", "{u2}b", "k1", "k2", "k3", "{u3}x"}
		owner := map[hashslot.Slot]int{} // the slot map: group 0 unless moved
		ownerOf := func(key string) int { return owner[hashslot.Of(key)] }
		var slots []hashslot.Slot
		for _, k := range keys {
			s := hashslot.Of(k)
			if _, ok := owner[s]; !ok {
				owner[s] = 0
				slots = append(slots, s)
			}
		}
		var withIDs []Op     // ops sent with a request id, for retries
		var slotIDs []Check  // acquired concurrency slots, for releases
		var reserved []Check // reservations made, for settles
		var move *hsMove
		moveID := uint64(0)

		same := func(what string, got, want Result) {
			if !reflect.DeepEqual(got, want) {
				rt.Fatalf("%s: the group answers %+v, the reference %+v", what, got, want)
			}
		}
		// route sends op to the group the map names, and to the
		// reference; while its slot is frozen the old group answers
		// slot_moving and nothing is decided anywhere (the service would
		// retry), so the reference does not see it either.
		route := func(what string, op Op) {
			key := op.Checks[0].Key
			g := groups[ownerOf(key)]
			got := g.check(now, op)
			if move != nil && move.step == 1 && hashslot.Of(key) == move.slot {
				if got.Err == nil || got.Err.Code != CodeSlotMoving {
					rt.Fatalf("%s on a frozen slot: %+v", what, got)
				}
				return
			}
			same(what+" "+key, got, ref.check(now, op))
			if op.RequestID != "" && got.Err == nil {
				withIDs = append(withIDs, op)
			}
		}
		checkOwnership := func() {
			for s := 0; s < hashslot.Count; s++ {
				owned, held := 0, 0
				for _, g := range groups {
					switch g.state(hashslot.Slot(s)) {
					case hsOwned:
						owned++
						held++
					case hsFrozen:
						held++
					}
				}
				if owned > 1 || held < 1 {
					rt.Fatalf("slot %d: owned by %d groups, held by %d", s, owned, held)
				}
			}
		}
		rid := 0
		newID := func() string { rid++; return fmt.Sprintf("r%d", rid) }

		for step := 0; step < 60; step++ {
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			switch rapid.IntRange(0, 13).Draw(rt, "op") {
			case 0, 1, 2: // a check under a policy or an inline limit
				c := Check{Key: key, Cost: int64(rapid.IntRange(0, 2).Draw(rt, "cost"))}
				switch rapid.IntRange(0, 3).Draw(rt, "limit") {
				case 0:
					c.Policy = "fw"
				case 1:
					c.Policy = "sw"
				case 2:
					c.Policy = "ban"
				default:
					c.Spec = &inline
				}
				op := Op{Checks: []Check{c}}
				if rapid.Bool().Draw(rt, "requestID") {
					op.RequestID = newID()
				}
				route("check", op)
			case 3: // an all-or-nothing pair of keys of one slot
				other := keys[(indexOf(keys, key)+1)%len(keys)]
				if hashslot.Of(other) != hashslot.Of(key) {
					other = key
				}
				route("all", Op{All: true, RequestID: newID(), Checks: []Check{{Key: key, Policy: "fw", Cost: 1}, {Key: other, Policy: "sw", Cost: 1}}})
			case 4: // a retry of an op sent with a request id
				if len(withIDs) > 0 {
					route("retry", rapid.SampledFrom(withIDs).Draw(rt, "retry"))
				}
			case 5: // a concurrency acquire, or a release
				if len(slotIDs) > 0 && rapid.Bool().Draw(rt, "release") {
					c := rapid.SampledFrom(slotIDs).Draw(rt, "slot")
					route("release", Op{Checks: []Check{c}})
					break
				}
				id := newID()
				route("acquire", Op{RequestID: id, Checks: []Check{{Key: key, Policy: "c", Cost: 1}}})
				slotIDs = append(slotIDs, Check{Key: key, Policy: "c", SlotOp: SlotRelease, Slot: id})
			case 6: // a reservation, or a settle
				if len(reserved) > 0 && rapid.Bool().Draw(rt, "settle") {
					c := rapid.SampledFrom(reserved).Draw(rt, "reservation")
					c.Cost = int64(rapid.IntRange(0, 2).Draw(rt, "actual"))
					route("settle", Op{Checks: []Check{c}})
					break
				}
				id := newID()
				route("reserve", Op{RequestID: id, Checks: []Check{{Key: key, Policy: "fw", Cost: 2, Reserve: 30 * time.Second}}})
				reserved = append(reserved, Check{Key: key, Policy: "fw", Settle: id})
			case 7: // a check under the key's plan
				route("plan", Op{Checks: []Check{{Key: key, ByPlan: true, Cost: 1}}})
			case 8: // a plan assignment or an override, in the key's group
				var cmd []byte
				if rapid.Bool().Draw(rt, "assign") {
					cmd = EncodeAssignPlans([]Assignment{{Key: key, Plan: rapid.SampledFrom([]string{"", "pro"}).Draw(rt, "plan")}})
				} else {
					cmd = EncodePutOverride(key, Override{Limits: []LimitOverride{{Name: "daily", Limit: 2}}, Expires: now + 40*sec})
				}
				if move != nil && move.step == 1 && hashslot.Of(key) == move.slot {
					break // the mover holds the slot: configuration of its keys waits
				}
				groups[ownerOf(key)].ok(cmd)
				ref.ok(cmd)
			case 9: // time passes; the replicas sweep, a group only at times (its time lags)
				now += rapid.SampledFrom([]int64{sec, 5 * sec, 10 * sec, 30 * sec}).Draw(rt, "advance")
				ref.apply(EncodeExpire(now, 1000))
				for i, g := range groups {
					if rapid.Bool().Draw(rt, fmt.Sprintf("sweep%d", i)) {
						g.apply(EncodeExpire(now, 1000))
					}
				}
			case 10, 11: // the mover's next step (or a repeat of its last)
				if move == nil {
					moveID++
					s := rapid.SampledFrom(slots).Draw(rt, "slot")
					move = &hsMove{slot: s, from: owner[s], to: 1 - owner[s], id: moveID}
				}
				old, nw := groups[move.from], groups[move.to]
				repeat := move.step > 0 && rapid.IntRange(0, 3).Draw(rt, "repeat") == 0
				switch {
				case move.step == 0 || repeat && move.step == 1:
					r := old.apply(EncodeHashSlotFreeze(now, uint16(move.slot), move.id))
					blob, ok := r.([]byte)
					if !ok {
						rt.Fatalf("freeze: %v", r)
					}
					if move.step == 1 && !bytes.Equal(blob, move.blob) {
						// A repeat exports the state at its own index: the
						// same unless the sweep removed something since.
						if _, err := decodeExport(blob); err != nil {
							rt.Fatal(err)
						}
					}
					move.blob, move.step = blob, 1
				case move.step == 1 && rapid.IntRange(0, 4).Draw(rt, "abort") == 0:
					old.ok(EncodeHashSlotUnfreeze(uint16(move.slot), move.id))
					old.ok(EncodeHashSlotUnfreeze(uint16(move.slot), move.id))
					move = nil
				case move.step == 1 || repeat && move.step == 2:
					x, err := decodeExport(move.blob)
					if err != nil {
						rt.Fatal(err)
					}
					// Stamped with a leader time behind the export's: the
					// import still brings the group's time up to it.
					nw.ok(EncodeHashSlotImport(t0, uint16(move.slot), move.id, 0, move.blob))
					if nw.f.LastTime() < x.lastNow {
						rt.Fatalf("the new group's time %d is behind the exported %d", nw.f.LastTime(), x.lastNow)
					}
					owner[move.slot] = move.to // the map commits
					move.step = 2
				default: // the drop
					old.ok(EncodeHashSlotDrop(uint16(move.slot), move.id))
					old.ok(EncodeHashSlotDrop(uint16(move.slot), move.id))
					if n := slotRecordsLeft(rt, old.f, move.slot); n != 0 {
						rt.Fatalf("the old group keeps %d records of dropped slot %d", n, move.slot)
					}
					// A check sent by a stale map: refused, counted nowhere.
					for _, k := range keys {
						if hashslot.Of(k) != move.slot {
							continue
						}
						r := old.check(now, Op{RequestID: "stale", Checks: []Check{{Key: k, Policy: "fw", Cost: 1}}})
						if r.Err == nil || r.Err.Code != CodeWrongGroup {
							rt.Fatalf("a check of %s in the old group after the drop: %+v", k, r)
						}
					}
					move = nil
				}
			case 12, 13: // a crash of either group, or of the reference
				g := rapid.SampledFrom(append([]*hsReplica{ref}, groups...)).Draw(rt, "crash")
				g.reopen(rapid.Bool().Draw(rt, "fromSnapshot"))
			}
			checkOwnership()
			// Every key reads the same in its group as in the reference.
			for _, k := range keys {
				if move != nil && move.step == 1 && hashslot.Of(k) == move.slot {
					continue
				}
				for _, c := range []Check{{Policy: "fw"}, {Policy: "sw"}, {Policy: "ban"}, {Policy: "c"}, {Spec: &inline}, {ByPlan: true}} {
					c.Key = k
					op := Op{Checks: []Check{c}}
					same(fmt.Sprintf("step %d peek %+v", step, c), groups[ownerOf(k)].check(now, op), ref.check(now, op))
				}
			}
		}
	})
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// slotRecordsLeft counts the records of slot s in f's file, once committed.
func slotRecordsLeft(rt *rapid.T, f *FSM, s hashslot.Slot) int {
	if _, err := f.Digest(); err != nil { // commits what the applies left open
		rt.Fatal(err)
	}
	n := 0
	err := f.store.View(func(tx *persist.Tx) error {
		return tx.ScanLiveStates(nil, nil, func(key []byte, _ persist.State) error {
			if u, ok := userKeyOf(key); ok && keySlot(u) == s || key[0] == requestSlotPrefix && keySlotOfIndex(key) == s {
				n++
			}
			return nil
		})
	})
	if err != nil {
		rt.Fatal(err)
	}
	return n
}

func keySlotOfIndex(k []byte) hashslot.Slot { return hashslot.Slot(k[1])<<8 | hashslot.Slot(k[2]) }
