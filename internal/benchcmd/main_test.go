package benchcmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain: under -race, the nodes this test binary starts as itself (fake
// or real, see init in bench_test.go) are race-built too; they write their
// reports to files (their stderr goes to logs no test reads), and any report
// fails the run, as cmd/limitd's TestMain does for its limitd processes.
func TestMain(m *testing.M) {
	if !raceEnabled {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "benchcmd-race")
	if err != nil {
		panic(err)
	}
	raceLog := filepath.Join(dir, "race")
	// Read by the children at their start; this process's own setting was
	// read at its start, so its reports still go to stderr.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" log_path="+raceLog))
	code := m.Run()
	if reports, _ := filepath.Glob(raceLog + ".*"); len(reports) > 0 {
		for _, r := range reports {
			b, _ := os.ReadFile(r)
			fmt.Fprintf(os.Stderr, "a node started by the bench tests reported a data race (%s):\n%s\n", r, b)
		}
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
