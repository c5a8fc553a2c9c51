package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPairBatchesDocSnippet runs docs/API.md's pair-batches snippet as
// written (only the address is replaced) against one limitd process with an
// admin token, and compares each command's output with the "# …" line under
// it: a release batch answered per item from one entry (a slot released
// twice, an item without a slot), a settle batch applying a settle once and
// replaying its repeat, and an empty batch refused naming the array.
func TestPairBatchesDocSnippet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	p := newProc(t, "n1", "")
	p.start("--admin-token", "doc-token")
	p.waitReady()
	snippet := strings.ReplaceAll(docSnippet(t, "pair-batches"), "localhost:8080", p.HTTPAddr)
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
	if len(cmds) != 3 {
		t.Fatalf("the snippet has %d commands with outputs, want 3", len(cmds))
	}
	for i, cmd := range cmds {
		c := exec.Command("bash", "-c", cmd)
		c.Env = append(c.Environ(), "TOKEN=doc-token")
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if got := strings.TrimSpace(string(out)); got != wants[i] {
			t.Fatalf("%s\n got %s\nwant %s", cmd, got, wants[i])
		}
	}
}
