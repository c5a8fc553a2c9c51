package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
)

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface{ Fatal(...any) }

// snapshotOf is f's state as a Raft snapshot stream.
func snapshotOf(t fataler, f *FSM) []byte {
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// restoreInNew closes f and returns a new replica at path restored from
// its snapshot.
func restoreInNew(t fataler, f *FSM, path string, opts Options) *FSM {
	b := snapshotOf(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	return g
}

func epName(reason, policy string) string { return reason + "\x00" + policy }

// budgetEventBody is a key_budget_exhausted event as webhooks receive it.
type budgetEventBody struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Reason string `json:"reason"`
	Policy string `json:"policy"`
	Budget uint64 `json:"budget"`
	Count  uint64 `json:"count"`
	At     string `json:"at"`
}

// budgetEvents is the key_budget_exhausted events in f's outbox, in order.
func budgetEvents(t interface{ Fatalf(string, ...any) }, f *FSM) []budgetEventBody {
	var out []budgetEventBody
	for _, e := range f.Outbox(0, 1<<20) {
		var b budgetEventBody
		if err := json.Unmarshal(e.Body, &b); err != nil {
			t.Fatalf("event %s: %v: %s", e.ID, err, e.Body)
		}
		if b.Type != "key_budget_exhausted" {
			continue
		}
		if b.ID != e.ID {
			t.Fatalf("event body id %s, outbox id %s", b.ID, e.ID)
		}
		out = append(out, b)
	}
	return out
}

// An exhaustion is one event, however many refusals it holds: the first
// check refused for the cluster's key budget puts one key_budget_exhausted
// event (reason max_keys, the budget, the count) in the outbox and opens the
// episode; further refusals add nothing, across a restart too (the episode
// is replicated state); once the keys are back under 90% of the budget and a
// key is created, the episode is closed and the next exhaustion is a second
// event with its own id. The disk guard, the request-id budget and a
// policy's max_keys have episodes of their own, each one event, and a
// snapshot restored into a new replica holds the same open episodes.
func TestBudgetEpisodeOneEventPerExhaustion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := openFSM(t, path, Options{})
	d := newDriver(t, f)
	b := Bounds{MaxKeys: 3}
	for _, k := range []string{"a", "b", "c"} {
		d.checkBounded(t0, b, inline(t, k, 1))
	}
	if ev := budgetEvents(t, f); len(ev) != 0 {
		t.Fatalf("events within the budget: %+v", ev)
	}
	for i := range 5 {
		if r := d.checkBounded(t0, b, inline(t, fmt.Sprint("flood", i), 1))[0]; r.Err == nil || r.Err.Code != CodeKeyBudgetExhausted {
			t.Fatalf("flood key %d: %+v", i, r)
		}
	}
	ev := budgetEvents(t, f)
	if len(ev) != 1 || ev[0].Reason != ReasonMaxKeys || ev[0].Budget != 3 || ev[0].Count != 3 || ev[0].Policy != "" || ev[0].At != stamp(t0) {
		t.Fatalf("five refusals past a budget of 3: %+v, want one max_keys event with budget 3, count 3", ev)
	}
	first := ev[0].ID
	// Restarted, the episode is still open: no second event.
	f.Close()
	f = openFSM(t, path, Options{})
	d = newDriver(t, f)
	d.next = f.AppliedIndex() + 1
	if r := d.checkBounded(t0, b, inline(t, "flood9", 1))[0]; r.Err == nil {
		t.Fatalf("a new key past the budget after a restart: %+v", r)
	}
	if ev := budgetEvents(t, f); len(ev) != 1 {
		t.Fatalf("a refusal after a restart in the same episode: %+v, want the one event", ev)
	}
	// The keys expire; a new key closes the episode; the budget fills again.
	d.apply(EncodeExpire(t0+11*sec, 100))
	now := t0 + 11*sec
	for _, k := range []string{"d", "e", "f"} {
		if r := d.checkBounded(now, b, inline(t, k, 1))[0]; r.Err != nil {
			t.Fatalf("key %s after expiry: %+v", k, r)
		}
	}
	if eps := f.BudgetEpisodes(); len(eps) != 0 {
		t.Fatalf("open episodes after keys were created again: %v", eps)
	}
	d.checkBounded(now, b, inline(t, "g", 1))
	d.checkBounded(now, b, inline(t, "h", 1))
	ev = budgetEvents(t, f)
	if len(ev) != 2 || ev[1].ID == first || ev[1].Reason != ReasonMaxKeys || ev[1].At != stamp(now) {
		t.Fatalf("a second exhaustion: %+v, want a second max_keys event with its own id", ev)
	}
	// The disk guard: an episode of its own.
	g := Bounds{MaxKeys: 3, NoNewKeys: true}
	d.checkBounded(now, g, inline(t, "i", 1))
	d.checkBounded(now, g, inline(t, "j", 1))
	// A policy's max_keys: its own.
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "10s"})
	d.putPolicy(Policy{Name: "pk", Spec: spec, MaxKeys: 1})
	pol := func(k string) Op { return Op{Checks: []Check{{Key: k, Policy: "pk", Cost: 1}}} }
	if r := d.checkBounded(now, Bounds{}, pol("x"))[0]; r.Err != nil {
		t.Fatalf("the policy's first key: %+v", r)
	}
	d.checkBounded(now, Bounds{}, pol("y"))
	d.checkBounded(now, Bounds{}, pol("z"))
	// The request-id budget: its own.
	rb := Bounds{MaxRequestIDs: 1}
	for i, id := range []string{"r1", "r2", "r3"} {
		op := pol("x")
		op.RequestID = id
		r := d.checkBounded(now, rb, op)[0]
		if refused := r.Err != nil && r.Err.Code == CodeKeyBudgetExhausted; refused != (i > 0) {
			t.Fatalf("request id %s with a budget of 1: %+v", id, r)
		}
	}
	ev = budgetEvents(t, f)
	if len(ev) != 5 {
		t.Fatalf("events: %+v, want max_keys twice, disk, max_keys of pk, max_request_ids", ev)
	}
	if e := ev[2]; e.Reason != ReasonDisk || e.Budget != 0 || e.Count != 3 {
		t.Fatalf("the disk guard's event: %+v", e)
	}
	if e := ev[3]; e.Reason != ReasonMaxKeys || e.Policy != "pk" || e.Budget != 1 || e.Count != 1 {
		t.Fatalf("the policy's event: %+v", e)
	}
	if e := ev[4]; e.Reason != ReasonMaxRequestIDs || e.Budget != 1 || e.Count != 1 {
		t.Fatalf("the request-id budget's event: %+v", e)
	}
	// A new replica restored from a snapshot holds the same open episodes,
	// and a refusal there produces nothing new.
	// The policy's checks ran without cluster bounds (the leader's lifted):
	// they closed the cluster's episodes.
	open := f.BudgetEpisodes()
	if _, ok := open[epName(ReasonMaxKeys, "pk")]; !ok || len(open) != 2 {
		t.Fatalf("open episodes %v, want pk's max_keys and max_request_ids", open)
	}
	f2 := openFSM(t, "", Options{})
	if err := f2.Restore(io.NopCloser(bytes.NewReader(snapshotOf(t, f)))); err != nil {
		t.Fatal(err)
	}
	if got := f2.BudgetEpisodes(); fmt.Sprint(got) != fmt.Sprint(open) {
		t.Fatalf("restored episodes %v, want %v", got, open)
	}
	d2 := newDriver(t, f2)
	d2.next = f2.AppliedIndex() + 1
	op := pol("x")
	op.RequestID = "r4"
	if r := d2.checkBounded(now, rb, op)[0]; r.Err == nil || r.Err.Field != "request_id" {
		t.Fatalf("a new request id past the budget on the restored replica: %+v", r)
	}
	if ev := budgetEvents(t, f2); len(ev) != 5 {
		t.Fatalf("a refusal on the restored replica: %d events, want the 5", len(ev))
	}
}

