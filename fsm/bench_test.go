package fsm

import (
	"fmt"
	"math/rand"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/overlimit"
)

// benchLoad applies CmdCheck entries of opsPerEntry single-check ops on
// random keys of one policy, one entry per ApplyBatch (one bbolt transaction
// each unless Options.CommitEvery shares them), advancing the leader time by
// step per check.
type benchLoad struct {
	f           *FSM
	keys        []string
	opsPerEntry int
	step        int64
	rng         *rand.Rand
	now         int64
	index       uint64
	ops         []Op
	buf         []byte
	allowed     int
}

func newBenchLoad(b *testing.B, spec algo.Spec, keys, opsPerEntry int, step int64) *benchLoad {
	return newBenchLoadOpts(b, Options{NoSync: true}, spec, keys, opsPerEntry, step)
}

func newBenchLoadOpts(b *testing.B, opts Options, spec algo.Spec, keys, opsPerEntry int, step int64) *benchLoad {
	f := openFSM(b, "", opts)
	l := &benchLoad{f: f, opsPerEntry: opsPerEntry, step: step, rng: rand.New(rand.NewSource(1)), now: t0}
	for i := 0; i < keys; i++ {
		l.keys = append(l.keys, fmt.Sprintf("user:%d", i))
	}
	l.ops = make([]Op, opsPerEntry)
	for i := range l.ops {
		l.ops[i].Checks = make([]Check, 1)
	}
	l.apply(EncodePutPolicy(Policy{Name: "p", Spec: spec}))
	return l
}

func (l *benchLoad) apply(cmd []byte) interface{} {
	l.index++
	return l.f.ApplyBatch([]*raft.Log{{Index: l.index, Type: raft.LogCommand, Data: cmd}})[0]
}

func (l *benchLoad) entry(tb testing.TB) {
	for i := range l.ops {
		l.ops[i].Checks[0] = Check{Key: l.keys[l.rng.Intn(len(l.keys))], Policy: "p", Cost: 1}
	}
	l.buf = EncodeCheck(l.buf[:0], l.now, 0, l.ops)
	rs, ok := l.apply(l.buf).([]Result)
	if !ok || rs[0].Err != nil {
		tb.Fatalf("entry failed: %v", rs)
	}
	for i := range rs {
		if rs[i].Allowed {
			l.allowed++
		}
	}
	l.now += l.step * int64(len(l.ops))
}

func (l *benchLoad) run(b *testing.B, warmEntries int) {
	for i := 0; i < warmEntries; i++ {
		l.entry(b)
	}
	l.allowed = 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		l.entry(b)
	}
	cpu := processCPU() - cpu0
	b.StopTimer()
	checks := float64(b.N * l.opsPerEntry)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/checks, "ns/check")
	// CPU time of the whole process (GC included) per check: unlike the
	// elapsed time it does not move when other processes share the cores.
	b.ReportMetric(float64(cpu.Nanoseconds())/checks, "cpu-ns/check")
	b.ReportMetric(float64(l.allowed)/checks, "allowed/check")
	b.ReportMetric(float64(l.f.Stats().Keys), "keys")
}

