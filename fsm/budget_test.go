package fsm

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/persist"
)

func (d *driver) checkBounded(now int64, b Bounds, ops ...Op) []Result {
	d.t.Helper()
	r := d.apply(EncodeCheckBounded(nil, now, 0, b, ops))
	rs, ok := r.([]Result)
	if !ok {
		d.t.Fatalf("check response %T %v", r, r)
	}
	return rs
}

func inline(t testing.TB, key string, cost int64) Op {
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "10s"})
	return Op{Checks: []Check{{Key: key, Spec: &s, Cost: cost}}}
}

// A flood of new keys stops at the budget the leader stamped in the entry,
// with key_budget_exhausted naming the key, while the keys that exist are
// still decided; once keys expire, new ones are created again. The free-disk
// guard (NoNewKeys) refuses every new key and no existing one, and the
// request-id budget refuses new ids but replays recorded ones.
func TestKeyBudgetRefusesOnlyNewKeys(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	b := Bounds{MaxKeys: 3}
	for i, k := range []string{"a", "b", "c"} {
		if r := d.checkBounded(t0, b, inline(t, k, 1))[0]; r.Err != nil || !r.Allowed {
			t.Fatalf("key %d within the budget: %+v", i, r)
		}
	}
	rs := d.checkBounded(t0, b, inline(t, "d", 1), inline(t, "a", 1), inline(t, "e", 0))
	if e := rs[0].Err; e == nil || e.Code != CodeKeyBudgetExhausted || e.Field != "key" {
		t.Fatalf("a fourth key past a budget of 3: %+v, want key_budget_exhausted on key", rs[0])
	}
	if rs[1].Err != nil || !rs[1].Allowed || rs[1].Decisions[0].Remaining != 1 {
		t.Fatalf("an existing key past the budget: %+v, want allowed with 1 remaining", rs[1])
	}
	if rs[2].Err != nil || !rs[2].Allowed {
		t.Fatalf("a peek of a new key creates nothing and is answered: %+v", rs[2])
	}
	if n := storedKeys(f); n != 3 {
		t.Fatalf("%d keys stored, want 3", n)
	}
	if keys, _, _ := f.BudgetRefusals(); keys != 1 {
		t.Fatalf("%d budget refusals counted, want 1", keys)
	}
	// Without bounds (an entry from before them) the key is created.
	if r := d.check(t0, inline(t, "d", 1))[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("no bounds: %+v", r)
	}
	// The disk guard: no new key, existing ones decided.
	g := Bounds{NoNewKeys: true}
	if r := d.checkBounded(t0, g, inline(t, "f", 1))[0]; r.Err == nil || r.Err.Code != CodeKeyBudgetExhausted {
		t.Fatalf("a new key on a full disk: %+v", r)
	}
	if r := d.checkBounded(t0, g, inline(t, "b", 1))[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("an existing key on a full disk: %+v", r)
	}
	// The keys expire at the window's end; then there is room again.
	if n := d.apply(EncodeExpire(t0+11*sec, 100)); n != 4 {
		t.Fatalf("expired %v, want 4", n)
	}
	if r := d.checkBounded(t0+11*sec, b, inline(t, "g", 1))[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("a new key after expiry: %+v", r)
	}
	// Request ids: a budget of 1 record.
	rb := Bounds{MaxRequestIDs: 1}
	op := inline(t, "g", 1)
	op.RequestID = "r1"
	if r := d.checkBounded(t0+11*sec, rb, op)[0]; r.Err != nil {
		t.Fatalf("first request id: %+v", r)
	}
	if r := d.checkBounded(t0+11*sec, rb, op)[0]; r.Err != nil || !r.Replayed {
		t.Fatalf("a recorded request id is replayed past the budget: %+v", r)
	}
	op.RequestID = "r2"
	if r := d.checkBounded(t0+11*sec, rb, op)[0]; r.Err == nil || r.Err.Code != CodeKeyBudgetExhausted || r.Err.Field != "request_id" {
		t.Fatalf("a second request id past a budget of 1: %+v", r)
	}
	if r := d.checkBounded(t0+11*sec, rb, inline(t, "g", 0))[0]; r.Err != nil {
		t.Fatalf("an op without a request id past the request-id budget: %+v", r)
	}
}

