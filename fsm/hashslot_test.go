package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

func everySlot() []uint16 {
	s := make([]uint16, hashslot.Count)
	for i := range s {
		s[i] = uint16(i)
	}
	return s
}

func errCode(t *testing.T, what string, r interface{}, want Code) {
	t.Helper()
	var e *Error
	switch v := r.(type) {
	case *Error:
		e = v
	case Result:
		e = v.Err
	case error:
		errors.As(v, &e)
	}
	if e == nil || e.Code != want {
		t.Fatalf("%s: %v (%T), want %s", what, r, r, want)
	}
}

// A store that never had a hash slot command owns every slot and says so,
// and decides as always.
func TestHashSlotDefaultOwnsEverySlot(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	o := f.HashSlotOwnership()
	want := nodeapi.HashSlotOwnership{Owned: hashslot.Count, Runs: []nodeapi.HashSlotRun{{First: 0, Last: hashslot.Count - 1}}}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("default ownership %+v", o)
	}
	d.putPolicy(Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1s"})})
	if r := d.one(t0, "p", "a", 1); !r.Allowed || r.Err != nil {
		t.Fatalf("check %+v", r)
	}
}

// The table is read back after a restart, and a damaged one stops the
// store from opening rather than being served.
func TestHashSlotTableSurvivesRestartAndRefusesDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, f)
	if r := d.apply(EncodeHashSlotsOwn(t0, []uint16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})); r != nil {
		t.Fatal(r)
	}
	if r := d.apply(EncodeHashSlotFreeze(t0, 5, 77)); r == nil {
		t.Fatal("no export")
	} else if _, ok := r.([]byte); !ok {
		t.Fatalf("freeze: %v", r)
	}
	want := []nodeapi.HashSlotRun{
		{First: 0, Last: 4, State: nodeapi.HashSlotOwned},
		{First: 5, Last: 5, State: nodeapi.HashSlotFrozen, Move: 77},
		{First: 6, Last: 9, State: nodeapi.HashSlotOwned},
		{First: 10, Last: hashslot.Count - 1, State: nodeapi.HashSlotAbsent},
	}
	check := func(f *FSM) {
		t.Helper()
		o := f.HashSlotOwnership()
		if !o.Tracked || o.Owned != 9 || o.Frozen != 1 || o.Absent != hashslot.Count-10 || !reflect.DeepEqual(o.Runs, want) {
			t.Fatalf("ownership %+v", o)
		}
	}
	check(f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f, err = Open(path, Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	check(f)

	for name, enc := range map[string][]byte{
		"truncated":     {hsTableVersion, 0, 0},
		"unknown state": append([]byte{hsTableVersion, 0, 3, 0}, make([]byte, 2*(hashslot.Count-1))...),
		"version":       append([]byte{9, 0}, make([]byte, 2*hashslot.Count)...),
		"trailing":      append((&hashSlotTable{}).encode(), 0),
	} {
		if _, err := decodeHashSlotTable(enc); err == nil {
			t.Errorf("%s: a damaged table decodes", name)
		}
	}
	if err := f.store.Update(func(tx *persist.Tx) error {
		return tx.PutPolicy(hashSlotsKey, append([]byte{hsTableVersion, 0, 3}, make([]byte, 2*hashslot.Count)...))
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f, err = Open(path, Options{NoSync: true}); err == nil || !errors.Is(err, persist.ErrCorrupt) {
		if f != nil {
			_ = f.Close()
		}
		t.Fatalf("open with a damaged table: %v", err)
	}
}

// Every command that writes a key's records is refused for a key whose slot
// is frozen (slot_moving) or absent (wrong_group), and goes through for the
// others, even in the same entry.
func TestHashSlotRefusesPerKeyCommands(t *testing.T) {
	a, b := "a", "b"
	sa := hashslot.Of(a)
	if hashslot.Of(b) == sa {
		t.Fatal("the test needs keys of two slots")
	}
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "10s"})
	d.putPolicy(Policy{Name: "p", Spec: spec, Lease: algo.Lease{Share: 50_000, MaxTTL: 2 * time.Second}})
	d.apply(EncodePutPlan(Plan{Name: "pro", Limits: []PlanLimit{{Name: "daily", Spec: spec}}}))
	if r := d.apply(EncodeHashSlotsOwn(t0, everySlot())); r != nil {
		t.Fatal(r)
	}
	if _, ok := d.apply(EncodeHashSlotFreeze(t0, uint16(sa), 1)).([]byte); !ok {
		t.Fatal("freeze")
	}
	cmds := func(key string) map[string][]byte {
		return map[string][]byte{
			"check":    EncodeCheck(nil, t0, 0, []Op{{RequestID: "r-" + key, Checks: []Check{{Key: key, Policy: "p", Cost: 1}}}}),
			"reset":    EncodeResetKey(Check{Key: key, Policy: "p"}),
			"assign":   EncodeAssignPlans([]Assignment{{Key: key, Plan: "pro"}}),
			"override": EncodePutOverride(key, Override{Limits: []LimitOverride{{Name: "daily", Limit: 2}}, Expires: t0 + 60*sec}),
			"unban":    EncodeUnban(key, "p"),
			"degraded": EncodeChargeDegraded(t0, "c-"+key, []DegradedCharge{{Policy: "p", Key: key, Units: 1}}),
		}
	}
	refusedAll := func(code Code) {
		t.Helper()
		for name, cmd := range cmds(a) {
			r := d.apply(cmd)
			if rs, ok := r.([]Result); ok {
				r = rs[0]
			}
			errCode(t, name, r, code)
		}
		gs := d.apply(EncodeGrantLease(nil, t0, "n1", []LeaseRequest{{ID: 1, Check: Check{Key: b, Policy: "p"}},
			{ID: 2, Check: Check{Key: a, Policy: "p"}}, {ID: 3, Check: Check{Key: b + "2", Policy: "p"}}})).([]LeaseGrant)
		if len(gs) != 3 || gs[1].Err == nil || gs[1].Err.Code != code || gs[1].ID != 2 {
			t.Fatalf("grants %+v", gs)
		}
		for _, i := range []int{0, 2} {
			if gs[i].Err != nil || gs[i].Units == 0 || gs[i].ID != uint64(i+1) {
				t.Fatalf("grant %d of an owned key: %+v", i, gs[i])
			}
		}
	}
	refusedAll(CodeSlotMoving)
	n := uint64(len(cmds(a)) + 1) // and the lease
	if wg, mv := f.HashSlotRefusals(); wg != 0 || mv != n {
		t.Fatalf("refusals counted: wrong_group %d, slot_moving %d; want 0, %d", wg, mv, n)
	}
	if r := d.check(t0, single(b, "p", 1))[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("a key of an owned slot: %+v", r)
	}
	if r := d.apply(EncodeHashSlotDrop(uint16(sa), 1)); r != nil {
		t.Fatal(r)
	}
	refusedAll(CodeWrongGroup)
	if wg, mv := f.HashSlotRefusals(); wg != n || mv != n {
		t.Fatalf("refusals counted: wrong_group %d, slot_moving %d; want %d each", wg, mv, n)
	}
	// Nothing of the refused commands was written: the slot holds nothing.
	if n := f.Stats().Keys; n == 0 {
		t.Fatal("the owned key's records are gone too")
	}
	var left int
	if err := f.store.Update(func(tx *persist.Tx) error {
		recs, err := f.ap.slotRecords(tx, sa)
		left = len(recs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d records of the refused slot", left)
	}
}

// The move commands' refusals: each names why, changes nothing, and a
// repeat of a step that was applied answers as the step did.
func TestHashSlotMoveRefusals(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "10s"})
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: spec})
	// A group with a request id recorded before it tracked its slots
	// cannot move one until that id expires.
	d.check(t0, Op{RequestID: "early", Checks: []Check{{Key: "a", Policy: "p", Cost: 1}}})
	sa := uint16(hashslot.Of("a"))
	errCode(t, "freeze untracked", d.apply(EncodeHashSlotFreeze(t0, sa, 1)), CodeConflict)
	if r := d.apply(EncodeHashSlotsOwn(t0, everySlot())); r != nil {
		t.Fatal(r)
	}
	h := openFSM(t, "", Options{NoSync: true})
	hd := newDriver(t, h)
	hd.putPolicy(Policy{Name: "p", Spec: spec})
	hd.check(t0, single("a", "p", 1))
	errCode(t, "own a subset with keys", hd.apply(EncodeHashSlotsOwn(t0, everySlot()[1:])), CodeConflict)
	if h.HashSlotOwnership().Tracked {
		t.Fatal("a refused table was set")
	}
	errCode(t, "freeze before the early ids expire", d.apply(EncodeHashSlotFreeze(t0, sa, 1)), CodeUnavailable)
	later := t0 + int64(DefaultRetention)
	errCode(t, "slot out of range", d.apply(EncodeHashSlotFreeze(later, hashslot.Count, 1)), CodeInvalidArgument)
	errCode(t, "move 0", d.apply(EncodeHashSlotFreeze(later, sa, 0)), CodeInvalidArgument)
	errCode(t, "drop an owned slot", d.apply(EncodeHashSlotDrop(sa, 1)), CodeConflict)
	blob, ok := d.apply(EncodeHashSlotFreeze(later, sa, 1)).([]byte)
	if !ok {
		t.Fatal("freeze")
	}
	again, _ := d.apply(EncodeHashSlotFreeze(later, sa, 1)).([]byte)
	if string(again) != string(blob) {
		t.Fatal("a repeated freeze exports other bytes from the same state")
	}
	errCode(t, "freeze by another move", d.apply(EncodeHashSlotFreeze(later, sa, 2)), CodeConflict)
	errCode(t, "unfreeze by another move", d.apply(EncodeHashSlotUnfreeze(sa, 2)), CodeConflict)
	errCode(t, "import into the exporter", d.apply(EncodeHashSlotImport(later, sa, 1, later, blob)), CodeConflict)

	// The importing group: a damaged or foreign blob is refused whole.
	g := openFSM(t, "", Options{NoSync: true})
	gd := newDriver(t, g)
	if r := gd.apply(EncodeHashSlotsOwn(t0, nil)); r != nil {
		t.Fatal(r)
	}
	bad := append([]byte(nil), blob...)
	bad[len(bad)/2] ^= 1
	errCode(t, "damaged blob", gd.apply(EncodeHashSlotImport(later, sa, 1, later, bad)), CodeInvalidArgument)
	errCode(t, "another slot's blob", gd.apply(EncodeHashSlotImport(later, sa+1, 1, later, blob)), CodeInvalidArgument)
	errCode(t, "another move's blob", gd.apply(EncodeHashSlotImport(later, sa, 9, later, blob)), CodeInvalidArgument)
	if n := g.Stats().Keys; n != 0 {
		t.Fatalf("a refused import wrote %d keys", n)
	}
	if r := gd.apply(EncodeHashSlotImport(later, sa, 1, later, blob)); r != nil {
		t.Fatal(r)
	}
	if r := gd.apply(EncodeHashSlotImport(later, sa, 1, later, blob)); r != nil {
		t.Fatalf("a repeated import: %v", r)
	}
	if r := d.apply(EncodeHashSlotDrop(sa, 1)); r != nil {
		t.Fatal(r)
	}
	errCode(t, "unfreeze after the drop", d.apply(EncodeHashSlotUnfreeze(sa, 1)), CodeWrongGroup)
	errCode(t, "freeze an absent slot", d.apply(EncodeHashSlotFreeze(later, sa, 3)), CodeWrongGroup)
}

