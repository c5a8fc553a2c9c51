package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/overlimit"
)

// TestDecisionThatConsumesNothingStoresNothing: a refusal under an algorithm
// whose refusals do not change state, and a peek, leave the stored state (and
// so the digest) byte for byte as it was, even later in time, where algo
// re-encodes the state (a bucket drained to now). A count_refused refusal
// still writes: it is consumption.
func TestDecisionThatConsumesNothingStoresNothing(t *testing.T) {
	for _, c := range []algo.Config{
		{Algorithm: "token_bucket", Limit: 2, Window: "1m"},
		{Algorithm: "leaky_bucket", Limit: 2, Window: "1m"},
		{Algorithm: "sliding_window", Limit: 2, Window: "1m"},
		{Algorithm: "fixed_window", Limit: 2, Window: "1m"},
		{Algorithm: "sliding_log", Limit: 2, Window: "1m"},
	} {
		t.Run(c.Algorithm, func(t *testing.T) {
			d := newChecker(t, Policy{Name: "p", Spec: mustSpec(t, c)})
			d.one(t0, "p", "k", 1)
			d.one(t0+sec, "p", "k", 1)
			before := digestData(t, d.f)
			for i := int64(2); i < 6; i++ {
				if r := d.one(t0+i*sec, "p", "k", 1); r.Decisions[0].Allowed {
					t.Fatalf("check at +%ds allowed: %+v", i, r)
				}
				d.one(t0+i*sec, "p", "k", 0) // a peek
				// An All op refused by another check: nothing either.
				d.check(t0+i*sec, Op{All: true, Checks: []Check{{Key: "k", Policy: "p", Cost: 1}, {Key: "k", Policy: "p", Cost: 1}}})
			}
			if after := digestData(t, d.f); after != before {
				t.Fatal("refusals and peeks changed the stored state")
			}
		})
	}
	t.Run("count_refused writes", func(t *testing.T) {
		d := newChecker(t, Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "sliding_log", Limit: 1, Window: "1m", CountRefused: true})})
		d.one(t0, "p", "k", 1)
		before := digestData(t, d.f)
		if r := d.one(t0+sec, "p", "k", 1); r.Decisions[0].Allowed {
			t.Fatal("second check allowed")
		}
		if digestData(t, d.f) == before {
			t.Fatal("a count_refused refusal was not logged")
		}
	})
}

// An allowed peek (cost 0 on a key with budget left) stores nothing either:
// later in time, where algo re-encodes the state (a bucket refilled to
// now, a sliding window rolled), the stored bytes and expiry stay as the
// last consuming check left them.
func TestAllowedPeekStoresNothing(t *testing.T) {
	for _, c := range []algo.Config{
		{Algorithm: "token_bucket", Limit: 3, Window: "1m"},
		{Algorithm: "leaky_bucket", Limit: 3, Window: "1m"},
		{Algorithm: "sliding_window", Limit: 3, Window: "1m"},
		{Algorithm: "fixed_window", Limit: 3, Window: "1m"},
		{Algorithm: "sliding_log", Limit: 3, Window: "1m"},
	} {
		t.Run(c.Algorithm, func(t *testing.T) {
			d := newChecker(t, Policy{Name: "p", Spec: mustSpec(t, c)})
			d.one(t0, "p", "k", 1)
			before := digestData(t, d.f)
			// Before the key's expiry (a bucket is full again after 20 s),
			// where the sweep would delete it.
			for _, at := range []int64{t0 + sec, t0 + 5*sec, t0 + 19*sec} {
				if r := d.one(at, "p", "k", 0); !r.Allowed {
					t.Fatalf("peek at +%ds refused: %+v", (at-t0)/sec, r)
				}
				if after := digestData(t, d.f); after != before {
					t.Fatalf("an allowed peek at +%ds changed the stored state", (at-t0)/sec)
				}
			}
		})
	}
}

