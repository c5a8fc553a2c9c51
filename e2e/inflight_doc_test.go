package e2e

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestInflightDocSnippet runs docs/API.md's work-in-flight snippet as
// written (only the address is replaced) against one limitd process with an
// admin token, and compares each command's output with the "# …" line under
// it, where "…" stands for a time or an index. A read sees the node's last
// commit of its state file, a few milliseconds behind the answers before it:
// a command whose output differs is run again for a few seconds (the reads
// change nothing).
func TestInflightDocSnippet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	p := newProc(t, "n1", "")
	p.start("--admin-token", "doc-token")
	p.waitReady()
	snippet := strings.ReplaceAll(docSnippet(t, "inflight"), "localhost:8080", p.HTTPAddr)
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
	if len(cmds) != 7 {
		t.Fatalf("the snippet has %d commands with outputs, want 7", len(cmds))
	}
	for i, cmd := range cmds {
		parts := strings.Split(wants[i], "…")
		for j := range parts {
			parts[j] = regexp.QuoteMeta(parts[j])
		}
		want := regexp.MustCompile("^" + strings.Join(parts, `[0-9TZ:.-]+`) + "$")
		read := strings.Contains(cmd, "/inflight")
		for deadline := time.Now().Add(5 * time.Second); ; {
			c := exec.Command("bash", "-c", cmd)
			c.Env = append(c.Environ(), "TOKEN=doc-token")
			out, err := c.Output()
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			got := strings.TrimSpace(string(out))
			if want.MatchString(got) {
				break
			}
			if !read || time.Now().After(deadline) {
				t.Fatalf("%s\n got %s\nwant %s", cmd, got, wants[i])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
