package overlimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A hot key over its limit under a named policy, as in an attack.
var (
	benchID  = LimitID{Policy: true, Ident: "api-per-user"}
	benchKey = []byte("user:1234567")
)

func benchCache(b *testing.B, opts Options, keys int) (*Cache, [][]byte) {
	c := New(opts)
	ks := make([][]byte, keys)
	for i := range ks {
		ks[i] = []byte(fmt.Sprintf("user:%07d", i))
		c.Observe(refusal(benchID, string(ks[i]), 1, 0, 1<<50))
	}
	return c, ks
}

func BenchmarkLookupHit(b *testing.B) {
	c, _ := benchCache(b, Options{}, 1000)
	c.Observe(refusal(benchID, string(benchKey), 1, 0, 1<<50))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok := c.Lookup(benchID, benchKey, 1, int64(i)); !ok {
			b.Fatal("miss")
		}
	}
}

func BenchmarkLookupMiss(b *testing.B) {
	c, _ := benchCache(b, Options{}, 1000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok := c.Lookup(benchID, benchKey, 1, int64(i)); ok {
			b.Fatal("hit")
		}
	}
}

// BenchmarkLookupHitParallel is the attack's shape: HTTP goroutines on every
// core hitting ten hot keys while the apply goroutine keeps observing
// refusals of other keys. One shard against the default sixteen shows what
// sharding the lock buys.
func BenchmarkLookupHitParallel(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"shards=1", Options{MaxEntries: 2 * minShardEntries}},
		{"shards=16", Options{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, ks := benchCache(b, tc.opts, 10)
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the writer, at about 10,000 decisions a second
				defer wg.Done()
				t := time.NewTicker(100 * time.Microsecond)
				defer t.Stop()
				for i := 0; !stop.Load(); i++ {
					<-t.C
					c.Observe(refusal(benchID, fmt.Sprint("other", i%100), 1, 0, 1<<50))
				}
			}()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if _, ok := c.Lookup(benchID, ks[i%len(ks)], 1, 1); !ok {
						b.Error("miss")
						return
					}
				}
			})
			b.StopTimer()
			stop.Store(true)
			wg.Wait()
		})
	}
}

// BenchmarkObserve is the apply goroutine's cost per decision: refreshing a
// cached refusal, an allowance for a key not cached (the common case), and
// inserting into a full cache (eviction).
func BenchmarkObserve(b *testing.B) {
	b.Run("refusal-refresh", func(b *testing.B) {
		c, _ := benchCache(b, Options{}, 1000)
		o := refusal(benchID, "user:0000001", 1, 0, 1<<50)
		b.ReportAllocs()
		for b.Loop() {
			c.Observe(o)
		}
	})
	b.Run("allowance-miss", func(b *testing.B) {
		c, _ := benchCache(b, Options{}, 1000)
		o := allowance(benchID, string(benchKey), 1, 0)
		b.ReportAllocs()
		for b.Loop() {
			c.Observe(o)
		}
	})
	b.Run("refusal-insert-full", func(b *testing.B) {
		c, _ := benchCache(b, Options{MaxEntries: 4096}, 4096)
		keys := make([]Observation, 8192)
		for i := range keys {
			keys[i] = refusal(benchID, fmt.Sprintf("new:%07d", i), 1, 0, 1<<50)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			c.Observe(keys[i%len(keys)])
		}
	})
}

// BenchmarkForgetLimit is a policy change on a full default cache: the scan
// holds one shard's lock at a time, so readers wait for 1/16 of it at most.
func BenchmarkForgetLimit(b *testing.B) {
	c, _ := benchCache(b, Options{}, DefaultMaxEntries)
	other := LimitID{Policy: true, Ident: "other"}
	b.ReportAllocs()
	for b.Loop() {
		c.ForgetLimit(other) // nothing to drop: the full scan every time
	}
}

// BenchmarkKeyDesign compares the two ways of keying the table without
// allocating: two seeded hashes of identity and key with a full comparison
// in the slot (what Cache does), against a map[string] looked up with the
// identity and key copied into a reused buffer. The buffer needs a lock (or
// a pool) per lookup and copies the key; the hash does neither.
func BenchmarkKeyDesign(b *testing.B) {
	b.Run("hash", func(b *testing.B) {
		c := New(Options{})
		var sink uint64
		b.ReportAllocs()
		for b.Loop() {
			sink += c.hashBytes(benchID, benchKey)
		}
		_ = sink
	})
	b.Run("map-string-buffer", func(b *testing.B) {
		m := map[string]int{benchID.Ident + "\x00" + string(benchKey): 1}
		buf := make([]byte, 0, 256)
		var sink int
		b.ReportAllocs()
		for b.Loop() {
			buf = append(append(append(buf[:0], benchID.Ident...), 0), benchKey...)
			sink += m[string(buf)]
		}
		_ = sink
	})
	b.Run("map-uint64", func(b *testing.B) {
		c := New(Options{})
		m := map[uint64]int32{c.hashBytes(benchID, benchKey): 1}
		var sink int32
		b.ReportAllocs()
		for b.Loop() {
			sink += m[c.hashBytes(benchID, benchKey)]
		}
		_ = sink
	})
}
