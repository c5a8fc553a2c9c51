package fsm

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// BenchmarkPlanCheck: the CPU of a check resolved by the key's plan (two
// limits: a token bucket and a daily calendar window) against the same two
// limits named inline in one check/all op, and against the plan with a
// history option on its daily limit (one more record written per allowed
// check), and against the plan where 1 key in 100 has an override (so
// every plan check looks one up, and those keys' checks use it). 64 ops
// per entry over 1,000 keys; cpu-ns/check is the figure.
func BenchmarkPlanCheck(b *testing.B) {
	rate := algo.Config{Algorithm: "token_bucket", Limit: 1_000_000, Window: "1s"}
	daily := algo.Config{Algorithm: "fixed_window", Limit: 1_000_000_000, Calendar: "day", Timezone: "UTC"}
	const ops, keys = 64, 1000
	run := func(b *testing.B, history time.Duration, overrideEvery int, op func(key string) Op) {
		f := openFSM(b, "", Options{NoSync: true, CommitEvery: 64})
		d := newDriver(b, f)
		p := planOf(b, "pro", map[string]algo.Config{"rate": rate, "daily": daily})
		for i := range p.Limits {
			if p.Limits[i].Name == "daily" {
				p.Limits[i].Options = nodeapi.LimitOptions{History: history}
			}
		}
		d.ok(EncodePutPlan(p))
		d.ok(EncodeSetDefaultPlan("pro"))
		batch := make([]Op, ops)
		names := make([]string, keys)
		for i := range names {
			names[i] = fmt.Sprintf("tenant:%d", i)
			if overrideEvery > 0 && i%overrideEvery == 0 {
				d.ok(EncodePutOverride(names[i], Override{Limits: []LimitOverride{{Name: "daily", Limit: 2_000_000_000}}}))
			}
		}
		now := t0
		entry := func(i int) []byte {
			for j := range batch {
				batch[j] = op(names[(i*ops+j)%keys])
			}
			now += int64(time.Millisecond)
			return EncodeCheck(nil, now, 0, batch)
		}
		for i := 0; i < 200; i++ { // warm: every key exists
			d.check(now, batch...)
			_ = entry(i)
		}
		cmds := make([][]byte, 256)
		for i := range cmds {
			cmds[i] = entry(i)
		}
		b.ReportAllocs()
		cpu0 := cpuNanos()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rs := d.apply(cmds[i%len(cmds)]).([]Result)
			if rs[0].Err != nil || !rs[0].Allowed {
				b.Fatalf("%+v", rs[0])
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ops), "ns/check")
		b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N*ops), "cpu-ns/check")
	}
	b.Run("plan", func(b *testing.B) {
		run(b, 0, 0, func(key string) Op { return Op{Checks: []Check{{Key: key, ByPlan: true, Cost: 1}}} })
	})
	b.Run("plan_overrides", func(b *testing.B) {
		run(b, 0, 100, func(key string) Op { return Op{Checks: []Check{{Key: key, ByPlan: true, Cost: 1}}} })
	})
	b.Run("inline", func(b *testing.B) {
		r, dl := mustSpec(b, rate), mustSpec(b, daily)
		run(b, 0, 0, func(key string) Op {
			return Op{All: true, Checks: []Check{{Key: key, Spec: &r, Cost: 1}, {Key: key, Spec: &dl, Cost: 1}}}
		})
	})
	b.Run("plan_history", func(b *testing.B) {
		run(b, 400*24*time.Hour, 0, func(key string) Op { return Op{Checks: []Check{{Key: key, ByPlan: true, Cost: 1}}} })
	})
}

// cpuNanos is the process's user and system CPU time so far: CPU per check
// is the figure, which other processes on the box do not inflate.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