// An export past the largest entry is refused before the slot is frozen:
// it keeps serving.
func TestHashSlotExportTooLarge(t *testing.T) {
	defer func(n int) { maxHashSlotExport = n }(maxHashSlotExport)
	maxHashSlotExport = 64
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "10s"})})
	d.apply(EncodeHashSlotsOwn(t0, everySlot()))
	for _, k := range []string{"{t}1", "{t}2", "{t}3", "{t}4"} {
		d.check(t0, single(k, "p", 1))
	}
	s := uint16(hashslot.Of("{t}"))
	errCode(t, "freeze", d.apply(EncodeHashSlotFreeze(t0, s, 1)), CodePayloadTooLarge)
	if r := d.check(t0, single("{t}1", "p", 1))[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("the slot stopped serving: %+v", r)
	}
}

// BenchmarkHashSlotFreeze: a freeze (the export scan over the group's whole
// state) and its unfreeze in a group of ~92,000 keys, with commits shared
// as the daemon shares them.
func BenchmarkHashSlotFreeze(b *testing.B) {
	spec := mustSpec(b, algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1m"})
	l := newBenchLoadOpts(b, Options{NoSync: true, CommitEvery: 64}, spec, 100_000, 256, int64(5*time.Microsecond))
	for i := 0; i < 1000; i++ {
		l.entry(b)
	}
	if r := l.apply(EncodeHashSlotsOwn(l.now, everySlot())); r != nil {
		b.Fatal(r)
	}
	s := uint16(hashslot.Of("user:1"))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := l.apply(EncodeHashSlotFreeze(l.now, s, uint64(i+1))).([]byte); !ok {
			b.Fatal("freeze")
		}
		if r := l.apply(EncodeHashSlotUnfreeze(s, uint64(i+1))); r != nil {
			b.Fatal(r)
		}
	}
	b.ReportMetric(float64(l.f.Stats().Keys), "keys")
}

