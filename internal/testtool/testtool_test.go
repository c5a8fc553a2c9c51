package testtool

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how the test would end instead of
// ending it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skip(args ...any)               { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

const absent = "limitd-testtool-no-such-tool"

func TestMissingToolSkipsLocallyAndFailsInCI(t *testing.T) {
	for _, c := range []struct {
		ci   string
		fail bool
	}{
		{"", false}, {"false", false}, {"0", false},
		{"true", true}, {"1", true}, {"yes", true},
	} {
		t.Setenv("CI", c.ci)
		r := &recorder{}
		if p := Path(r, absent, "apt-get install nothing"); p != "" {
			t.Fatalf("CI=%q: path %q for a missing tool", c.ci, p)
		}
		if got := r.failed != ""; got != c.fail {
			t.Errorf("CI=%q: failed=%v (skip %q), want failed=%v", c.ci, got, r.skipped, c.fail)
		}
		if !c.fail && !strings.Contains(r.skipped, absent) {
			t.Errorf("CI=%q: skip message %q does not name the tool", c.ci, r.skipped)
		}
	}
}

func TestPresentToolIsFound(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{}
	if p := Path(r, "go", "the Go toolchain"); p == "" || r.failed != "" || r.skipped != "" {
		t.Fatalf("Path(go) = %q (failed %q, skipped %q)", p, r.failed, r.skipped)
	}
}

func TestChaosKnobs(t *testing.T) {
	t.Setenv("LIMITD_CHAOS_ROUNDS", "")
	t.Setenv("LIMITD_CHAOS_SEED", "")
	if n := ChaosRounds(t, 3); n != 3 {
		t.Errorf("unset rounds = %d, want the default 3", n)
	}
	t.Setenv("LIMITD_CHAOS_ROUNDS", "7")
	t.Setenv("LIMITD_CHAOS_SEED", "42")
	if n, s := ChaosRounds(t, 3), ChaosSeed(t); n != 7 || s != 42 {
		t.Errorf("rounds, seed = %d, %d; want 7, 42", n, s)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		t.Setenv("LIMITD_CHAOS_ROUNDS", bad)
		r := &recorder{TB: t}
		ChaosRounds(r, 3)
		if r.failed == "" {
			t.Errorf("LIMITD_CHAOS_ROUNDS=%q accepted", bad)
		}
	}
}
