package fsm

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// TestDegradedChargeModel: degraded charges against a plain count per key.
// A charge adds its units to the key's count even past the limit (an
// overdraft), once per id however often it is applied again (a retry), and
// the checks after it are decided on the charged count; a charge under a
// policy that is gone, or whose algorithm cannot be overdrawn, charges
// nothing. Every replica applying the same entries agrees (the digest).
func TestDegradedChargeModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := int64(rapid.IntRange(1, 10).Draw(rt, "limit"))
		spec := mustSpec(t, algo.Config{Algorithm: rapid.SampledFrom([]string{"fixed_window", "sliding_window"}).Draw(rt, "algo"), Limit: limit, Window: "1h"})
		bucket := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: limit, Window: "1h"})
		f, g := openFSM(t, "", Options{}), openFSM(t, "", Options{})
		d, e := newDriver(t, f), newDriver(t, g)
		both := func(cmd []byte) { d.apply(cmd); e.apply(cmd) }
		for _, dr := range []*driver{d, e} {
			dr.putPolicy(Policy{Name: "p", Spec: spec, Options: nodeapi.LimitOptions{Degraded: nodeapi.DegradedShare}})
			dr.putPolicy(Policy{Name: "b", Spec: bucket})
		}
		count := map[string]int64{}
		seen := map[string]bool{}
		now := t0 - t0%int64(time.Hour) + int64(time.Second) // one window throughout
		for i := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			key := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "key")
			now += int64(time.Second)
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				cost := int64(rapid.IntRange(1, 3).Draw(rt, "cost"))
				r := d.one(now, "p", key, cost)
				e.one(now, "p", key, cost)
				want := count[key]+cost <= limit
				if r.Allowed != want {
					rt.Fatalf("step %d: check %s cost %d at count %d: allowed %v, want %v", i, key, cost, count[key], r.Allowed, want)
				}
				if want {
					count[key] += cost
				}
			case 1:
				id := fmt.Sprintf("n1-%d", rapid.IntRange(0, 5).Draw(rt, "id"))
				units := int64(rapid.IntRange(1, 2*int(limit)).Draw(rt, "units"))
				both(EncodeChargeDegraded(now, id, []DegradedCharge{{Policy: "p", Key: key, Units: units}, {Policy: "b", Key: key, Units: 1}, {Policy: "gone", Key: key, Units: 1}}))
				if !seen[id] {
					seen[id] = true
					count[key] += units
				}
			default:
				e.remaining(now, "p", key)
				if got, want := d.remaining(now, "p", key), max(limit-count[key], 0); got != want {
					rt.Fatalf("step %d: remaining %s = %d, want %d (count %d)", i, key, got, want, count[key])
				}
			}
		}
		if digest(t, f) != digest(t, g) {
			rt.Fatal("two replicas applying the same charges disagree")
		}
	})
}

// TestChargeDegradedRefusesDamage: an entry past the bounds is refused
// before it is proposed, and answers invalid_argument if applied anyway.
func TestChargeDegradedRefusesDamage(t *testing.T) {
	for name, cmd := range map[string][]byte{
		"no id":     EncodeChargeDegraded(t0, "", []DegradedCharge{{Policy: "p", Key: "k", Units: 1}}),
		"zero":      EncodeChargeDegraded(t0, "x", []DegradedCharge{{Policy: "p", Key: "k", Units: 0}}),
		"no key":    EncodeChargeDegraded(t0, "x", []DegradedCharge{{Policy: "p", Units: 1}}),
		"too large": EncodeChargeDegraded(t0, "x", []DegradedCharge{{Policy: "p", Key: "k", Units: algo.MaxLimit + 1}}),
	} {
		if err := ValidateCommand(cmd); err == nil {
			t.Errorf("%s: validated", name)
		}
		f := openFSM(t, "", Options{})
		if r, _ := newDriver(t, f).apply(cmd).(*Error); r == nil || r.Code != CodeInvalidArgument {
			t.Errorf("%s: applied as %v, want invalid_argument", name, r)
		}
	}
}