// Bounds survive the round trip, and a zero Bounds adds nothing to the
// entry (entries and their golden encodings are as before).
func TestBoundsEncoding(t *testing.T) {
	ops := []Op{single("k", "p", 1)}
	if a, b := EncodeCheck(nil, t0, 0, ops), EncodeCheckBounded(nil, t0, 0, Bounds{}, ops); !bytes.Equal(a, b) {
		t.Fatal("zero bounds changed the entry")
	}
	for _, b := range []Bounds{{MaxKeys: 7}, {NoNewKeys: true}, {MaxRequestIDs: 9, MaxKeys: 1 << 40}, {MaxKeys: 1, MaxRequestIDs: 2, NoNewKeys: true}, {MaxInlineKeys: 3}, {MaxKeys: 10, MaxRequestIDs: 2, NoNewKeys: true, MaxInlineKeys: 5}} {
		var c command
		if err := decodeCommand(&c, EncodeCheckBounded(nil, t0, 0, b, ops)); err != nil || c.bounds != b || len(c.ops) != 1 {
			t.Fatalf("%+v: decoded %+v, %v", b, c.bounds, err)
		}
	}
	// An entry from before MaxInlineKeys (its flags without the bit) bounds
	// no inline keys.
	var old command
	if err := decodeCommand(&old, appendBounds(EncodeCheck(nil, t0, 0, ops), Bounds{MaxKeys: 4, MaxRequestIDs: 2})); err != nil || old.bounds != (Bounds{MaxKeys: 4, MaxRequestIDs: 2}) {
		t.Fatalf("an entry without the inline bound: %+v, %v", old.bounds, err)
	}
	var c command
	enc := append(EncodeCheck(nil, t0, 0, ops), 0x80)
	if err := decodeCommand(&c, enc); err == nil {
		t.Fatal("unknown bounds flags decoded")
	}
}

