package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/SECURITY.md's threat table says, per threat, the test that proves
// limitd holds against it. Every row but the CA key holder's (nothing holds
// against the CA key) names at least one test, every test it names exists,
// and each security finding that was fixed keeps its row naming the test
// that reproduces its break (the key flood on a small disk, the duplicated
// Raft sender for every RPC type, the cross-site join, the repeated
// forward-auth key, the private data directory). Fails if a row names no
// test, a renamed or deleted test, or if a finding's test leaves the table.
func TestSecurityThreatRowsNameTheirTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "SECURITY.md"))
	must(t, err)
	_, table, ok := strings.Cut(string(doc), "\n| who | reaches | can | cannot (and the test that proves it) |\n|---|---|---|---|\n")
	if !ok {
		t.Fatal("docs/SECURITY.md has no threat table (| who | reaches | can | cannot (and the test that proves it) |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	tests := existingTests(t)
	name := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`")
	cited := map[string]bool{}
	rows := 0
	for _, row := range strings.Split(table, "\n") {
		if !strings.HasPrefix(row, "|") {
			continue
		}
		rows++
		cells := strings.Split(row, "|")
		cannot := cells[len(cells)-2]
		names := name.FindAllStringSubmatch(cannot, -1)
		if len(names) == 0 && !strings.Contains(row, "a CA key holder") {
			t.Errorf("threat row names no test: %s", row)
		}
		for _, m := range names {
			cited[m[1]] = true
			if !tests[m[1]] {
				t.Errorf("threat row names %s, which no _test.go file defines: %s", m[1], row)
			}
		}
	}
	if rows < 8 {
		t.Fatalf("%d threat rows read: the table's layout changed", rows)
	}
	for _, f := range []string{
		"TestProcessKeyFloodSmallDisk",       // anyone can fill every node's disk
		"TestRaftGuardRefusesHeaderBypasses", // a duplicated sender in a Raft header
		"FuzzRaftGuardMatchesRaftDecoder",    // the guard and raft's decoder agree
		"TestBrowsersCannotActOnANode",       // a web page can brick a default node
		"TestAuthRepeatedKeyIsRefused",       // forward-auth counts another key
		"TestProcessDataDirIsPrivate",        // data readable by other local users
	} {
		if !cited[f] {
			t.Errorf("the threat table does not name %s, the test of a security finding", f)
		}
	}
}

// existingTests are the Test and Fuzz functions the repository's test files
// define.
func existingTests(t *testing.T) map[string]bool {
	t.Helper()
	def := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	found := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllStringSubmatch(string(src), -1) {
			found[m[1]] = true
		}
		return nil
	})
	must(t, err)
	return found
}
