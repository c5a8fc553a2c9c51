package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

func TestOneOffKeysExpire(t *testing.T) {
	keys := 100_000
	if testing.Short() {
		keys = 10_000
	}
	const perEntry = 1000
	minute := mustSpec(t, algo.Config{Algorithm: "sliding_window", Limit: 5, Window: "1m"})
	day := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "24h"})
	bucket := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1h"})
	d := newChecker(t, Policy{Name: "minute", Spec: minute}, Policy{Name: "day", Spec: day}, Policy{Name: "bucket", Spec: bucket})

	// Keys that must survive: one idle in a day-long window, one token
	// bucket used all along (its expiry keeps moving later).
	d.one(t0, "day", "idle", 1)
	ms := int64(time.Millisecond)
	for i := 0; i < keys; i += perEntry {
		ops := make([]Op, 0, perEntry)
		for j := i; j < i+perEntry; j++ {
			ops = append(ops, single(fmt.Sprintf("oneoff-%d", j), "minute", 1))
		}
		now := t0 + int64(i)*ms
		d.check(now, ops...)
		d.one(now, "bucket", "busy", 1)
	}
	peak, err := d.f.store.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.f.Stats().Keys; got < int64(keys) {
		t.Fatalf("Keys = %d before expiry, want ≥ %d", got, keys)
	}

	// Ten minutes later every one-off key's window has passed.
	later := t0 + 10*int64(time.Minute)
	d.one(later, "bucket", "busy", 1)
	idleBefore, busyBefore := d.one(later, "day", "idle", 0), d.one(later, "bucket", "busy", 0)
	entries := 0
	for {
		next, ok := d.f.NextExpiry()
		if !ok || next > later {
			break
		}
		if entries++; entries > keys/10_000+5 {
			t.Fatalf("expiry does not converge: %d entries, next %d", entries, next)
		}
		d.apply(EncodeExpire(later, 10_000))
	}
	if got := d.f.Stats().Keys; got != 2 {
		t.Fatalf("Keys = %d after expiry, want 2 (idle and busy)", got)
	}
	// The survivors answer exactly as before the sweep.
	if got := d.one(later, "day", "idle", 0); got.Decisions[0] != idleBefore.Decisions[0] || got.Decisions[0].Remaining != 4 {
		t.Fatalf("the idle but active key lost its state: %+v", got)
	}
	if got := d.one(later, "bucket", "busy", 0); got.Decisions[0] != busyBefore.Decisions[0] || got.Decisions[0].Remaining == 5 {
		t.Fatalf("the busy key lost its state: %+v", got)
	}
	after, err := d.f.store.Usage()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keys: live data %d B in %d pages at peak, %d B in %d pages after expiry (file %d B, %d free pages)",
		keys, peak.LiveBytes, peak.Pages, after.LiveBytes, after.Pages, after.FileBytes, after.FreePages)
	// What is left is a handful of keys and the policies: a few pages.
	if after.Pages > 16 || after.LiveBytes > 16<<10 || after.LiveBytes*50 > peak.LiveBytes {
		t.Fatalf("live data did not shrink: %+v (peak %+v)", after, peak)
	}
	// Freed pages are reused: touching as many new keys again does not
	// grow the file much beyond its peak.
	for i := 0; i < keys; i += perEntry {
		ops := make([]Op, 0, perEntry)
		for j := i; j < i+perEntry; j++ {
			ops = append(ops, single(fmt.Sprintf("second-%d", j), "minute", 1))
		}
		d.check(later+int64(i)*ms, ops...)
	}
	again, err := d.f.store.Usage()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second round: live %d B in %d pages, file %d B", again.LiveBytes, again.Pages, again.FileBytes)
	if again.FileBytes > peak.FileBytes*5/4 {
		t.Fatalf("file grew from %d to %d bytes for the same number of live keys", peak.FileBytes, again.FileBytes)
	}
}

