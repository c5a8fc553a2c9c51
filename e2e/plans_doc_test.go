package e2e

import "testing"

// TestPlansDocSnippets runs docs/API.md's plans blocks — putting plans, the
// default plan, prefix rules, a key's plan, bulk assignment, overrides,
// adjustments and forward-auth by plan — in order against one limitd
// process, each as written (only the address replaced), comparing each
// command's output with the "# " lines under it ("…" for a time or a
// number that depends on the time of day).
func TestPlansDocSnippets(t *testing.T) {
	runDocSnippets(t, []docPart{
		{"plans-put", 3}, {"plans-default", 3}, {"plans-prefix", 3}, {"plans-key", 3},
		{"plans-bulk", 2}, {"plans-override", 4}, {"plans-adjust", 3}, {"plans-auth", 2},
	}, nil)
}
