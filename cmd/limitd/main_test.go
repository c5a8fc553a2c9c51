package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The main package only dispatches (ARCHITECTURE.md): of limitd's packages
// it imports the daemon, the CLI and the bench command, nothing else; a
// feature that lands in main instead of one of them fails here. Checked on
// the non-test imports, as `go list -f '{{.Imports}}' ./cmd/limitd` shows.
func TestMainOnlyDispatches(t *testing.T) {
	// go test puts its own GOROOT/bin first in the test's PATH.
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/limitd/limitd/"
	allowed := []string{module + "internal/daemon", module + "internal/cli", module + "internal/benchcmd"}
	var ours []string
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasPrefix(imp, module) {
			ours = append(ours, imp)
			if !slices.Contains(allowed, imp) {
				t.Errorf("cmd/limitd imports %s: main only dispatches to %v; put the code in one of them", imp, allowed)
			}
		}
	}
	if len(ours) == 0 {
		t.Errorf("go list shows no import of ours in cmd/limitd:\n%s", out)
	}
}
