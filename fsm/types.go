package fsm

import "github.com/limitd/limitd/algo"

// Check is one "may Key spend Cost under this limit now?" question. The limit is
// either a named policy (Policy != "") or an inline spec (Spec != nil), never both.
type Check struct {
	Key    string
	Policy string
	Spec   *algo.Spec // validated inline limit
	Cost   int64      // 0 is a peek
}

// Op is one client request as it travels through the log: a single check, or an
// atomic group (All) that is allowed only if every check allows, and consumes
// nothing in any of them otherwise. RequestID, when set, makes the op idempotent:
// a repeat within the retention returns the first result and consumes nothing.
type Op struct {
	Checks    []Check
	All       bool
	RequestID string
}

// Decision is one check's answer.
type Decision struct {
	algo.Decision
	ShadowRefused bool // the policy is in shadow mode and would have refused
}

// Result is one op's answer. When Err is set nothing was consumed and
// Decisions may be empty.
type Result struct {
	Allowed   bool
	Decisions []Decision // one per check, in order
	Replayed  bool       // answered from the request_id table
	Err       *Error
}

// Error is a per-op failure decided inside the state machine (for example an
// unknown policy). Code is an API error code ("not_found", "invalid_argument").
type Error struct {
	Code    string
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

// Policy is a named limit, replicated through the log.
type Policy struct {
	Name   string
	Spec   algo.Spec
	Shadow bool // dry run: always allowed, refusals reported as ShadowRefused
}

// Command type bytes: the first byte of every log entry. Never renumber; an
// entry whose type is unknown stops the node instead of letting replicas diverge.
const (
	CmdCheck        byte = 1 // leader time, retention, []Op → []Result
	CmdPutPolicy    byte = 2 // Policy → error
	CmdDeletePolicy byte = 3 // name → error (*Error not_found if absent)
	CmdResetKey     byte = 4 // Check (limit + key) → error
	CmdExpire       byte = 5 // leader time, max → number of entries removed (int)
	CmdSetNode      byte = 6 // node id, HTTP address → nil
	CmdRemoveNode   byte = 7 // node id → nil
	// 8 and 9: CmdPutDomain, CmdDeleteDomain (domain.go)
)
