package fsm

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"

	"github.com/limitd/limitd/algo"
)

// TestBytesPerKey measures what a key costs: the state file's size and live
// bytes, and the heap, after N new keys of 20 bytes under an inline
// fixed-window limit (the anonymous flood's shape), written through the
// daemon's options (shared commits, a commit every 2,048 keys as its flush
// timer makes at 20,000 new keys a second, the default state cache). It prints the
// figures that docs/SECURITY.md and docs/OPERATIONS.md size the key budget
// with; LIMITD_KEYSIZE_N sets N (default 20,000 in -short, 200,000 otherwise).
func TestBytesPerKey(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	if v := os.Getenv("LIMITD_KEYSIZE_N"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	f := openFSM(t, "", Options{NoSync: true, CommitEvery: 1000})
	d := newDriver(t, f)
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ops := make([]Op, 256)
	for i := 0; i < n; i += len(ops) {
		for j := range ops {
			ops[j] = Op{Checks: []Check{{Key: fmt.Sprintf("flood-%014d", i+j), Spec: &spec, Cost: 1}}}
		}
		d.check(t0, ops...)
		if (i/len(ops))%8 == 7 {
			// The daemon's flush timer (100 ms): at 20,000 new keys a
			// second, about 2,000 keys a commit.
			if err := f.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	waitCommit(t, f)
	// One more entry drops the committed generation, and a commit evicts
	// the state cache down to its bound: the heap then holds what stays.
	d.check(t0, Op{Checks: []Check{{Key: "flood-last", Spec: &spec, Cost: 1}}})
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	waitCommit(t, f)
	d.check(t0, Op{Checks: []Check{{Key: "flood-last", Spec: &spec, Cost: 1}}})
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if p := os.Getenv("LIMITD_KEYSIZE_HEAP"); p != "" { // a heap profile of what stays
		if w, err := os.Create(p); err == nil {
			_ = pprof.WriteHeapProfile(w)
			w.Close()
		}
	}
	u, err := f.Usage()
	if err != nil {
		t.Fatal(err)
	}
	keys := f.Stats().Keys
	if keys < int64(n) {
		t.Fatalf("%d keys stored, want %d", keys, n)
	}
	heap := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d keys: file %d bytes (%.0f B/key), live %d bytes (%.0f B/key), heap +%d bytes (%.0f B/key, state cache bound %d keys)",
		keys, u.FileBytes, float64(u.FileBytes)/float64(keys), u.LiveBytes, float64(u.LiveBytes)/float64(keys), heap, float64(heap)/float64(keys), f.opts.CacheKeys)
}