// The export is a function of the log: replicas that commit at other
// times and cache other keys export the same bytes at the same index.
func TestHashSlotExportIsDeterministic(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "sliding_window", Limit: 3, Window: "10s"})
	var log [][]byte
	log = append(log, EncodePutPolicy(Policy{Name: "p", Spec: spec, OnExceed: onExceed(time.Minute, time.Hour)}), EncodeHashSlotsOwn(t0, everySlot()))
	now := t0
	for i := 0; i < 400; i++ {
		key := []string{"{t}a", "{t}b", "{t}c", "x", "y"}[i%5]
		op := Op{Checks: []Check{{Key: key, Policy: "p", Cost: 1}}}
		if i%3 == 0 {
			op.RequestID = "r" + string(rune('a'+i%26)) + key
		}
		log = append(log, EncodeCheck(nil, now, 0, []Op{op}))
		if i%50 == 0 {
			log = append(log, EncodeAssignPlans(nil), EncodeExpire(now, 5))
		}
		now += sec / 4
	}
	s := uint16(hashslot.Of("{t}"))
	log = append(log, EncodeHashSlotFreeze(now, s, 1))
	var exports [][]byte
	for _, opts := range []Options{{NoSync: true, CacheKeys: 2}, {NoSync: true, CommitEvery: 64}, {NoSync: true, CommitEvery: 7, CacheKeys: 3}} {
		f := openFSM(t, "", opts)
		d := newDriver(t, f)
		var r interface{}
		for i, cmd := range log {
			r = d.apply(cmd)
			if opts.CommitEvery > 1 && i%13 == 0 {
				if err := f.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		blob, ok := r.([]byte)
		if !ok {
			t.Fatalf("freeze: %v", r)
		}
		x, err := decodeExport(blob)
		if err != nil || len(x.states) == 0 || len(x.requests) == 0 {
			t.Fatalf("export %+v %v", x, err)
		}
		exports = append(exports, blob)
	}
	for i := 1; i < len(exports); i++ {
		if !bytes.Equal(exports[i], exports[0]) {
			t.Fatalf("replica %d exports other bytes", i)
		}
	}
}

// An export carries a record of every per-key kind, and only the slot's:
// key states under a policy, an inline limit and a plan limit, a lease, a
// ban, a notify mark, usage history (the open window and a closed one), a
// reservation, an assignment, an override, and the request ids.
func TestHashSlotExportCarriesEveryKind(t *testing.T) {
	const key, other = "{k}1", "other"
	if hashslot.Of(key) == hashslot.Of(other) {
		t.Fatal("the test needs keys of two slots")
	}
	fw := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "10s"})
	var notify [nodeapi.MaxNotify]uint16
	notify[0] = nodeapi.NotifyScale / 10
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "10s"}), Lease: algo.Lease{Share: 50_000, MaxTTL: 2 * time.Second},
		Options: nodeapi.LimitOptions{Notify: notify, History: time.Hour}})
	d.putPolicy(Policy{Name: "b", Spec: fw, OnExceed: onExceed(time.Minute, time.Hour)})
	d.apply(EncodePutPlan(Plan{Name: "pro", Limits: []PlanLimit{{Name: "daily", Spec: fw}}}))
	d.apply(EncodeHashSlotsOwn(t0, everySlot()))
	for _, k := range []string{key, other} {
		d.check(t0, Op{RequestID: "id-" + k, Checks: []Check{{Key: k, Policy: "p", Cost: 1}}})
		d.check(t0+11*sec, single(k, "p", 1)) // closes the first window into history
		d.check(t0+11*sec, Op{Checks: []Check{{Key: k, Spec: &fw, Cost: 1}}})
		for range 3 {
			d.check(t0+11*sec, single(k, "b", 1)) // the third is refused: a ban
		}
		d.check(t0+11*sec, Op{RequestID: "res-" + k, Checks: []Check{{Key: k, Policy: "p", Cost: 1, Reserve: time.Minute}}})
		d.apply(EncodeAssignPlans([]Assignment{{Key: k, Plan: "pro"}}))
		d.apply(EncodePutOverride(k, Override{Limits: []LimitOverride{{Name: "daily", Limit: 5}}, Expires: t0 + 600*sec}))
		d.check(t0+11*sec, Op{Checks: []Check{{Key: k, ByPlan: true, Cost: 1}}})
		gs := d.apply(EncodeGrantLease(nil, t0+11*sec, "n1", []LeaseRequest{{ID: 1, Check: Check{Key: k, Policy: "p"}}})).([]LeaseGrant)
		if gs[0].Err != nil {
			t.Fatal(gs[0].Err)
		}
	}
	blob, ok := d.apply(EncodeHashSlotFreeze(t0+11*sec, uint16(hashslot.Of(key)), 1)).([]byte)
	if !ok {
		t.Fatal("freeze")
	}
	x, err := decodeExport(blob)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[byte]int{}
	for _, r := range x.states {
		u, ok := userKeyOf(r.key)
		if !ok || string(u) != key {
			t.Fatalf("record %q of another key in the export", r.key)
		}
		kinds[r.key[0]]++
	}
	for _, k := range []byte{'p', 's', tagPlanLimit, leaseKeyPrefix, banKeyPrefix, notifyKeyPrefix, tagUsage, tagUsageWindow, reservationKeyPrefix, tagAssignment, tagOverride} {
		if kinds[k] == 0 {
			t.Errorf("no %q record in the export (%v)", k, kinds)
		}
	}
	var ids []string
	for _, r := range x.requests {
		ids = append(ids, string(r.key))
	}
	if want := []string{"id-" + key, "res-" + key}; !reflect.DeepEqual(ids, want) {
		t.Errorf("request ids %v, want %v", ids, want)
	}
}

