package testtool

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// The chaos tests' knobs, which scripts/chaos.sh sets for its long runs:
// LIMITD_CHAOS_ROUNDS, the rounds per test, and LIMITD_CHAOS_SEED, the seed
// of the fault and client choices. A value that does not parse fails the
// test rather than silently running the default.

// ChaosRounds is LIMITD_CHAOS_ROUNDS, or def when it is unset.
func ChaosRounds(t testing.TB, def int) int {
	t.Helper()
	v := os.Getenv("LIMITD_CHAOS_ROUNDS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("LIMITD_CHAOS_ROUNDS=%q: want a positive integer", v)
	}
	return n
}

// ChaosSeed is LIMITD_CHAOS_SEED, or a seed from the clock when it is
// unset; it is logged either way, so that a failure can be repeated.
func ChaosSeed(t testing.TB) int64 {
	t.Helper()
	seed := time.Now().UnixNano()
	if v := os.Getenv("LIMITD_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("LIMITD_CHAOS_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (LIMITD_CHAOS_SEED=%d repeats the fault and client choices; timing still varies)", seed, seed)
	return seed
}
