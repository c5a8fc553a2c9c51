package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// TestGoldenLeaseEncodings pins the lease entries, a policy with a lease
// option and the lease record: entries in a log or a snapshot must decode
// the same in every later release.
func TestGoldenLeaseEncodings(t *testing.T) {
	spec, err := algo.Spec{Algorithm: algo.FixedWindow, Limit: 1000, Window: time.Hour}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_735_689_600)*int64(time.Second) + 123_456_789
	ck := Check{Key: "k", Policy: "p"}
	pol := Policy{Name: "p", Spec: spec, Lease: algo.Lease{Share: 50_000, MaxTTL: 2 * time.Second}}
	rec := []leaseEntry{{holder: []byte("n1"), id: 9, units: 50, window: now - now%int64(time.Hour), expiry: now + int64(2*time.Second)}}
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"grant lease", EncodeGrantLease(nil, now, "n1", []LeaseRequest{{ID: 1<<40 + 5, Check: ck}}),
			"0a01aab496fbd89fb49630026e310185808080802001016b017000"},
		{"return lease", EncodeReturnLease(nil, now, "n1", []LeaseReturn{{ID: 1<<40 + 5, Check: ck, Unspent: 12}}),
			"0b01aab496fbd89fb49630026e310185808080802001016b017018"},
		{"policy with lease", EncodePutPolicy(pol), "0201010170040101e80780c0e285e36800000000d0860380a8d6b907"},
		{"lease record", appendLeaseRecord(nil, rec), "0101026e3109328080b885d89fb49630aa84c3eee79fb49630"},
	} {
		if got := hex.EncodeToString(tc.got); got != tc.want {
			t.Errorf("%s = %s, want %s", tc.name, got, tc.want)
		}
	}
	var c command
	b, _ := hex.DecodeString("0201010170040101e80780c0e285e36800000000d0860380a8d6b907")
	if err := decodeCommand(&c, b); err != nil || c.policyErr != nil || !reflect.DeepEqual(c.policy, pol) {
		t.Errorf("policy with lease decodes as %+v (%v, %v)", c.policy, err, c.policyErr)
	}
	b, _ = hex.DecodeString("0101026e3109328080b885d89fb49630aa84c3eee79fb49630")
	if es, err := decodeLeaseRecord(b, nil); err != nil || !reflect.DeepEqual(es, rec) {
		t.Errorf("lease record decodes as %+v, %v", es, err)
	}
}

func leasePolicy(t *testing.T, c algo.Config, share int64, ttl time.Duration) Policy {
	return Policy{Name: "q", Spec: mustSpec(t, c), Lease: algo.Lease{Share: share, MaxTTL: ttl}}
}

func (d *driver) grant(now int64, holder string, id uint64, policy string) LeaseGrant {
	d.t.Helper()
	r := d.apply(EncodeGrantLease(nil, now, holder, []LeaseRequest{{ID: id, Check: Check{Key: "k", Policy: policy}}}))
	gs, ok := r.([]LeaseGrant)
	if !ok || len(gs) != 1 {
		d.t.Fatalf("grant response %T %v", r, r)
	}
	return gs[0]
}

func (d *driver) giveBack(now int64, holder string, id uint64, policy string, unspent int64) int64 {
	d.t.Helper()
	r := d.apply(EncodeReturnLease(nil, now, holder, []LeaseReturn{{ID: id, Check: Check{Key: "k", Policy: policy}, Unspent: unspent}}))
	ns, ok := r.([]int64)
	if !ok || len(ns) != 1 {
		d.t.Fatalf("return response %T %v", r, r)
	}
	return ns[0]
}

