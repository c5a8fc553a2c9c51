package fsm

import "github.com/limitd/limitd/nodeapi"

// The contract's value types live in the leaf nodeapi, so that the service
// and the front ends share them without importing the state machine (and
// with it hashicorp/raft and bbolt). They are aliased here so that the state
// machine's code reads as before; each is the same type as nodeapi's.
type (
	Check    = nodeapi.Check
	Op       = nodeapi.Op
	Decision = nodeapi.Decision
	Result   = nodeapi.Result
	Code     = nodeapi.Code
	Error    = nodeapi.Error
	Policy   = nodeapi.Policy
)

// Error codes (nodeapi's).
const (
	CodeInvalidArgument = nodeapi.CodeInvalidArgument
	CodeUnauthenticated = nodeapi.CodeUnauthenticated
	CodeNotFound        = nodeapi.CodeNotFound
	CodeConflict        = nodeapi.CodeConflict
	CodePayloadTooLarge = nodeapi.CodePayloadTooLarge
	CodeUnavailable     = nodeapi.CodeUnavailable
	CodeOutcomeUnknown  = nodeapi.CodeOutcomeUnknown
	CodeInternal        = nodeapi.CodeInternal
)

// Limits on client input (nodeapi's), enforced again on every entry.
const (
	MaxKeyBytes       = nodeapi.MaxKeyBytes
	MaxRequestIDBytes = nodeapi.MaxRequestIDBytes
	MaxPolicyName     = nodeapi.MaxPolicyName
)

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
	// 10 and 11: CmdGrantLease, CmdReturnLease (lease.go)
	// 12 to 19: the plan commands (plan.go)
	// 30 and 31: CmdPutList, CmdDeleteList (lists.go); 32: CmdUnban (ban.go)
	// 40 to 44: the hash slot ownership commands (hashslot.go)
	// 50 and 51: CmdPutWebhook, CmdDeleteWebhook (webhooks.go); 52: CmdAckEvents (outbox.go)
)
