package daemon

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// flagTableDoc is the document whose "## Configuration" section holds the
// table of every serve flag and its default.
const flagTableDoc = "docs/OPERATIONS.md"

// describedDefaults are the rows whose default column describes the value
// instead of printing it: the text the table shows, and the flag's real
// default it stands for. A change to either side fails the test.
var describedDefaults = map[string]struct{ doc, real string }{
	"node-id":   {doc: "the --raft-addr", real: ""},
	"log-store": {doc: "wal for a new data directory", real: ""},
}

var flagNameRE = regexp.MustCompile("`--([a-z0-9-]+)`")

// docFlagRow is one flag as the table documents it.
type docFlagRow struct {
	def  string // the default column's value for this flag, backticks removed
	line int    // line of the row in the document
}

// readFlagTable parses the flag table of the Configuration section of path:
// rows "| `--a`, `--b` | A, B | meaning |", one default per flag named, in
// order (one default for all of them when the column has just one).
func readFlagTable(t *testing.T, path string) map[string]docFlagRow {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]docFlagRow{}
	inSection, inTable := false, false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = strings.TrimSpace(line) == "## Configuration"
			inTable = false
			continue
		case !inSection:
			continue
		case strings.HasPrefix(line, "| flag | default |"):
			inTable = true
			continue
		case inTable && strings.HasPrefix(line, "|---"):
			continue
		case inTable && !strings.HasPrefix(line, "|"):
			inTable = false
			continue
		case !inTable:
			continue
		}
		cells := splitRow(line)
		if len(cells) < 3 {
			t.Errorf("%s:%d: a flag row needs three columns (flag, default, meaning): %q", path, i+1, line)
			continue
		}
		var names []string
		for _, m := range flagNameRE.FindAllStringSubmatch(cells[0], -1) {
			names = append(names, m[1])
		}
		if len(names) == 0 {
			t.Errorf("%s:%d: no `--flag` in the first column: %q", path, i+1, line)
			continue
		}
		defs := []string{strings.TrimSpace(strings.ReplaceAll(cells[1], "`", ""))}
		if len(names) > 1 {
			defs = strings.Split(defs[0], ", ")
			if len(defs) == 1 {
				for len(defs) < len(names) {
					defs = append(defs, defs[0])
				}
			}
			if len(defs) != len(names) {
				t.Errorf("%s:%d: %d flags but %d defaults (write one default per flag, comma-separated, in the flags' order): %q", path, i+1, len(names), len(defs), line)
				continue
			}
		}
		for k, n := range names {
			if prev, dup := rows[n]; dup {
				t.Errorf("%s:%d: --%s has a row already at line %d", path, i+1, n, prev.line)
			}
			rows[n] = docFlagRow{def: strings.TrimSpace(defs[k]), line: i + 1}
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no flag table (a header \"| flag | default | meaning |\") under \"## Configuration\"", path)
	}
	return rows
}

// splitRow splits a markdown table row into its cells; "\|" inside a cell
// is a literal bar.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	line = strings.ReplaceAll(line, `\|`, "\x00")
	cells := strings.Split(line, "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|"))
	}
	return cells
}

// sameDefault reports whether the documented value doc is the flag's
// default, read as the flag reads its values (a duration "0" is "0s").
func sameDefault(fl *flag.Flag, doc string) bool {
	real := fl.DefValue
	if doc == real {
		return true
	}
	if g, ok := fl.Value.(flag.Getter); ok {
		if d, ok := g.Get().(time.Duration); ok {
			got, err := time.ParseDuration(doc)
			return err == nil && got == d
		}
	}
	return false
}

// TestDocsFlagTableMatchesFlags: the Configuration table of docs/OPERATIONS.md
// has one row for every flag of limitd serve, and each row's default is the
// flag's default. A failure names the row to add, fix or remove.
func TestDocsFlagTableMatchesFlags(t *testing.T) {
	path := filepath.Join("..", "..", flagTableDoc)
	rows := readFlagTable(t, path)
	fs, _ := newServeFlagSet(io.Discard)
	fs.VisitAll(func(fl *flag.Flag) {
		row, ok := rows[fl.Name]
		if !ok {
			def := fl.DefValue
			if def != "" {
				def = "`" + def + "`"
			}
			t.Errorf("%s, Configuration: --%s is missing; add the row\n\t| `--%s` | %s | %s |", flagTableDoc, fl.Name, fl.Name, def, fl.Usage)
			return
		}
		delete(rows, fl.Name)
		if d, described := describedDefaults[fl.Name]; described {
			if d.real != fl.DefValue {
				t.Errorf("--%s: its default is now %q, not %q: update describedDefaults in this test and line %d of %s", fl.Name, fl.DefValue, d.real, row.line, flagTableDoc)
			} else if strings.ReplaceAll(row.def, "`", "") != d.doc {
				t.Errorf("%s:%d: --%s's default column says %q; describedDefaults expects %q (the flag's default is %q): fix the row or the test", flagTableDoc, row.line, fl.Name, row.def, d.doc, fl.DefValue)
			}
			return
		}
		if !sameDefault(fl, row.def) {
			want := "`" + fl.DefValue + "`"
			if fl.DefValue == "" {
				want = "an empty cell"
			}
			t.Errorf("%s:%d: --%s's default column says %q, the flag's default is %q: write %s", flagTableDoc, row.line, fl.Name, row.def, fl.DefValue, want)
		}
	})
	for name, row := range rows {
		t.Errorf("%s:%d: --%s is not a flag of limitd serve: remove or rename the row", flagTableDoc, row.line, name)
	}
}

// TestReadFlagTable: the parser reads combined rows, empty defaults and
// bars escaped in cells.
func TestReadFlagTable(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "doc.md")
	doc := "# x\n\n## Configuration\n\n| flag | default | meaning |\n|---|---|---|\n" +
		"| `--a`, `--b` | 1s, `x` | two |\n| `--c` | | empty |\n| `--d` | `p\\|q` | bar |\n\nprose\n\n## Other\n\n| flag | default | meaning |\n|---|---|---|\n| `--e` | 1 | elsewhere |\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	got := readFlagTable(t, p)
	want := map[string]string{"a": "1s", "b": "x", "c": "", "d": "p|q"}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for n, w := range want {
		if got[n].def != w {
			t.Errorf("--%s: default %q, want %q", n, got[n].def, w)
		}
	}
}
