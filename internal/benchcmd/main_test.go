package benchcmd

import (
	"os"
	"testing"

	"github.com/limitd/limitd/internal/proccluster"
)

// TestMain: under -race, the nodes this test binary starts as itself (fake
// or real, see init in bench_test.go) are race-built too; they write their
// reports to files (their stderr goes to logs no test reads), and any report
// fails the run, as e2e's TestMain does for its limitd processes.
func TestMain(m *testing.M) {
	if !raceEnabled {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "benchcmd-race")
	if err != nil {
		panic(err)
	}
	races := proccluster.ChildRaces(dir)
	code := m.Run()
	if races(os.Stderr, "a node started by the bench tests") {
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
