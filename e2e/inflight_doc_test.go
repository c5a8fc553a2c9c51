package e2e

import (
	"strings"
	"testing"
)

// TestInflightDocSnippet runs docs/API.md's work-in-flight snippet as
// written (only the address is replaced) against one limitd process with an
// admin token, and compares each command's output with the "# …" line under
// it, where "…" stands for a time or an index. A read sees the node's last
// commit of its state file, a few milliseconds behind the answers before it:
// a command whose output differs is run again for a few seconds (the reads
// change nothing).
func TestInflightDocSnippet(t *testing.T) {
	runDocSnippet(t, "inflight", 7, func(line string) bool { return strings.Contains(line, "/inflight") })
}