// An episode closes only under 90% of its bound: a flood held at the
// budget while keys expire one at a time under it (each expiry making room
// for one flood key) is one event, not one per expiry; once the count is
// under 90%, a new key closes the episode and the next exhaustion is a new
// event.
func TestBudgetEpisodeHysteresis(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	b := Bounds{MaxKeys: 10}
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "10s"})
	for i := range 10 {
		d.checkBounded(t0, b, inline(t, fmt.Sprint("k", i), 1))
	}
	flood := 0
	refuse := func() {
		t.Helper()
		flood++
		if r := d.checkBounded(t0, b, inline(t, fmt.Sprint("flood", flood), 1))[0]; r.Err == nil {
			t.Fatalf("flood key %d at the budget: %+v", flood, r)
		}
	}
	reset := func(k string) {
		t.Helper()
		if r := d.apply(EncodeResetKey(Check{Key: k, Spec: &spec})); r != nil {
			t.Fatalf("reset %s: %v", k, r)
		}
	}
	refuse()
	for i := range 3 { // one key goes, a flood key takes its place: at 9 of 10, not under 90%
		reset(fmt.Sprint("k", i))
		if r := d.checkBounded(t0, b, inline(t, fmt.Sprint("again", i), 1))[0]; r.Err != nil {
			t.Fatalf("a key in the room an expiry made: %+v", r)
		}
		refuse()
	}
	if ev := budgetEvents(t, f); len(ev) != 1 {
		t.Fatalf("a flood held at the budget: %d events, want 1", len(ev))
	}
	reset("k3")
	reset("k4") // 8 of 10: under 90%
	d.checkBounded(t0, b, inline(t, "closes", 1))
	if eps := f.BudgetEpisodes(); len(eps) != 0 {
		t.Fatalf("episodes after a key was created at 8 of 10: %v", eps)
	}
	d.checkBounded(t0, b, inline(t, "fills", 1))
	refuse()
	if ev := budgetEvents(t, f); len(ev) != 2 {
		t.Fatalf("a second exhaustion after the count was under 90%%: %d events, want 2", len(ev))
	}
}

