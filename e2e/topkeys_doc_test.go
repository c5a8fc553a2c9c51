package e2e

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTopKeysOfAPlanDocSnippet runs docs/API.md's top-keys-plan snippet as
// written (only the address is replaced) against one limitd process with an
// admin token, and compares each command's output with the "# …" line under
// it ("…" stands for the applied time). The sketch is updated in apply, a
// moment after the answer: a read whose output differs is run again for a
// few seconds (the reads change nothing).
func TestTopKeysOfAPlanDocSnippet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	p := newProc(t, "n1", "")
	p.start("--admin-token", "doc-token")
	p.waitReady()
	snippet := strings.ReplaceAll(docSnippet(t, "top-keys-plan"), "localhost:8080", p.HTTPAddr)
	var cmds, wants []string
	var cur []string
	for _, line := range strings.Split(snippet, "\n") {
		if w, ok := strings.CutPrefix(line, "# "); ok {
			cmds, wants = append(cmds, strings.Join(cur, "\n")), append(wants, w)
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	if len(cmds) != 4 {
		t.Fatalf("the snippet has %d commands with outputs, want 4", len(cmds))
	}
	setup := ""
	for i, cmd := range cmds {
		parts := strings.Split(wants[i], "…")
		for j := range parts {
			parts[j] = regexp.QuoteMeta(parts[j])
		}
		want := regexp.MustCompile("^" + strings.Join(parts, `[0-9TZ:.-]+`) + "$")
		// The first command carries the snippet's setup lines: they run
		// once, then only its read is repeated.
		lines := strings.Split(cmd, "\n")
		read := lines[len(lines)-1]
		if i == 0 {
			setup = strings.Join(lines[:len(lines)-1], "\n")
			c := exec.Command("bash", "-c", setup)
			c.Env = append(c.Environ(), "TOKEN=doc-token")
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v %s", setup, err, out)
			}
		} else if len(lines) != 1 {
			t.Fatalf("command %d has %d lines, want one read", i, len(lines))
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			c := exec.Command("bash", "-c", strings.SplitN(setup, "\n", 2)[0]+"\n"+read)
			c.Env = append(c.Environ(), "TOKEN=doc-token")
			out, err := c.Output()
			if err != nil {
				t.Fatalf("%s: %v", read, err)
			}
			got := strings.TrimSpace(string(out))
			if want.MatchString(got) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s\n got %s\nwant %s", read, got, wants[i])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