// The inline share: past MaxInlineKeys live inline keys a check creating
// another inline key is refused (reason max_inline_keys, one episode event),
// while the existing inline keys are decided and policy keys are still
// created, within MaxKeys; the count survives a restart and a snapshot
// restored into another replica, and expiry frees room.
func TestInlineKeyShare(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, f)
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "10s"})
	d.putPolicy(Policy{Name: "pol", Spec: spec})
	b := Bounds{MaxKeys: 10, MaxInlineKeys: 2}
	policyKey := func(d *driver, k string) Result {
		t.Helper()
		return d.checkBounded(t0, b, Op{Checks: []Check{{Key: k, Policy: "pol", Cost: 1}}})[0]
	}
	for _, k := range []string{"a", "b"} {
		if r := d.checkBounded(t0, b, inline(t, k, 1))[0]; r.Err != nil || !r.Allowed {
			t.Fatalf("inline key %s within the share: %+v", k, r)
		}
	}
	refused := func(d *driver, f *FSM) {
		t.Helper()
		if r := d.checkBounded(t0, b, inline(t, "c", 1))[0]; r.Err == nil || r.Err.Code != CodeKeyBudgetExhausted || r.Err.Field != "key" || !strings.Contains(r.Err.Message, "inline") {
			t.Fatalf("a third inline key past a share of 2: %+v", r)
		}
		if r := d.checkBounded(t0, b, inline(t, "a", 1))[0]; r.Err != nil || !r.Allowed {
			t.Fatalf("an existing inline key past the share: %+v", r)
		}
	}
	refused(d, f)
	if n := f.InlineBudgetRefusals(); n != 1 {
		t.Fatalf("%d inline refusals counted, want 1", n)
	}
	if eps := f.BudgetEpisodes(); len(eps) != 1 || eps[ReasonMaxInlineKeys+"\x00"] == 0 {
		t.Fatalf("episodes %v, want one of %s", eps, ReasonMaxInlineKeys)
	}
	// An overdraft charges a refused check anyway: on a new inline key it
	// would create one, so the share refuses it too.
	over := Op{Checks: []Check{{Key: "z", Spec: &spec, Cost: 9, Overdraft: true}}}
	if r := d.checkBounded(t0, b, over)[0]; r.Err == nil || r.Err.Code != CodeKeyBudgetExhausted {
		t.Fatalf("an overdraft creating an inline key past the share: %+v", r)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if r := policyKey(d, k); r.Err != nil || !r.Allowed {
			t.Fatalf("policy key %s past the inline share: %+v", k, r)
		}
	}
	if n := storedKeys(f); n != 6 {
		t.Fatalf("%d keys stored, want 6", n)
	}
	snap := takeSnapshot(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d = newDriver(t, f)
	refused(d, f)
	g := openFSM(t, "", Options{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	refused(newDriver(t, g), g)
	// Without the bound (an entry from before it) the key is created.
	if r := d.check(t0, inline(t, "c", 1))[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("no inline bound: %+v", r)
	}
	// Expiry frees room, and the episode closes under the low water.
	if n := d.apply(EncodeExpire(t0+11*sec, 100)); n != 7 {
		t.Fatalf("expired %v, want 7", n)
	}
	if r := d.checkBounded(t0+11*sec, b, inline(t, "e", 1))[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("a new inline key after expiry: %+v", r)
	}
	if eps := f.BudgetEpisodes(); len(eps) != 0 {
		t.Fatalf("episodes %v after the inline keys expired, want none", eps)
	}
}

// The model of the key count: random checks (creating, spending, refused,
// peeks), resets, expiry sweeps, restarts and snapshot restores into a new
// replica, with a key budget and the disk guard varying per entry as a
// leader's configuration and disk would, and a policy with a key budget of
// its own (max_keys). After every entry the stored count, and the count of
// the policy's keys, are exactly the live keys of the model, which is also
// what the file holds after a commit; a check is refused for the budget
// exactly when it would create a key past the entry's bounds or the policy's.
func TestKeyBudgetModel(t *testing.T) {
	dir := t.TempDir()
	run := 0
	const window = 10 * sec
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "10s"})
	type st struct{ start, count int64 }
	rapid.Check(t, func(rt *rapid.T) {
		run++
		path := filepath.Join(dir, "fsm"+time.Duration(run).String()+".db")
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
		// Policy pk's keys: a budget of its own (max_keys).
		pk := Policy{Name: "pk", Spec: spec, MaxKeys: rapid.Int64Range(1, 4).Draw(rt, "policy_max_keys")}
		if r := apply(EncodePutPolicy(pk)); r != nil {
			rt.Fatalf("put policy: %v", r)
		}
		model := map[string]st{} // the keys the store holds: "s:" inline, "p:" under pk
		policyKeys := func() (n int64) {
			for k := range model {
				if k[0] == 'p' {
					n++
				}
			}
			return n
		}
		inlineKeys := func() int64 { return int64(len(model)) - policyKeys() }
		sweep := func() {
			for k, s := range model {
				if s.start+window <= now {
					delete(model, k)
				}
			}
		}
		keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for s := 0; s < steps; s++ {
			switch rapid.IntRange(0, 9).Draw(rt, "action") {
			case 0, 1, 2, 3, 4: // a check entry of 1 to 3 ops
				now += rapid.SampledFrom([]int64{0, 0, sec, 4 * sec, 11 * sec}).Draw(rt, "advance")
				b := Bounds{MaxKeys: rapid.SampledFrom([]int64{0, 1, 2, 4, 6}).Draw(rt, "max_keys"), NoNewKeys: rapid.IntRange(0, 5).Draw(rt, "full") == 0,
					MaxInlineKeys: rapid.SampledFrom([]int64{0, 0, 1, 2, 3}).Draw(rt, "max_inline_keys")}
				n := rapid.IntRange(1, 3).Draw(rt, "ops")
				ops := make([]Op, n)
				for i := range ops {
					ck := Check{Key: rapid.SampledFrom(keys).Draw(rt, "key"), Spec: &spec, Cost: rapid.Int64Range(0, 2).Draw(rt, "cost")}
					if rapid.Bool().Draw(rt, "policy") {
						ck.Spec, ck.Policy = nil, pk.Name
					}
					ops[i] = Op{Checks: []Check{ck}}
				}
				rs := apply(EncodeCheckBounded(nil, now, 0, b, ops)).([]Result)
				for i, op := range ops {
					ck := op.Checks[0]
					mk := "s:" + ck.Key
					if ck.Policy != "" {
						mk = "p:" + ck.Key
					}
					cur, present := model[mk]
					ws := now - now%window
					cnt := int64(0)
					if present && cur.start == ws {
						cnt = cur.count
					}
					allowed := cnt+ck.Cost <= spec.Limit
					if ck.Cost == 0 {
						allowed = cnt < spec.Limit // a peek answers whether one more would pass
					}
					r := rs[i]
					create := allowed && ck.Cost > 0 && !present
					refuse := create && (b.NoNewKeys || b.MaxKeys > 0 && int64(len(model))+1 > b.MaxKeys ||
						ck.Policy != "" && policyKeys()+1 > pk.MaxKeys ||
						ck.Policy == "" && b.MaxInlineKeys > 0 && inlineKeys()+1 > b.MaxInlineKeys)
					switch {
					case refuse:
						if r.Err == nil || r.Err.Code != CodeKeyBudgetExhausted || r.Err.Field != "key" {
							rt.Fatalf("op %d (%s cost %d) with %d keys (%d of policy max %d) under %+v: %+v, want key_budget_exhausted", i, mk, ck.Cost, len(model), policyKeys(), pk.MaxKeys, b, r)
						}
						continue
					case r.Err != nil || r.Allowed != allowed:
						rt.Fatalf("op %d (%s cost %d, count %d) with %d keys (%d of policy max %d) under %+v: %+v, want allowed=%v", i, mk, ck.Cost, cnt, len(model), policyKeys(), pk.MaxKeys, b, r, allowed)
					}
					if allowed && ck.Cost > 0 {
						model[mk] = st{ws, cnt + ck.Cost}
					}
				}
				sweep() // every check entry sweeps 2×ops+16 due entries: all of these keys
			case 5: // a reset
				k := rapid.SampledFrom(keys).Draw(rt, "reset")
				c, mk := Check{Key: k, Spec: &spec}, "s:"+k
				if rapid.Bool().Draw(rt, "policy") {
					c, mk = Check{Key: k, Policy: pk.Name}, "p:"+k
				}
				if r := apply(EncodeResetKey(c)); r != nil {
					rt.Fatalf("reset: %v", r)
				}
				delete(model, mk)
			case 6: // an expiry sweep
				now += rapid.SampledFrom([]int64{0, sec, 11 * sec}).Draw(rt, "advance")
				apply(EncodeExpire(now, 1000))
				sweep()
			case 7: // a restart
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				if f, err = Open(path, opts); err != nil {
					rt.Fatal(err)
				}
			case 8: // a snapshot restored into a new replica, which goes on
				run++
				path = filepath.Join(dir, "fsm"+time.Duration(run).String()+".db")
				f = restoreInNew(rt, f, path, opts)
				next = f.AppliedIndex() + 1
			case 9: // a commit, then the file itself is counted
				f.applyMu.Lock()
				err := f.store.Commit()
				f.applyMu.Unlock()
				if err != nil {
					rt.Fatal(err)
				}
				n, err := f.store.CountStates()
				if err != nil {
					rt.Fatal(err)
				}
				if w, _, _ := f.OutboxStats(); n-w != len(model) {
					rt.Fatalf("the file holds %d key states, the model %d", n, len(model))
				}
			}
			if got := storedKeys(f); got != int64(len(model)) {
				rt.Fatalf("step %d: stored count %d, live keys %d (%v)", s, got, len(model), model)
			}
			f.applyMu.Lock()
			var got, gotInline int64
			err := f.store.Update(func(tx *persist.Tx) error {
				got, gotInline = tx.GroupKeys([]byte(pk.Name)), tx.GroupKeys([]byte(inlineGroup))
				return nil
			})
			f.applyMu.Unlock()
			if err != nil {
				rt.Fatal(err)
			}
			if want := policyKeys(); got != want {
				rt.Fatalf("step %d: policy %s counts %d keys, live %d (%v)", s, pk.Name, got, want, model)
			}
			if want := inlineKeys(); gotInline != want {
				rt.Fatalf("step %d: inline limits count %d keys, live %d (%v)", s, gotInline, want, model)
			}
		}
	})
	_ = os.RemoveAll(dir)
}

