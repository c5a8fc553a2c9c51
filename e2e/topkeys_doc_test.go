package e2e

import (
	"testing"
)

// TestTopKeysOfAPlanDocSnippet runs docs/API.md's top-keys-plan snippet as
// written (only the address is replaced) against one limitd process with an
// admin token, and compares each command's output with the "# …" line under
// it ("…" stands for the applied time). The sketch is updated in apply, a
// moment after the answer: a read whose output differs is run again for a
// few seconds (the reads change nothing).
func TestTopKeysOfAPlanDocSnippet(t *testing.T) {
	runDocSnippet(t, "top-keys-plan", 4, func(string) bool { return true })
}