// The same hysteresis for a policy's max_keys and for the request-id
// budget: a count held at its bound, one record going and another taking
// its place, is one episode; under 90% the next exhaustion is a new one.
func TestBudgetEpisodeHysteresisPolicyAndRequestIDs(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"})
	d.putPolicy(Policy{Name: "pk", Spec: spec, MaxKeys: 10})
	pol := func(k string) Op { return Op{Checks: []Check{{Key: k, Policy: "pk", Cost: 1}}} }
	reset := func(k string) {
		t.Helper()
		if r := d.apply(EncodeResetKey(Check{Key: k, Policy: "pk"})); r != nil {
			t.Fatalf("reset %s: %v", k, r)
		}
	}
	refused := func(r Result) bool { return r.Err != nil && r.Err.Code == CodeKeyBudgetExhausted }
	for i := range 10 {
		d.checkBounded(t0, Bounds{}, pol(fmt.Sprint("k", i)))
	}
	if r := d.checkBounded(t0, Bounds{}, pol("flood0"))[0]; !refused(r) {
		t.Fatalf("past the policy's 10 keys: %+v", r)
	}
	reset("k0") // 9 of 10
	if r := d.checkBounded(t0, Bounds{}, pol("flood1"))[0]; refused(r) {
		t.Fatalf("in the room a reset made: %+v", r)
	}
	d.checkBounded(t0, Bounds{}, pol("flood2"))
	if n := len(budgetEvents(t, f)); n != 1 {
		t.Fatalf("a policy held at its budget: %d events, want 1", n)
	}
	reset("k1")
	reset("k2") // 8 of 10
	d.checkBounded(t0, Bounds{}, pol("closes"))
	d.checkBounded(t0, Bounds{}, pol("fills"))
	d.checkBounded(t0, Bounds{}, pol("flood3"))
	if n := len(budgetEvents(t, f)); n != 2 {
		t.Fatalf("the policy exhausted again after 8 of 10: %d events, want 2", n)
	}
	// Request ids, recorded a second apart and kept 10 s.
	rb := Bounds{MaxRequestIDs: 10}
	const retention = 10 * sec
	id := 0
	withID := func(now int64) Result {
		t.Helper()
		id++
		op := pol("k5")
		op.RequestID = fmt.Sprint("r", id)
		return d.apply(EncodeCheckBounded(nil, now, retention, rb, []Op{op})).([]Result)[0]
	}
	for i := range 10 {
		if r := withID(t0 + int64(i)*sec); refused(r) {
			t.Fatalf("request id %d of 10: %+v", i, r)
		}
	}
	if r := withID(t0 + 9*sec); !refused(r) {
		t.Fatalf("an 11th request id: %+v", r)
	}
	d.apply(EncodeExpire(t0+10*sec, 100)) // the first goes: 9 of 10
	if r := withID(t0 + 10*sec); refused(r) {
		t.Fatalf("a request id in the room an expiry made: %+v", r)
	}
	withID(t0 + 10*sec)
	if n := len(budgetEvents(t, f)); n != 3 {
		t.Fatalf("request ids held at their budget: %d events, want 3", n)
	}
	d.apply(EncodeExpire(t0+12*sec, 100)) // two more: 8 of 10
	withID(t0 + 12*sec)
	withID(t0 + 12*sec)
	withID(t0 + 12*sec)
	if n := len(budgetEvents(t, f)); n != 4 {
		t.Fatalf("request ids exhausted again after 8 of 10: %d events, want 4", n)
	}
}