// TestLeasePolicyRefused: the state machine refuses a lease option where no
// sound leased form exists, naming the field, whatever the proposer checked.
func TestLeasePolicyRefused(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	l := algo.Lease{Share: 1000, MaxTTL: time.Second}
	for _, p := range []Policy{
		{Name: "log", Spec: mustSpec(t, algo.Config{Algorithm: "sliding_log", Limit: 5, Window: "1s"}), Lease: l},
		{Name: "leaky", Spec: mustSpec(t, algo.Config{Algorithm: "leaky_bucket", Limit: 5, Window: "1s"}), Lease: l},
		{Name: "shadow", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1s"}), Lease: l, Shadow: true},
	} {
		r := d.apply(EncodePutPolicy(p))
		if e, ok := r.(*Error); !ok || e.Field != "lease" {
			t.Errorf("%s with a lease: %v, want an error naming lease", p.Name, r)
		}
		if _, ok := f.Policy(p.Name); ok {
			t.Errorf("%s stored", p.Name)
		}
	}
	// A policy without the option takes no leases.
	d.putPolicy(Policy{Name: "plain", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1s"})})
	if g := d.grant(t0, "n1", 1, "plain"); g.Err == nil || g.Units != 0 {
		t.Errorf("grant under a policy without lease: %+v", g)
	}
	if g := d.grant(t0, "", 1, "plain"); g.Err == nil || g.Err.Field != "holder" {
		t.Errorf("grant without a holder: %+v", g)
	}
	if got := d.remaining(t0, "plain", "k"); got != 5 {
		t.Errorf("refused grants consumed: remaining %d", got)
	}
}

// TestLeaseTokenBucket: tokens are taken at the grant, valid for max_ttl,
// and unspent ones go back (never above burst).
func TestLeaseTokenBucket(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(leasePolicy(t, algo.Config{Algorithm: "token_bucket", Limit: 100, Window: "1s"}, 500_000, 3*time.Second))
	g := d.grant(t0, "n1", 1, "q")
	if g.Units != 50 || g.Valid != 3*time.Second || g.Remaining != 50 {
		t.Fatalf("grant %+v, want 50 units for 3s", g)
	}
	if got := d.remaining(t0, "q", "k"); got != 50 {
		t.Fatalf("remaining after the grant %d, want 50", got)
	}
	// 100 ms later 10 tokens have come back; 40 unspent go back, 100 at most.
	if n := d.giveBack(t0+100*int64(time.Millisecond), "n1", 1, "q", 40); n != 40 {
		t.Fatalf("credited %d, want 40", n)
	}
	if got := d.remaining(t0+100*int64(time.Millisecond), "q", "k"); got != 100 {
		t.Fatalf("remaining after the return %d, want 100 (burst)", got)
	}
}

// TestLeaseSlidingWindow: units count in the current window; a return in the
// next window credits nothing.
func TestLeaseSlidingWindow(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(leasePolicy(t, algo.Config{Algorithm: "sliding_window", Limit: 10, Window: "10s"}, 1_000_000, time.Minute))
	at := t0 + 4*sec
	g := d.grant(at, "n1", 1, "q")
	if g.Units != 10 || g.Valid != 6*time.Second {
		t.Fatalf("grant %+v, want 10 units until the window's end (6s)", g)
	}
	if r := d.one(at, "q", "k", 1); r.Allowed {
		t.Fatal("a check passed while the whole limit is leased")
	}
	if n := d.giveBack(at+7*sec, "n1", 1, "q", 10); n != 0 {
		t.Fatalf("a return in the next window credited %d", n)
	}
	g = d.grant(at+7*sec, "n1", 2, "q")
	if g.Units == 0 || g.Window != t0+10*sec {
		t.Fatalf("second grant %+v", g)
	}
	if n := d.giveBack(at+8*sec, "n1", 2, "q", g.Units); n != g.Units {
		t.Fatalf("a return in the same window credited %d of %d", n, g.Units)
	}
}

// TestLeaseRecordExpires: a key's lease record goes at the end of its last
// lease's grace (LeaseReturnGrace), so leases leave nothing behind on disk.
func TestLeaseRecordExpires(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "10s"}, 100_000, time.Second))
	if g := d.grant(t0, "n1", 1, "q"); g.Units != 1 {
		t.Fatalf("grant %+v", g)
	}
	if n := f.Stats().Keys; n != 3 {
		t.Fatalf("%d keys after a grant, want 3 (state, lease record, the policy's lease fence: leasefence.go)", n)
	}
	d.apply(EncodeExpire(t0+11*sec, 100))
	if n := f.Stats().Keys; n != 1 {
		t.Fatalf("%d keys after the state expired, want 1 (the lease record, in its grace)", n)
	}
	d.apply(EncodeExpire(t0+sec+int64(LeaseReturnGrace), 100))
	if n := f.Stats().Keys; n != 0 {
		t.Fatalf("%d keys after both expired, want 0", n)
	}
}