// BenchmarkApplyBatch: 256-op entries over 100,000 uniform keys, the shape the
// group-commit batcher produces under load.
func BenchmarkApplyBatch(b *testing.B) {
	for _, c := range []algo.Config{
		{Algorithm: "sliding_window", Limit: 100, Window: "1m"},
		{Algorithm: "token_bucket", Limit: 100, Window: "1m"},
		{Algorithm: "sliding_log", Limit: 100, Window: "1m"},
	} {
		b.Run(c.Algorithm, func(b *testing.B) {
			// 100k keys at 200k checks/s: every key is touched about once
			// per warm-up entry set, so the database holds ~100k keys.
			l := newBenchLoad(b, mustSpec(b, c), 100_000, 256, int64(5*time.Microsecond))
			l.run(b, 1000)
		})
	}
	// The same with an fsync per transaction: what NoSync saves.
	b.Run("sliding_window_fsync", func(b *testing.B) {
		spec := mustSpec(b, algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1m"})
		l := newBenchLoadOpts(b, Options{}, spec, 100_000, 256, int64(5*time.Microsecond))
		l.run(b, 1000)
	})
	// Keys that expire between their checks (each key comes back every
	// 0.5 s, its 100 ms window has long reset): every check creates a state
	// and an index entry, and the sweep removes an old pair. This is what
	// scripts/bench.sh's workload does to the state machine.
	b.Run("sliding_window_expiring", func(b *testing.B) {
		spec := mustSpec(b, algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "100ms"})
		l := newBenchLoad(b, spec, 100_000, 256, int64(5*time.Microsecond))
		l.run(b, 1000)
	})
	// Small entries, the shape single checks from 64 clients give a 3-node
	// cluster: each committed, or 64 sharing a commit as the daemon's
	// CommitEvery and flush timer make them (see DESIGN.md, shared commits).
	// Hot keys: 1,000 keys, so every key is checked many times between two
	// commits (zipf-like traffic): the state cache writes each once.
	b.Run("sliding_window_1000keys_16ops_commit64", func(b *testing.B) {
		spec := mustSpec(b, algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1m"})
		l := newBenchLoadOpts(b, Options{NoSync: true, CommitEvery: 64}, spec, 1000, 16, int64(5*time.Microsecond))
		l.run(b, 16000)
	})
	// 1024: what a longer flush interval gives now that applies between
	// commits touch only the state cache.
	for _, every := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("sliding_window_16ops_commit%d", every), func(b *testing.B) {
			spec := mustSpec(b, algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1m"})
			l := newBenchLoadOpts(b, Options{NoSync: true, CommitEvery: every}, spec, 100_000, 16, int64(5*time.Microsecond))
			l.run(b, 16000)
		})
	}
}

// BenchmarkSlidingLogLimit: the same traffic (10 keys, 1,000 checks/s each)
// against a sliding log of limit 10 and of limit 10,000 per 10 s. At 10,000
// each key's log holds ~10,000 entries; the per-check cost must not grow
// with it (no decoding of the whole log per check).
func BenchmarkSlidingLogLimit(b *testing.B) {
	for _, limit := range []int64{10, 10_000} {
		b.Run(fmt.Sprintf("limit%d", limit), func(b *testing.B) {
			spec := mustSpec(b, algo.Config{Algorithm: "sliding_log", Limit: limit, Window: "10s"})
			l := newBenchLoad(b, spec, 10, 256, int64(100*time.Microsecond))
			// Warm up for more than a window so the logs are full.
			l.run(b, 500)
		})
	}
}

// BenchmarkApplyAttack: 256-op entries on 10 hot keys far over a token
// bucket's limit (almost every check refused), the state machine's side of
// an attack that gets past the over-limit caches (or of a node without
// them). A refusal stores nothing, so these entries write almost no state;
// "cache" adds the over-limit cache's Observe per check.
func BenchmarkApplyAttack(b *testing.B) {
	spec := mustSpec(b, algo.Config{Algorithm: "token_bucket", Limit: 100, Window: "1m"})
	for _, cached := range []bool{false, true} {
		name := "nocache"
		opts := Options{NoSync: true, CommitEvery: 64}
		if cached {
			name = "cache"
			opts.OverLimit = overlimit.New(overlimit.Options{})
		}
		b.Run(name, func(b *testing.B) {
			l := newBenchLoadOpts(b, opts, spec, 10, 256, int64(5*time.Microsecond))
			l.run(b, 100)
		})
	}
}

// BenchmarkRepeatedKeyOp: ops that check one key 64 times (a client
// spending several units of one quota in one request, as RLS descriptors and
// non-atomic multi-check ops can), on a sliding log of limit 10,000 per 10 s
// that holds thousands of entries. After the first check the op owns its copy
// of the log and decides in place (algo.DecideInPlace): no copy of the log
// per check.
func BenchmarkRepeatedKeyOp(b *testing.B) {
	spec := mustSpec(b, algo.Config{Algorithm: "sliding_log", Limit: 10_000, Window: "10s"})
	f := openFSM(b, "", Options{NoSync: true, CommitEvery: 64})
	d := newDriver(b, f)
	d.putPolicy(Policy{Name: "p", Spec: spec})
	op := Op{Checks: make([]Check, 64)}
	for i := range op.Checks {
		op.Checks[i] = Check{Key: "k", Policy: "p", Cost: 1}
	}
	now := t0
	var buf []byte
	entry := func() {
		buf = EncodeCheck(buf[:0], now, 0, []Op{op})
		d.apply(buf)
		now += int64(64 * time.Millisecond) // 1,000 checks/s: the log holds ~10,000
	}
	for i := 0; i < 200; i++ {
		entry()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		entry()
	}
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*len(op.Checks)), "cpu-ns/check")
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