// An entry whose transaction fails leaves no episode behind in memory:
// the table is what the file holds.
func TestBudgetEpisodeDiscarded(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.checkBounded(t0, Bounds{MaxKeys: 1}, inline(t, "a", 1))
	f.testHookCommit = func() error { return errors.New("no space left on device") }
	if _, err := f.applyEntries(logOf(d.next, EncodeCheckBounded(nil, t0, 0, Bounds{MaxKeys: 1}, []Op{inline(t, "b", 1)}))); err == nil {
		t.Fatal("the failing commit applied")
	}
	if eps := f.BudgetEpisodes(); len(eps) != 0 {
		t.Fatalf("episodes of a discarded entry: %v", eps)
	}
}

// A damaged episode record is refused at open, never served.
func TestBudgetEpisodeRecordCorrupt(t *testing.T) {
	m := map[string]uint64{}
	for _, enc := range [][]byte{nil, {0x80}, {1}, {1, 2, 3}} {
		if ok, err := loadEpisode(m, episodeKeyPrefix+"max_keys\x00", enc); !ok || err == nil {
			t.Fatalf("record %x: %v %v, want corrupt", enc, ok, err)
		}
	}
	if ok, err := loadEpisode(m, episodeKeyPrefix+"max_keys", []byte{1, 2}); !ok || err == nil {
		t.Fatalf("a record without its policy part: %v %v", ok, err)
	}
	if ok, err := loadEpisode(m, episodeKeyPrefix+"max_keys\x00pk", []byte{7, 2}); !ok || err != nil || m["max_keys\x00pk"] != 7 {
		t.Fatalf("a good record: %v %v %v", ok, err, m)
	}
	if ok, _ := loadEpisode(m, "api", []byte{7, 2}); ok {
		t.Fatal("a policy taken for an episode")
	}
}