// BenchmarkApplyHashSlots: BenchmarkApplyBatch's sliding_window load (256-op
// entries over 100,000 keys) in a group without a table (the default), one
// tracking its slots with every one owned, and one with a slot frozen, so
// that every op's key is hashed (the load leaves out that slot's keys).
func BenchmarkApplyHashSlots(b *testing.B) {
	spec := mustSpec(b, algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1m"})
	for _, mode := range []string{"default", "tracked", "one_frozen"} {
		b.Run(mode, func(b *testing.B) {
			l := newBenchLoad(b, spec, 100_000, 256, int64(5*time.Microsecond))
			if mode != "default" {
				l.apply(EncodeHashSlotsOwn(l.now, everySlot()))
			}
			if mode == "one_frozen" {
				s := hashslot.Of("user:1")
				if _, ok := l.apply(EncodeHashSlotFreeze(l.now, uint16(s), 1)).([]byte); !ok {
					b.Fatal("freeze")
				}
				keys := l.keys[:0]
				for _, k := range l.keys {
					if hashslot.Of(k) != s {
						keys = append(keys, k)
					}
				}
				l.keys = keys
			}
			l.run(b, 1000)
		})
	}
}

// keySlot hashes the entry's bytes in place exactly as hashslot.Of hashes a
// string, and userKeyOf finds the key inside every per-key storage key.
func TestKeySlotAndUserKey(t *testing.T) {
	for _, k := range []string{"", "a", "{u1}x", "x{}{y}", "{", "user:{42}:reads"} {
		if keySlot([]byte(k)) != hashslot.Of(k) {
			t.Errorf("keySlot(%q) differs from hashslot.Of", k)
		}
	}
	sk := append([]byte{'p', 3}, "pol{u}k"...)
	for _, k := range [][]byte{sk, append([]byte{'L'}, sk...), append(append([]byte{'W'}, sk...), 1, 2, 3, 4, 5, 6, 7, 8),
		append(append([]byte{'R', byte(len(sk))}, sk...), "res-id"...), append([]byte{'a'}, "{u}k"...)} {
		if u, ok := userKeyOf(k); !ok || string(u) != "{u}k" {
			t.Errorf("userKeyOf(%q) = %q, %v", k, u, ok)
		}
	}
	for _, k := range [][]byte{{'p', 3, 'a', 'b', 'c'}, {'F', 1, 'x'}, {'O', 0, 0, 0, 0, 0, 0, 0, 1}, {'Q', 0, 1, 'i'}, {'p'}} {
		if u, ok := userKeyOf(k); ok {
			t.Errorf("userKeyOf(%q) = %q: not a per-key record", k, u)
		}
	}
	for s, want := range map[nodeapi.HashSlotState]string{nodeapi.HashSlotOwned: "owned", nodeapi.HashSlotFrozen: "frozen", nodeapi.HashSlotAbsent: "absent", 9: "unknown"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q", s, s.String())
		}
	}
}

