package e2e

import (
	"strings"
	"testing"
)

// TestInventoryDocSnippet runs docs/API.md's usage-inventory block as
// written (only the address replaced) against one limitd process: pages in
// key order with a prefix and a cursor, pages sorted by use, a plan
// limit's keys, and the errors each naming its parameter. A listing reads
// the node's last commit, a moment behind the checks before it: a listing
// whose output differs is run again for a few seconds.
func TestInventoryDocSnippet(t *testing.T) {
	runDocSnippet(t, "inventory", 13, func(line string) bool { return strings.Contains(line, "/v1/keys?") })
}
