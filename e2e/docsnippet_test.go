package e2e

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// docStep is one command of a docs/API.md snippet and the output the "# "
// lines under it show (several lines: a multi-line output).
type docStep struct{ cmd, want string }

// docSteps splits a snippet into its commands, each ended by its "# "
// output lines.
func docSteps(snippet string) []docStep {
	var steps []docStep
	var cur, want []string
	flush := func() {
		if len(want) > 0 {
			steps = append(steps, docStep{cmd: strings.Join(cur, "\n"), want: strings.Join(want, "\n")})
			cur, want = nil, nil
		}
	}
	for _, line := range strings.Split(snippet, "\n") {
		if w, ok := strings.CutPrefix(line, "# "); ok {
			want = append(want, w)
			continue
		}
		flush()
		cur = append(cur, line)
	}
	flush()
	return steps
}

// docWant is a step's expected output as a pattern: "…" stands for a time,
// a number or an index (what differs from run to run), anything else is
// literal.
func docWant(want string) *regexp.Regexp {
	parts := strings.Split(want, "…")
	for j := range parts {
		parts[j] = regexp.QuoteMeta(parts[j])
	}
	return regexp.MustCompile("^" + strings.Join(parts, `[0-9TZ:.-]+`) + "$")
}

// shellVars is a snippet's variable assignments (T="…"), which every step
// runs first: a step that is run again repeats them, not the step's setup.
var shellVars = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S`)

// runDocSnippet runs docs/API.md's snippet name as written (only the
// address is replaced) against one limitd process with the admin token
// "doc-token" ($TOKEN and $LIMITD_ADMIN_TOKEN), and compares each
// command's output with the "# " lines under it. steps is how many
// commands with outputs the snippet has (so a block cut short fails).
// A step whose last line is a read (isRead) is answered from state a
// moment behind the writes before it (apply, the last commit): its
// earlier lines run once, then the read is run again for a few seconds
// until its output matches (reads change nothing).
func runDocSnippet(t *testing.T, name string, steps int, isRead func(line string) bool) {
	t.Helper()
	runDocSnippets(t, []docPart{{name, steps}}, isRead)
}

// docPart is one snippet of a sequence and its count of commands with
// outputs.
type docPart struct {
	name  string
	steps int
}

// runDocSnippets is runDocSnippet of several snippets run in order against
// one process, as a reader following a section's blocks would.
func runDocSnippets(t *testing.T, parts []docPart, isRead func(line string) bool) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	p := newProc(t, "n1", "")
	p.start("--admin-token", "doc-token")
	p.waitReady()
	var all []docStep
	for _, part := range parts {
		steps := docSteps(strings.ReplaceAll(docSnippet(t, part.name), "localhost:8080", p.HTTPAddr))
		if len(steps) != part.steps {
			t.Fatalf("snippet %s has %d commands with outputs, want %d", part.name, len(steps), part.steps)
		}
		all = append(all, steps...)
	}
	var vars []string
	run := func(cmd string) string {
		t.Helper()
		c := exec.Command("bash", "-c", strings.Join(append(append([]string(nil), vars...), cmd), "\n"))
		c.Env = append(c.Environ(), "TOKEN=doc-token", "LIMITD_ADMIN_TOKEN=doc-token")
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(string(out))
	}
	for _, s := range all {
		want := docWant(s.want)
		lines := strings.Split(s.cmd, "\n")
		last := lines[len(lines)-1]
		cmd := s.cmd
		if isRead != nil && isRead(last) {
			if setup := strings.Join(lines[:len(lines)-1], "\n"); strings.TrimSpace(setup) != "" {
				run(setup)
			}
			cmd = last
		}
		for _, l := range lines {
			if shellVars.MatchString(l) {
				vars = append(vars, l)
			}
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			got := run(cmd)
			if want.MatchString(got) {
				break
			}
			if cmd != last || isRead == nil || !isRead(last) || time.Now().After(deadline) {
				t.Fatalf("%s\n got %s\nwant %s", s.cmd, got, s.want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