// A policy's max_keys bounds its own keys: past it a new key under the
// policy is refused, its existing keys and other limits' keys are decided,
// and the count survives a restart and a snapshot restored elsewhere.
func TestPolicyKeyBudget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, f)
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})
	d.putPolicy(Policy{Name: "anon", Spec: spec, MaxKeys: 2})
	d.putPolicy(Policy{Name: "other", Spec: spec})
	for _, k := range []string{"a", "b"} {
		if r := d.one(t0, "anon", k, 1); r.Err != nil || !r.Allowed {
			t.Fatalf("key %s within max_keys: %+v", k, r)
		}
	}
	refusedC := func(d *driver) {
		t.Helper()
		if r := d.one(t0, "anon", "c", 1); r.Err == nil || r.Err.Code != CodeKeyBudgetExhausted || r.Err.Field != "key" || !strings.Contains(r.Err.Message, `"anon"`) {
			t.Fatalf("a third key under max_keys 2: %+v", r)
		}
		if r := d.one(t0, "anon", "a", 1); r.Err != nil || !r.Allowed {
			t.Fatalf("an existing key past max_keys: %+v", r)
		}
	}
	refusedC(d)
	if r := d.one(t0, "other", "c", 1); r.Err != nil || !r.Allowed {
		t.Fatalf("another policy's new key: %+v", r)
	}
	snap := takeSnapshot(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	refusedC(newDriver(t, f))
	g := openFSM(t, "", Options{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	refusedC(newDriver(t, g))
	// A reset makes room.
	gd := newDriver(t, g)
	if r := gd.apply(EncodeResetKey(Check{Key: "b", Policy: "anon"})); r != nil {
		t.Fatalf("reset: %v", r)
	}
	if r := gd.one(t0, "anon", "c", 1); r.Err != nil || !r.Allowed {
		t.Fatalf("a new key after a reset: %+v", r)
	}
}

// grantBounded applies a grant for key under policy, stamped by the leader
// with b, as cluster's proposeLease does.
func (d *driver) grantBounded(now int64, b Bounds, key, policy string) LeaseGrant {
	d.t.Helper()
	cmd, err := StampLeaseCommandBounded(nil, EncodeGrantLease(nil, 0, "n1", []LeaseRequest{{ID: 1, Check: Check{Key: key, Policy: policy}}}), now, b)
	if err != nil {
		d.t.Fatal(err)
	}
	gs, ok := d.apply(cmd).([]LeaseGrant)
	if !ok || len(gs) != 1 {
		d.t.Fatalf("grant response %v", gs)
	}
	return gs[0]
}

// A lease grant creates the key's state when the key has none, so the
// leader's bounds and the policy's max_keys bind it as they bind a check: a
// grant that would create a key past them is refused with
// key_budget_exhausted and creates nothing, while a key that exists is
// still granted. Fails if grants are not bounded: a client could create
// keys without limit through a leased policy.
func TestLeaseGrantsAreBoundedLikeChecks(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	pol := leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1h"}, 100_000, 2*time.Second)
	pol.MaxKeys = 2
	d.putPolicy(pol)
	if g := d.grantBounded(t0, Bounds{}, "a", "q"); g.Err != nil || g.Units == 0 {
		t.Fatalf("grant on a new key within the bounds: %+v", g)
	}
	before := storedKeys(f)
	if g := d.grantBounded(t0, Bounds{MaxKeys: before}, "b", "q"); g.Err == nil || g.Err.Code != CodeKeyBudgetExhausted || g.Units != 0 {
		t.Fatalf("grant creating a key past the cluster's bound: %+v, want key_budget_exhausted", g)
	}
	if g := d.grantBounded(t0, Bounds{NoNewKeys: true}, "b", "q"); g.Err == nil || g.Err.Code != CodeKeyBudgetExhausted {
		t.Fatalf("grant creating a key while the leader's disk is short: %+v", g)
	}
	if n := storedKeys(f); n != before {
		t.Fatalf("refused grants stored %d keys, had %d", n, before)
	}
	if g := d.grantBounded(t0, Bounds{NoNewKeys: true}, "a", "q"); g.Err != nil || g.Units == 0 {
		t.Fatalf("grant on an existing key while no new keys are made: %+v", g)
	}
	if g := d.grantBounded(t0, Bounds{}, "b", "q"); g.Err != nil || g.Units == 0 {
		t.Fatalf("second key within max_keys 2: %+v", g)
	}
	if g := d.grantBounded(t0, Bounds{}, "c", "q"); g.Err == nil || g.Err.Code != CodeKeyBudgetExhausted {
		t.Fatalf("third key past the policy's max_keys 2: %+v", g)
	}
}

// storedKeys is what the key budget counts (liveKeys): the stored states
// less the outbox's events, which exhaustion episodes put there.
func storedKeys(f *FSM) int64 {
	w, _, _ := f.OutboxStats()
	return f.Stats().Keys - int64(w)
}
