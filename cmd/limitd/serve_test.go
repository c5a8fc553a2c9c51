package main

import (
	"math"
	"runtime/debug"
	"testing"
)

// --gc-percent and --memory-limit-mib apply unless GOGC / GOMEMLIMIT are set.
func TestTuneGC(t *testing.T) {
	prevGC := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(prevGC)
		debug.SetMemoryLimit(prevLimit)
	})
	current := func() (int, int64) {
		gc := debug.SetGCPercent(-1)
		debug.SetGCPercent(gc)
		return gc, debug.SetMemoryLimit(-1) // a negative limit only reads it
	}
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}

	tuneGC(400, 512, env(nil))
	if gc, limit := current(); gc != 400 || limit != 512<<20 {
		t.Fatalf("flags: GC %d limit %d, want 400 and 512 MiB", gc, limit)
	}

	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	tuneGC(400, 512, env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}))
	if gc, limit := current(); gc != 100 || limit != math.MaxInt64 {
		t.Fatalf("with GOGC and GOMEMLIMIT set: GC %d limit %d, want both left alone", gc, limit)
	}

	tuneGC(0, 0, env(nil))
	if gc, limit := current(); gc != 100 || limit != math.MaxInt64 {
		t.Fatalf("zero flags: GC %d limit %d, want Go's defaults left alone", gc, limit)
	}
}
