package nodeapi

import "time"

// The usage inventory: the keys of one limit with what each has used, read
// from a node's applied state at one applied index without a Raft write
// (GET /v1/keys). Its bounds, defined once here.
const (
	DefaultKeysLimit = 100
	MaxKeysLimit     = 1000
)

// Orders of a keys listing (KeysQuery.Sort).
const (
	SortKey       = ""          // key byte order, stable under writes between pages
	SortUsed      = "used"      // used, greatest first, then key
	SortRemaining = "remaining" // remaining, least first, then key
	SortRefused   = "refused"   // refused, greatest first, then key
)

// KeysQuery names the keys to list: those of one policy, or of one limit of
// one plan, starting with Prefix, Limit of them after Cursor (a previous
// page's KeysPage.Cursor; "" for the first page). The service validates
// every field; the state machine answers an unknown policy, plan or plan
// limit and a cursor it cannot read.
type KeysQuery struct {
	Policy    string
	Plan      string
	PlanLimit string // the plan's limit; may be empty when the plan has one
	Prefix    string
	Sort      string
	Limit     int
	Cursor    string
}

// KeyUsage is one key's usage under the listed limit at the page's time (the
// state machine's last applied leader time, so replicas at one index agree).
type KeyUsage struct {
	Key        string
	Used       int64 // the limit's capacity (the burst for buckets) less Remaining
	Remaining  int64
	ResetAfter time.Duration
	// Refused is the key's refusals decided through the log in the
	// limit's current window, for a limit with a history option (nil
	// without; fsm/history.go). A refusal a node's over-limit cache
	// answers from memory is not among them.
	Refused *int64
}

// KeysPage is one page of a keys listing: Cursor is empty on the last page.
type KeysPage struct {
	Keys         []KeyUsage
	Cursor       string
	AppliedIndex uint64
}
