package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestReservationExpiryDocSnippet runs docs/API.md's reservation-expiry
// snippet as written (only the address is replaced) against one limitd
// process with an admin token, and compares each command's output with the
// "# …" line under it: a reservation under "return" gives its estimate back
// once its hold has ended, and a bad value is a 400 naming the field.
func TestReservationExpiryDocSnippet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	p := newProc(t, "n1", "")
	p.start("--admin-token", "doc-token")
	p.waitReady()
	snippet := strings.ReplaceAll(docSnippet(t, "reservation-expiry"), "localhost:8080", p.HTTPAddr)
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
