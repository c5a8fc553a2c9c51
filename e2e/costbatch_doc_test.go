package e2e

import (
	"testing"
)

// TestPairBatchesDocSnippet runs docs/API.md's pair-batches snippet as
// written (only the address is replaced) against one limitd process with an
// admin token, and compares each command's output with the "# …" line under
// it: a release batch answered per item from one entry (a slot released
// twice, an item without a slot), a settle batch applying a settle once and
// replaying its repeat, and an empty batch refused naming the array.
func TestPairBatchesDocSnippet(t *testing.T) {
	runDocSnippet(t, "pair-batches", 3, nil)
}