func digestData(t *testing.T, f *FSM) string {
	t.Helper()
	d, err := f.DataDigest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOverLimitHooks: the state machine fills the over-limit cache from the
// refusals it applies and drops entries on every write that can shorten them
// (reset, policy put and delete, restore) and when it stops (a fatal error);
// it keeps nothing for a policy with local_refusals off or in shadow mode.
func TestOverLimitHooks(t *testing.T) {
	c := overlimit.New(overlimit.Options{MaxEntries: 1024})
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"})
	d := newDriver(t, openFSM(t, "", Options{NoSync: true, OverLimit: c}))
	d.putPolicy(Policy{Name: "p", Spec: spec})
	d.putPolicy(Policy{Name: "off", Spec: spec, NoLocalRefusals: true})
	d.putPolicy(Policy{Name: "dry", Spec: spec, Shadow: true})
	pid := overlimit.LimitID{Policy: true, Ident: "p"}
	hit := func(id overlimit.LimitID, key string) bool {
		_, ok := c.LookupString(id, key, 1, t0+2*sec)
		return ok
	}
	overLimit := func(policy, key string) {
		t.Helper()
		d.one(t0, policy, key, 1)
		if r := d.one(t0+sec, policy, key, 1); r.Allowed && policy != "dry" {
			t.Fatalf("%s/%s not refused", policy, key)
		}
	}

	overLimit("p", "k")
	if !hit(pid, "k") {
		t.Fatal("a refusal was not cached")
	}
	overLimit("off", "k")
	overLimit("dry", "k")
	if hit(overlimit.LimitID{Policy: true, Ident: "off"}, "k") || hit(overlimit.LimitID{Policy: true, Ident: "dry"}, "k") {
		t.Fatal("cached a refusal of a local_refusals=false or shadow policy")
	}
	// Inline limits: the identity is the canonical spec encoding.
	d.check(t0, Op{Checks: []Check{{Key: "k", Spec: &spec, Cost: 1}}})
	d.check(t0+sec, Op{Checks: []Check{{Key: "k", Spec: &spec, Cost: 1}}})
	if !hit(overlimit.LimitID{Ident: string(algo.AppendSpec(nil, spec))}, "k") {
		t.Fatal("an inline limit's refusal was not cached")
	}

	if r := d.apply(EncodeResetKey(Check{Key: "k", Policy: "p"})); r != nil {
		t.Fatal(r)
	}
	if hit(pid, "k") {
		t.Fatal("a reset did not drop the entry")
	}
	overLimit("p", "k")
	d.putPolicy(Policy{Name: "p", Spec: spec}) // a re-put changes nothing, still drops
	if hit(pid, "k") {
		t.Fatal("a policy put did not drop the policy's entries")
	}
	if r := d.one(t0+sec, "p", "k", 1); r.Allowed {
		t.Fatal("refusal expected")
	}
	if r := d.apply(EncodeDeletePolicy("p")); r != nil {
		t.Fatal(r)
	}
	if hit(pid, "k") {
		t.Fatal("a policy delete did not drop the policy's entries")
	}

	d.putPolicy(Policy{Name: "p", Spec: spec})
	snap := takeSnapshot(t, d.f)
	overLimit("p", "k2")
	if !hit(pid, "k2") {
		t.Fatal("not cached")
	}
	if err := d.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if hit(pid, "k2") {
		t.Fatal("a restore did not clear the cache")
	}

	overLimit("p", "k3")
	d.f.testHookCommit = func() error { return errors.New("no space left on device") }
	if _, err := d.f.applyEntries(logOf(d.next, EncodeCheck(nil, t0+sec, 0, []Op{single("k3", "p", 1)}))); err == nil {
		t.Fatal("the failing commit did not fail the apply")
	}
	if c.Stats().Entries != 0 {
		t.Fatal("a failed apply did not clear the cache")
	}
}

// TestRefusedAllOpCachesOnlyCommittedRefusals: in a refused All op, a check
// decided on a key an earlier check of the op already consumed was refused
// because of consumption the op discarded; it must not become an entry.
func TestRefusedAllOpCachesOnlyCommittedRefusals(t *testing.T) {
	c := overlimit.New(overlimit.Options{MaxEntries: 1024})
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"})
	d := newDriver(t, openFSM(t, "", Options{NoSync: true, OverLimit: c}))
	d.putPolicy(Policy{Name: "p", Spec: spec})
	if r := d.check(t0, Op{All: true, Checks: []Check{{Key: "k", Policy: "p", Cost: 1}, {Key: "k", Policy: "p", Cost: 1}}})[0]; r.Allowed {
		t.Fatal("group allowed")
	}
	if _, ok := c.LookupString(overlimit.LimitID{Policy: true, Ident: "p"}, "k", 1, t0); ok {
		t.Fatal("a refusal on the op's own discarded consumption was cached")
	}
	if r := d.one(t0, "p", "k", 1); !r.Allowed {
		t.Fatal("the key was consumed by a refused group")
	}
}

func TestPolicyLocalRefusalsEncoding(t *testing.T) {
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"})
	for _, p := range []Policy{{Name: "a", Spec: s}, {Name: "b", Spec: s, NoLocalRefusals: true, Shadow: true}} {
		enc := appendPolicy(nil, p)
		got, invalid := decodePolicy(&decoder{b: enc})
		if invalid != nil || got != p {
			t.Fatalf("round trip %+v: %+v %v", p, got, invalid)
		}
	}
	// A policy with the cache on encodes as before the flag existed (flags 0).
	enc := appendPolicy(nil, Policy{Name: "a", Spec: s})
	if enc[1+1+1] != 0 {
		t.Fatalf("flags byte %#x, want 0", enc[3])
	}
}

// TestRepeatedKeyInOneOp: an op that checks the same key several times
// (decided in place after the first change) decides and stores exactly what
// the same checks as separate ops do, for every algorithm, with refusals and
// peeks between allowances.
func TestRepeatedKeyInOneOp(t *testing.T) {
	costs := []int64{1, 0, 5, 1, 2, 0, 1, 1, 1}
	for _, c := range []algo.Config{
		{Algorithm: "token_bucket", Limit: 4, Window: "1m"},
		{Algorithm: "leaky_bucket", Limit: 4, Window: "1m"},
		{Algorithm: "sliding_window", Limit: 4, Window: "1m"},
		{Algorithm: "fixed_window", Limit: 4, Window: "1m"},
		{Algorithm: "sliding_log", Limit: 4, Window: "1m"},
		{Algorithm: "sliding_log", Limit: 4, Window: "1m", CountRefused: true},
	} {
		t.Run(c.Algorithm, func(t *testing.T) {
			spec := mustSpec(t, c)
			one := newChecker(t, Policy{Name: "p", Spec: spec})
			many := newChecker(t, Policy{Name: "p", Spec: spec})
			// Some history first, so the op starts from stored state.
			one.one(t0, "p", "k", 1)
			many.one(t0, "p", "k", 1)
			op := Op{}
			var want []Decision
			for _, cost := range costs {
				op.Checks = append(op.Checks, Check{Key: "k", Policy: "p", Cost: cost})
				want = append(want, one.one(t0+sec, "p", "k", cost).Decisions[0])
			}
			got := many.check(t0+sec, op)[0].Decisions
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("check %d (cost %d): in one op %+v, separately %+v", i, costs[i], got[i], want[i])
				}
			}
			if digestData(t, one.f) != digestData(t, many.f) {
				t.Fatal("the stored states differ")
			}
		})
	}
}
