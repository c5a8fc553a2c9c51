package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// BenchmarkCostPairs is the state machine's CPU per unit of work, in 64-op
// entries over 10,000 keys: one check, an acquire and its release (two
// entries), a reserve and its settle (two entries). The figure a client
// pays per guarded request is a pair's against one check's (docs/BENCHMARKS.md).
func BenchmarkCostPairs(b *testing.B) {
	const opsPerEntry, keys = 64, 10_000
	run := func(b *testing.B, spec algo.Config, first func(key string) Check, second func(key string, d Decision) Check) {
		f := openFSM(b, "", Options{NoSync: true, CommitEvery: 64})
		d := newDriver(b, f)
		d.putPolicy(Policy{Name: "p", Spec: mustSpec(b, spec)})
		names := make([]string, keys)
		for i := range names {
			names[i] = fmt.Sprintf("user:%d", i)
		}
		ops := make([]Op, opsPerEntry)
		for i := range ops {
			ops[i].Checks = make([]Check, 1)
		}
		now, k := t0, 0
		var buf []byte
		pair := func() {
			for i := range ops {
				ops[i].Checks[0] = first(names[(k+i)%keys])
			}
			buf = EncodeCheck(buf[:0], now, 0, ops)
			rs := d.apply(buf).([]Result)
			if second != nil {
				for i := range ops {
					if rs[i].Err != nil || !rs[i].Allowed {
						b.Fatalf("first op: %+v %v", rs[i], rs[i].Err)
					}
					ops[i].Checks[0] = second(names[(k+i)%keys], rs[i].Decisions[0])
				}
				buf = EncodeCheck(buf[:0], now, 0, ops)
				for _, r := range d.apply(buf).([]Result) {
					if r.Err != nil {
						b.Fatalf("second op: %v", r.Err)
					}
				}
			}
			k += opsPerEntry
			now += int64(time.Millisecond)
		}
		for i := 0; i < 100; i++ {
			pair()
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := processCPU()
		for i := 0; i < b.N; i++ {
			pair()
		}
		cpu := processCPU() - cpu0
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*opsPerEntry), "cpu-ns/unit")
	}
	rate := algo.Config{Algorithm: "fixed_window", Limit: 1_000_000_000, Window: "1h"}
	b.Run("check", func(b *testing.B) {
		run(b, rate, func(key string) Check { return Check{Key: key, Policy: "p", Cost: 1} }, nil)
	})
	b.Run("acquire+release", func(b *testing.B) {
		run(b, algo.Config{Algorithm: "concurrency", Limit: 8, Hold: "30s"},
			func(key string) Check { return Check{Key: key, Policy: "p", Cost: 1} },
			func(key string, d Decision) Check {
				return Check{Key: key, Policy: "p", SlotOp: SlotRelease, Slot: d.Slot}
			})
	})
	b.Run("reserve+settle", func(b *testing.B) {
		run(b, rate,
			func(key string) Check { return Check{Key: key, Policy: "p", Cost: 10, Reserve: time.Minute} },
			func(key string, d Decision) Check {
				return Check{Key: key, Policy: "p", Settle: d.Reservation, Cost: 7}
			})
	})
}