// A group with a slot not owned hashes every op's keys and allocates
// nothing more for it than a group without a table (TestCheckEntryAllocations).
func TestCheckEntryAllocationsWithAFrozenSlot(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true, CommitEvery: 1 << 30})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "sliding_window", Limit: 1_000_000_000, Window: "1h"})})
	d.apply(EncodeHashSlotsOwn(t0, everySlot()))
	frozen := hashslot.Of("frozen")
	if _, ok := d.apply(EncodeHashSlotFreeze(t0, uint16(frozen), 1)).([]byte); !ok {
		t.Fatal("freeze")
	}
	var ops []Op
	for i := 0; len(ops) < 16; i++ {
		if k := fmt.Sprintf("key-%d", i); hashslot.Of(k) != frozen {
			ops = append(ops, single(k, "p", 1))
		}
	}
	entry := EncodeCheck(nil, t0, 0, ops)
	d.apply(entry)
	l := &raft.Log{Index: d.next, Type: raft.LogCommand, Data: entry}
	batch := []*raft.Log{l}
	allocs := testing.AllocsPerRun(200, func() {
		if rs, ok := f.ApplyBatch(batch)[0].([]Result); !ok || !rs[0].Allowed {
			t.Fatalf("check refused: %v", f.ApplyBatch(batch)[0])
		}
		l.Index++
	})
	if allocs > 4 {
		t.Fatalf("%v allocations per 16-op check entry, want at most 4 (the response)", allocs)
	}
}
