package bench

import (
	"os"
	"runtime/debug"
)

// GeneratorGCPercent is the Go GC target of the load generators (limitd
// bench and scripts/redisbench alike, so both systems are driven the same
// way). A generator allocates per request but keeps little live data; a
// higher target spends memory instead of CPU that the system under test
// shares on a small machine.
const GeneratorGCPercent = 400

// TuneGC applies GeneratorGCPercent unless GOGC is set in the environment.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GeneratorGCPercent)
	}
}
