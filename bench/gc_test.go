package bench

import (
	"runtime/debug"
	"testing"
)

// The generators' GC target applies unless GOGC is set.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	current := func() int {
		gc := debug.SetGCPercent(-1)
		debug.SetGCPercent(gc)
		return gc
	}
	t.Setenv("GOGC", "150")
	TuneGC()
	if gc := current(); gc != 100 {
		t.Fatalf("with GOGC set: GC percent %d, want it left at 100", gc)
	}
	t.Setenv("GOGC", "")
	TuneGC()
	if gc := current(); gc != GeneratorGCPercent {
		t.Fatalf("GC percent %d, want %d", gc, GeneratorGCPercent)
	}
}