// The model of exhaustion episodes: random check entries of 1 to 4 ops (new and existing
// keys, inline and under a policy with max_keys, with and without new
// request ids) under bounds that vary per entry as a leader's flags and disk
// would, expiry sweeps, acks of the outbox, restarts and snapshot restores
// into a new replica. Each budget (the cluster's keys, the disk guard, the
// request ids, the policy's keys) is a plain state machine in the model:
// closed → open at a refusal for it (one event), open → closed when an op
// finds its count under 90% of the bound or the bound lifted (for the disk,
// an entry stamped without the guard that creates a key). After every step
// the replica's open episodes are the model's, every opening has exactly
// one event, with its own id and the budget's reason, policy and bound —
// none lost, none repeated by restarts, restores or acks.
func TestBudgetEpisodeModel(t *testing.T) {
	dir := t.TempDir()
	run := 0
	// Windows of an hour: a budget fills within one, keys go one at a
	// time by resets, and all at once at its end.
	const window, retention = 3600 * sec, 10 * sec
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "1h"})
	rapid.Check(t, func(rt *rapid.T) {
		run++
		path := filepath.Join(dir, fmt.Sprintf("fsm%d.db", run))
		opts := Options{NoSync: true, CommitEvery: rapid.SampledFrom([]int{1, 4}).Draw(rt, "commit_every")}
		f, err := Open(path, opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { f.Close() }()
		next := uint64(1)
		apply := func(cmd []byte) interface{} {
			rs, err := f.applyEntries(logOf(next, cmd))
			if err != nil {
				rt.Fatalf("apply %d: %v", next, err)
			}
			next++
			return rs[0]
		}
		now := t0
		pk := Policy{Name: "pk", Spec: spec, MaxKeys: rapid.SampledFrom([]int64{1, 2, 4, 7, 10}).Draw(rt, "policy_max_keys")}
		if r := apply(EncodePutPolicy(pk)); r != nil {
			rt.Fatalf("put policy: %v", r)
		}
		type kst struct{ start, count int64 }
		keys := map[string]kst{}   // "s:" inline, "p:" under pk
		rids := map[string]int64{} // request id → expiry
		sweep := func() {          // what an expiry sweep at now removes
			for k, st := range keys {
				if st.start+window <= now {
					delete(keys, k)
				}
			}
			for id, exp := range rids {
				if exp <= now {
					delete(rids, id)
				}
			}
		}
		policyKeys := func() (n int64) {
			for k := range keys {
				if k[0] == 'p' {
					n++
				}
			}
			return n
		}
		const (
			epKeys   = ReasonMaxKeys + "\x00"
			epDisk   = ReasonDisk + "\x00"
			epPolicy = ReasonMaxKeys + "\x00pk"
			epRIDs   = ReasonMaxRequestIDs + "\x00"
		)
		open := map[string]bool{}
		opened := map[string]int{}             // episodes opened per budget
		events := map[string]budgetEventBody{} // every key_budget_exhausted event seen, by id
		openEp := func(ep string) {
			if !open[ep] {
				open[ep] = true
				opened[ep]++
			}
		}
		under := func(live uint64, bound int64) bool { return bound <= 0 || live < uint64(bound-bound/10) }
		ridN := 0
		// 10 and 12: bounds whose 90% is under them (hysteresis).
		keyBounds, ridBounds := []int64{0, 2, 4, 6, 10, 12, 12}, []int64{0, 1, 3, 10, 10}
		b := Bounds{MaxKeys: rapid.SampledFrom(keyBounds).Draw(rt, "max_keys"), MaxRequestIDs: rapid.SampledFrom(ridBounds).Draw(rt, "max_request_ids")}
		names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
		steps := rapid.IntRange(1, 100).Draw(rt, "steps")
		for s := 0; s < steps; s++ {
			switch rapid.IntRange(0, 11).Draw(rt, "action") {
			case 10, 11: // a reset: one key goes (where a count drops by one)
				k := rapid.SampledFrom(names).Draw(rt, "reset")
				c, mk := Check{Key: k, Spec: &spec}, "s:"+k
				if rapid.Bool().Draw(rt, "policy") {
					c, mk = Check{Key: k, Policy: pk.Name}, "p:"+k
				}
				if r := apply(EncodeResetKey(c)); r != nil {
					rt.Fatalf("reset: %v", r)
				}
				delete(keys, mk)
			case 0, 1, 2, 3, 4, 5: // a check entry
				now += rapid.SampledFrom([]int64{0, 0, 0, sec, 2 * sec, 11 * sec, 0, 0, 0, sec, 2 * sec, 3601 * sec}).Draw(rt, "advance")
				// A leader's bounds change now and then (its flags, its
				// disk, a new leader), mostly they hold: a budget stays
				// exhausted long enough for keys to go under it.
				if rapid.IntRange(0, 7).Draw(rt, "new_bounds") == 0 {
					b.MaxKeys = rapid.SampledFrom(keyBounds).Draw(rt, "max_keys")
					b.MaxRequestIDs = rapid.SampledFrom(ridBounds).Draw(rt, "max_request_ids")
				}
				if rapid.IntRange(0, 11).Draw(rt, "disk_flip") < map[bool]int{false: 1, true: 4}[b.NoNewKeys] {
					b.NoNewKeys = !b.NoNewKeys
				}
				ops := make([]Op, rapid.IntRange(1, 4).Draw(rt, "ops"))
				for i := range ops {
					ck := Check{Key: rapid.SampledFrom(names).Draw(rt, "key"), Spec: &spec, Cost: rapid.Int64Range(0, 2).Draw(rt, "cost")}
					if rapid.Bool().Draw(rt, "policy") {
						ck.Spec, ck.Policy = nil, pk.Name
					}
					ops[i] = Op{Checks: []Check{ck}}
					if rapid.IntRange(0, 2).Draw(rt, "request_id") == 0 {
						ridN++
						ops[i].RequestID = fmt.Sprint("r", ridN)
					}
				}
				rs := apply(EncodeCheckBounded(nil, now, retention, b, ops)).([]Result)
				for i, op := range ops {
					r := rs[i]
					if op.RequestID != "" {
						if b.MaxRequestIDs > 0 && len(rids) >= int(b.MaxRequestIDs) {
							openEp(epRIDs)
							if r.Err == nil || r.Err.Field != "request_id" {
								rt.Fatalf("op %d: a new request id with %d live under %+v: %+v, want refused", i, len(rids), b, r)
							}
							continue
						}
						if under(uint64(len(rids)), b.MaxRequestIDs) {
							open[epRIDs] = false
						}
					}
					ck := op.Checks[0]
					mk := "s:" + ck.Key
					if ck.Policy != "" {
						mk = "p:" + ck.Key
					}
					cur, present := keys[mk]
					ws := now - now%window
					cnt := int64(0)
					if present && cur.start == ws {
						cnt = cur.count
					}
					allowed := cnt+ck.Cost <= spec.Limit
					if ck.Cost == 0 {
						allowed = cnt < spec.Limit
					}
					refused := false
					if allowed && ck.Cost > 0 && !present { // creates a key
						live := uint64(len(keys))
						switch {
						case b.NoNewKeys:
							openEp(epDisk)
							refused = true
						case b.MaxKeys > 0 && live+1 > uint64(b.MaxKeys):
							open[epDisk] = false
							openEp(epKeys)
							refused = true
						default:
							open[epDisk] = false
							if under(live, b.MaxKeys) {
								open[epKeys] = false
							}
							if ck.Policy != "" {
								if pl := policyKeys(); pl+1 > pk.MaxKeys {
									openEp(epPolicy)
									refused = true
								} else if under(uint64(pl), pk.MaxKeys) {
									open[epPolicy] = false
								}
							}
						}
					}
					if refused {
						if r.Err == nil || r.Err.Code != CodeKeyBudgetExhausted || r.Err.Field != "key" {
							rt.Fatalf("op %d (%s) with %d keys (%d of pk's %d) under %+v: %+v, want key_budget_exhausted", i, mk, len(keys), policyKeys(), pk.MaxKeys, b, r)
						}
						continue
					}
					if r.Err != nil || r.Allowed != allowed {
						rt.Fatalf("op %d (%s cost %d, count %d) under %+v: %+v, want allowed=%v", i, mk, ck.Cost, cnt, b, r, allowed)
					}
					if allowed && ck.Cost > 0 {
						keys[mk] = kst{ws, cnt + ck.Cost}
					}
					if op.RequestID != "" {
						rids[op.RequestID] = now + retention
					}
				}
				// The entry's own sweep removes at most 2×ops+16 due
				// entries: after a long advance more are due (keys and
				// request ids together), and those left still count until a
				// later sweep. An expiry entry removes the rest, so that the
				// model's sweep (everything due at now) is the replica's.
				apply(EncodeExpire(now, 1000))
				sweep()
			case 6: // the delivery loop acks what is waiting
				var seqs []uint64
				for _, e := range f.Outbox(0, 100) {
					seqs = append(seqs, e.Seq)
				}
				apply(EncodeAckEvents(seqs))
			case 7: // a restart
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				if f, err = Open(path, opts); err != nil {
					rt.Fatal(err)
				}
			case 8: // a snapshot restored into a new replica, which goes on
				run++
				path = filepath.Join(dir, fmt.Sprintf("fsm%d.db", run))
				f = restoreInNew(rt, f, path, opts)
				next = f.AppliedIndex() + 1
			case 9: // an expiry sweep entry
				now += rapid.SampledFrom([]int64{0, sec, 11 * sec, 3601 * sec}).Draw(rt, "advance")
				apply(EncodeExpire(now, 1000))
				sweep()
			}
			// The replica's open episodes are the model's.
			var want, got []string
			for ep, o := range open {
				if o {
					want = append(want, ep)
				}
			}
			for ep := range f.BudgetEpisodes() {
				got = append(got, ep)
			}
			sort.Strings(want)
			sort.Strings(got)
			if fmt.Sprint(want) != fmt.Sprint(got) {
				rt.Fatalf("step %d: open episodes %q, model %q", s, got, want)
			}
			// Every opening has its one event (collected before any ack).
			for _, e := range budgetEvents(rt, f) {
				if prev, ok := events[e.ID]; ok && prev != e {
					rt.Fatalf("event id %s names %+v and %+v", e.ID, prev, e)
				}
				events[e.ID] = e
			}
			per := map[string]int{}
			for _, e := range events {
				ep := e.Reason + "\x00" + e.Policy
				per[ep]++
			}
			for _, ep := range []string{epKeys, epDisk, epPolicy, epRIDs} {
				if per[ep] != opened[ep] {
					rt.Fatalf("step %d: %d events for %q, %d episodes opened (%v)", s, per[ep], ep, opened[ep], events)
				}
			}
		}
	})
}
