package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// go.mod names a language version, never a patch release or a toolchain:
// with GOTOOLCHAIN=local any toolchain of that minor version must build the
// module (a `go 1.26.3` line refuses 1.26.0-1.26.2, and a toolchain line
// downloads one). Fails if go.mod's go line names a patch above 0 or it has
// a toolchain line.
func TestGoModBuildsWithAnyPatchRelease(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "go.mod"))
	must(t, err)
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(data))
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	if !regexp.MustCompile(`^1\.\d+(\.0)?$`).MatchString(goLine[1]) {
		t.Errorf("go.mod: go %s, want go 1.N.0: a patch release refuses older toolchains of its minor version under GOTOOLCHAIN=local", goLine[1])
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "toolchain ") {
			t.Errorf("go.mod: %q: a toolchain line makes the go command fetch that toolchain", l)
		}
	}
}