func TestCheckEntriesSweepAsTheyGo(t *testing.T) {
	// Without any expire entry, check entries remove expired keys a few at
	// a time (2 × ops + 16 per entry), oldest first.
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1s"})
	d := newChecker(t, Policy{Name: "p", Spec: s})
	ops := make([]Op, 100)
	for i := range ops {
		ops[i] = single(fmt.Sprintf("k%d", i), "p", 1)
	}
	d.check(t0, ops...)
	if d.f.Stats().Keys != 100 {
		t.Fatal("setup")
	}
	d.one(t0+2*sec, "p", "fresh", 1) // 1 op: sweeps up to 18
	if got := d.f.Stats().Keys; got != 100-18+1 {
		t.Fatalf("Keys = %d after one single-op entry, want %d", got, 100-18+1)
	}
	for i := 0; i < 10; i++ {
		d.one(t0+2*sec, "p", "fresh", 1)
	}
	if got := d.f.Stats().Keys; got != 1 {
		t.Fatalf("Keys = %d, want only the fresh key left", got)
	}
}

// A count_refused refusal that leaves the log's bytes as they were still
// moves its expiry when the policy's window grew: the key must live until
// the new window's end, not reopen at the old one's.
func TestRefusalUnderLongerWindowMovesExpiry(t *testing.T) {
	spec := func(window string) algo.Spec {
		return mustSpec(t, algo.Config{Algorithm: "sliding_log", Limit: 2, Window: window, CountRefused: true})
	}
	d := newChecker(t, Policy{Name: "p", Spec: spec("1m")})
	for i := 0; i < 2; i++ {
		if r := d.one(t0, "p", "k", 1); !r.Allowed {
			t.Fatalf("check %d refused", i)
		}
	}
	d.putPolicy(Policy{Name: "p", Spec: spec("1h")})
	// Refused at the same instant: logged and trimmed back to the limit,
	// the log encodes to the same bytes; only the expiry is later.
	if r := d.one(t0, "p", "k", 1); r.Allowed {
		t.Fatalf("check over the limit allowed: %+v", r)
	}
	later := t0 + 2*int64(time.Minute) // past the old window, inside the new one
	d.apply(EncodeExpire(later, 1000))
	if got := d.remaining(later, "p", "k"); got != 0 {
		t.Fatalf("remaining %d two minutes into a one-hour window spent at t0: the key expired at the old window's end", got)
	}
}

// TestLongerWindowKeepsStateBeyondOldExpiry: a key spent under a policy whose
// window then grows, with no check after the change, is not removed by the
// sweep at the old window's end (it would reopen early: remaining 2 instead
// of 0 two minutes into a one-hour window), for the
// algorithms whose state records what was spent; a state that is empty under
// the new policy too is still removed. (The buckets store a theoretical
// arrival time, which a new window reinterprets: two minutes after t0 a
// 2-per-minute bucket's TAT lies in the past, so the bucket is full under the
// new rate as well, and removing it changes nothing.)
func TestLongerWindowKeepsStateBeyondOldExpiry(t *testing.T) {
	for _, alg := range []string{"sliding_log", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			spec := func(window string) algo.Spec {
				return mustSpec(t, algo.Config{Algorithm: alg, Limit: 2, Window: window})
			}
			d := newChecker(t, Policy{Name: "p", Spec: spec("1m")})
			for i := 0; i < 2; i++ {
				if r := d.one(t0, "p", "k", 1); !r.Allowed {
					t.Fatalf("check %d refused", i)
				}
			}
			d.putPolicy(Policy{Name: "p", Spec: spec("1h")})
			later := t0 + 2*int64(time.Minute) // past the old window's expiry, inside the new one
			d.apply(EncodeExpire(later, 1000))
			if got := d.remaining(later, "p", "k"); got != 0 {
				t.Fatalf("remaining %d two minutes into a one-hour window spent at t0: the sweep removed the key at the old window's end", got)
			}
			// Past the new window the state is empty under it too: removed.
			end := t0 + 2*int64(time.Hour)
			if n := d.apply(EncodeExpire(end, 1000)); n != 1 {
				t.Fatalf("sweep past the new window removed %v keys, want 1", n)
			}
		})
	}
}