// TestLeasesPerKeyBounded: beyond MaxLeasesPerKey outstanding leases a key
// grants nothing more (and consumes nothing) until one ends.
func TestLeasesPerKeyBounded(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	d.putPolicy(leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 1_000_000, Window: "1h"}, 1, time.Second))
	for i := 0; i < MaxLeasesPerKey; i++ {
		if g := d.grant(t0, "n1", uint64(i), "q"); g.Units != 1 {
			t.Fatalf("grant %d: %+v", i, g)
		}
	}
	g := d.grant(t0, "n1", 1000, "q")
	if g.Units != 0 || g.RetryAfter != time.Second {
		t.Fatalf("grant beyond the bound: %+v", g)
	}
	if got := d.remaining(t0, "q", "k"); got != 1_000_000-MaxLeasesPerKey {
		t.Fatalf("remaining %d", got)
	}
}

// TestStampLeaseCommand: the leader re-stamps a follower's lease entry with
// its own time and changes nothing else; anything but a well-formed lease
// entry with a holder is refused.
func TestStampLeaseCommand(t *testing.T) {
	reqs := []LeaseRequest{{ID: 3, Check: Check{Key: "k", Policy: "q"}}}
	got, err := StampLeaseCommand(nil, EncodeGrantLease(nil, 5, "n2", reqs), t0)
	if err != nil || !bytes.Equal(got, EncodeGrantLease(nil, t0, "n2", reqs)) {
		t.Fatalf("stamped %x, %v", got, err)
	}
	rets := []LeaseReturn{{ID: 3, Check: Check{Key: "k", Policy: "q"}, Unspent: 4}}
	got, err = StampLeaseCommand(nil, EncodeReturnLease(nil, -1, "n2", rets), t0)
	if err != nil || !bytes.Equal(got, EncodeReturnLease(nil, t0, "n2", rets)) {
		t.Fatalf("stamped %x, %v", got, err)
	}
	for name, cmd := range map[string][]byte{
		"a check":   EncodeCheck(nil, 5, 0, []Op{single("k", "q", 1)}),
		"no holder": EncodeGrantLease(nil, 5, "", reqs),
		"truncated": EncodeGrantLease(nil, 5, "n2", reqs)[:8],
	} {
		if _, err := StampLeaseCommand(nil, cmd, t0); !errors.Is(err, ErrBadCommand) && !errors.Is(err, ErrUnknownCommand) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}

// TestLeasePolicyOutOfRange: a policy entry whose lease fields are out of
// range is answered with an error naming lease, and the node goes on.
func TestLeasePolicyOutOfRange(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, f)
	p := leasePolicy(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1s"}, 1, time.Second)
	p.Lease.Share = algo.LeaseShareScale + 1
	if e, ok := d.apply(EncodePutPolicy(p)).(*Error); !ok || e.Field != "lease" {
		t.Fatalf("share above 1: %v", e)
	}
	if err := ValidateCommand(EncodePutPolicy(p)); err == nil {
		t.Fatal("proposable")
	}
}

// TestLeaseStrictEncoding: "strict": false travels in the policy's flags
// (the default, strict, encodes as before the field existed), decodes back,
// is what a snapshot's policy bucket holds, and the flag without a lease
// option is damaged input.
func TestLeaseStrictEncoding(t *testing.T) {
	spec, err := algo.Spec{Algorithm: algo.FixedWindow, Limit: 1000, Window: time.Hour}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	pol := Policy{Name: "p", Spec: spec, Lease: algo.Lease{Share: 50_000, MaxTTL: 2 * time.Second, NoStrict: true}}
	const golden = "02010101700c0101e80780c0e285e36800000000d0860380a8d6b907"
	if got := hex.EncodeToString(EncodePutPolicy(pol)); got != golden {
		t.Fatalf("policy with strict false = %s, want %s", got, golden)
	}
	var c command
	b, _ := hex.DecodeString(golden)
	if err := decodeCommand(&c, b); err != nil || c.policyErr != nil || !reflect.DeepEqual(c.policy, pol) {
		t.Fatalf("decodes as %+v (%v, %v)", c.policy, err, c.policyErr)
	}
	b[5] = 8 // the strict-off flag alone
	if err := decodeCommand(&c, b); err == nil {
		t.Fatal("strict off without a lease option decoded")
	}
	// Through apply (the policies bucket, which snapshots copy).
	f := openFSM(t, "", Options{NoSync: true})
	if r := newDriver(t, f).apply(EncodePutPolicy(pol)); r != nil {
		t.Fatalf("put: %v", r)
	}
	if got, ok := f.Policy("p"); !ok || !reflect.DeepEqual(got, pol) {
		t.Fatalf("applied policy %+v", got)
	}
}
