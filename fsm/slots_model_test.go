package fsm

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"pgregory.net/rapid"
)

// slotModel is the specification of one key's concurrency slots: a slot is
// held from its acquisition until it is released or its end passes; once
// freed it is remembered until freed + max_hold.
type slotModel struct {
	end   map[string]int64 // held: id → the hold's end
	acq   map[string]int64 // held: id → acquisition
	freed map[string]int64 // id → until when a release answers "already freed"
	// freedBy counts how each slot ever held was freed (release or expiry):
	// each must be exactly once.
	freedBy map[string]int
}

func newSlotModel() *slotModel {
	return &slotModel{end: map[string]int64{}, acq: map[string]int64{}, freed: map[string]int64{}, freedBy: map[string]int{}}
}

// advance frees, by expiry, every slot whose hold has ended by now.
func (m *slotModel) advance(now int64, maxHold time.Duration) {
	for id, end := range m.end {
		if end <= now {
			delete(m.end, id)
			delete(m.acq, id)
			m.freed[id] = end + int64(maxHold)
			m.freedBy[id]++
		}
	}
	for id, until := range m.freed {
		if until <= now {
			delete(m.freed, id)
		}
	}
}

// TestSlotsModel drives acquires (with and without request ids), releases,
// renewals, time advances, expiry sweeps, restarts and snapshot restores at
// random against slotModel: after every entry no key holds more than its
// limit, the state machine's held slots are exactly the model's, each acquire
// is allowed exactly when a slot is free, and every slot is freed exactly
// once, by a release or by its hold ending.
func TestSlotsModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "fsm.db")
		opts := Options{NoSync: true, CommitEvery: rapid.SampledFrom([]int{1, 8}).Draw(rt, "commitEvery")}
		f, err := Open(path, opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		const limit = 2
		spec := mustSpec(t, algo.Config{Algorithm: "concurrency", Limit: limit, Hold: "10s", MaxHold: "25s"})
		next := uint64(1)
		apply := func(cmd []byte) interface{} {
			rs, err := f.applyEntries(logOf(next, cmd))
			if err != nil {
				rt.Fatal(err)
			}
			next++
			return rs[0]
		}
		if r := apply(EncodePutPolicy(Policy{Name: "c", Spec: spec})); r != nil {
			rt.Fatal(r)
		}
		keys := []string{"k1", "k2"}
		models := map[string]*slotModel{"k1": newSlotModel(), "k2": newSlotModel()}
		var ids []string // every id handed out, for releases and renewals
		now := t0
		run := 0
		for step := 0; step < 50; step++ {
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			m := models[key]
			pick := func() string {
				if len(ids) == 0 || rapid.IntRange(0, 9).Draw(rt, "unknown") == 0 {
					return "never-held"
				}
				return rapid.SampledFrom(ids).Draw(rt, "slot")
			}
			switch rapid.IntRange(0, 7).Draw(rt, "op") {
			case 0, 1: // an acquire
				op := Op{Checks: []Check{{Key: key, Policy: "c", Cost: 1}}}
				if rapid.Bool().Draw(rt, "requestID") {
					op.RequestID = fmt.Sprintf("r%d", step)
				}
				r := apply(EncodeCheck(nil, now, 0, []Op{op})).([]Result)[0]
				m.advance(now, spec.MaxHold)
				if r.Err != nil {
					rt.Fatalf("acquire: %v", r.Err)
				}
				want := len(m.end) < limit
				if r.Allowed != want {
					rt.Fatalf("acquire on %s allowed %v with %d held", key, r.Allowed, len(m.end))
				}
				d := r.Decisions[0]
				if !r.Allowed {
					if d.Slot != "" || d.RetryAfter <= 0 {
						rt.Fatalf("refused acquire: %+v", d)
					}
					first := int64(1 << 62)
					for _, e := range m.end {
						first = min(first, e)
					}
					if d.RetryAfter != time.Duration(first-now) {
						rt.Fatalf("retry_after %v, want until the earliest end %v", d.RetryAfter, time.Duration(first-now))
					}
					break
				}
				if op.RequestID != "" && d.Slot != op.RequestID {
					rt.Fatalf("slot %q, want the request id %q", d.Slot, op.RequestID)
				}
				if _, held := m.end[d.Slot]; held || m.freedBy[d.Slot] > 0 {
					rt.Fatalf("slot %q handed out twice", d.Slot)
				}
				if d.SlotHold != spec.Window {
					rt.Fatalf("slot hold %v", d.SlotHold)
				}
				m.end[d.Slot], m.acq[d.Slot] = now+int64(spec.Window), now
				ids = append(ids, d.Slot)
			case 2, 3: // a release
				id := pick()
				c := Check{Key: key, Policy: "c", SlotOp: SlotRelease, Slot: id}
				r := apply(EncodeCheck(nil, now, 0, []Op{{Checks: []Check{c}}})).([]Result)[0]
				m.advance(now, spec.MaxHold)
				_, held := m.end[id]
				_, freed := m.freed[id]
				switch {
				case held:
					if r.Err != nil || !r.Allowed {
						rt.Fatalf("release of held %s: %+v", id, r)
					}
					delete(m.end, id)
					delete(m.acq, id)
					m.freed[id] = now + int64(spec.MaxHold)
					m.freedBy[id]++
				case freed:
					if r.Err != nil || r.Allowed {
						rt.Fatalf("release of freed %s: %+v %v", id, r, r.Err)
					}
				default:
					if r.Err == nil || r.Err.Code != CodeNotFound || r.Err.Field != "slot" {
						rt.Fatalf("release of unknown %s on %s: %+v", id, key, r)
					}
				}
			case 4: // a renewal
				id := pick()
				c := Check{Key: key, Policy: "c", SlotOp: SlotRenew, Slot: id}
				r := apply(EncodeCheck(nil, now, 0, []Op{{Checks: []Check{c}}})).([]Result)[0]
				m.advance(now, spec.MaxHold)
				if _, held := m.end[id]; held {
					end := min(now+int64(spec.Window), m.acq[id]+int64(spec.MaxHold))
					end = max(end, m.end[id])
					if r.Err != nil || !r.Allowed || r.Decisions[0].SlotHold != time.Duration(end-now) {
						rt.Fatalf("renew of held %s: %+v, want hold %v", id, r, time.Duration(end-now))
					}
					m.end[id] = end
				} else if r.Allowed {
					rt.Fatalf("renewed a slot %s that is not held", id)
				}
			case 5: // time passes, and the sweep runs
				now += rapid.SampledFrom([]int64{sec, 5 * sec, 10 * sec, 30 * sec}).Draw(rt, "advance")
				apply(EncodeExpire(now, 1000))
				for _, mm := range models {
					mm.advance(now, spec.MaxHold)
				}
			case 6: // a restart
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				if f, err = Open(path, opts); err != nil {
					rt.Fatal(err)
				}
			case 7: // a snapshot restored into a new replica, which goes on
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
			}
			// The held slots at this index, read through a peek.
			for _, k := range keys {
				r := apply(EncodeCheck(nil, now, 0, []Op{single(k, "c", 0)})).([]Result)[0]
				models[k].advance(now, spec.MaxHold)
				held := limit - r.Decisions[0].Remaining
				if held > limit || held != int64(len(models[k].end)) {
					rt.Fatalf("step %d: %s holds %d slots, the model %d (%v)", step, k, held, len(models[k].end), models[k].end)
				}
			}
		}
		for _, m := range models {
			for id, n := range m.freedBy {
				if n != 1 {
					rt.Fatalf("slot %s freed %d times", id, n)
				}
			}
		}
	})
}
