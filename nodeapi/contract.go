package nodeapi

import (
	"time"

	"github.com/limitd/limitd/algo"
)

// The contract's value types: what a check, its answer, a policy and an
// error are, shared by the state machine that decides (fsm, which aliases
// them), the node that replicates (cluster), the service that validates and
// the front ends that render. They carry no logic beyond formatting an
// error, so that every layer can hold them without importing the one that
// produces them.

// Check is one "may Key spend Cost under this limit now?" question. The limit is
// either a named policy (Policy != ""), an inline spec (Spec != nil), or the
// key's plan (ByPlan, resolved by the state machine: plan.go), exactly one.
type Check struct {
	Key    string
	Policy string
	Spec   *algo.Spec // validated inline limit
	Cost   int64      // 0 is a peek
	ByPlan bool       // decided under every limit of the key's plan, atomically
	// Adjust makes the check an adjustment: Cost units (negative: a debit)
	// are credited to the current window of the limit named Policy in the
	// key's plan. Only the state machine resolves the plan (plan.go).
	Adjust bool
	// PlanInfo makes the check a read of Key's plan, its source, its own
	// assignment and its live override (Decision.Plan), through the log so
	// that it sees every write before it; it consumes nothing.
	PlanInfo bool
	// SlotOp, when set, makes the check a release or renewal of the slot
	// Slot held on Key under its concurrency limit (Policy or Spec); Cost
	// is then 0. An acquire is an ordinary check of cost 1 (fsm/slots.go).
	SlotOp SlotOp
	Slot   string
	// Costs known later (fsm/reserve.go). Reserve > 0 makes an allowed
	// check of Cost > 0 a reservation held that long: its decision carries
	// the Reservation, which Settle names later. Overdraft makes the charge
	// apply even past the limit (the key goes into debt). Settle names a
	// reservation of Key under this limit and settles it at Cost (the
	// actual cost). Refund names a request id whose consumption on Key
	// under this limit is credited back, up to Cost units.
	Reserve   time.Duration
	Overdraft bool
	Settle    string
	Refund    string
	// Credit gives back up to Cost units to Key's current window under this
	// limit (at most to fresh): Envoy's negative hits (service/rls.go).
	Credit bool
}

// SlotOp is what a check does with a concurrency slot it names.
type SlotOp uint8

const (
	SlotRelease SlotOp = 1 // free the slot now (idempotent)
	SlotRenew   SlotOp = 2 // extend its hold by hold, up to max_hold after its acquisition
)

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
	// LeasedElsewhere: a refusal under a policy with a lease option while
	// leases on the key were outstanding (their unspent units may come
	// back); RetryAfter is then no later than the first of them ends
	// (fsm/lease.go).
	LeasedElsewhere bool
	// Plan, for a check decided under the key's plan (Check.ByPlan), says
	// which plan and limit decided; the fields above are that limit's.
	Plan *PlanDecision
	// Reason says why a check was answered other than by its limit: a deny
	// or allow list matched (decided by the service from the replicated
	// lists, counted nowhere) or the key is banned (decided by the state
	// machine). ReasonNone for a decision of the limit itself.
	Reason Reason
	// Slot, under a concurrency limit: the slot an allowed acquire holds
	// (or a release or renewal named), and SlotHold the time until its hold
	// ends (0 once freed).
	Slot     string
	SlotHold time.Duration
	// Costs (fsm/reserve.go): the reservation an allowed reserve holds and
	// the time left on its hold; Credited, units a settle or refund gave
	// back to the key (negative: a settle's extra charge); Debt, units the
	// key owes past its limit after an overdraft or a settle's extra;
	// Rolled, a refund (or a settle's credit) that found the window the
	// units were spent in had rolled, so nothing could be given back.
	Reservation     string
	ReservationHold time.Duration
	Credited        int64
	Debt            int64
	Rolled          bool
	// Degraded: decided by this node alone, with its share of the limit,
	// because no quorum answered within the deadline (LimitOptions.Degraded;
	// service/degraded.go). The admission is charged to the replicated state
	// when the quorum returns.
	Degraded bool
}

// Reason is Decision.Reason. Its text ("allowed", "denied", "banned") is the
// API's "reason" member, so a reason is never renamed.
type Reason uint8

// Reasons.
const (
	ReasonNone    Reason = iota
	ReasonAllowed        // an allow list matched: allowed without counting
	ReasonDenied         // a deny list matched: refused without counting
	ReasonBanned         // the key is banned under the policy's on_exceed
)

// String is the reason's API text ("" for ReasonNone).
func (r Reason) String() string {
	switch r {
	case ReasonAllowed:
		return "allowed"
	case ReasonDenied:
		return "denied"
	case ReasonBanned:
		return "banned"
	}
	return ""
}

// Result is one op's answer. When Err is set nothing was consumed and
// Decisions may be empty.
type Result struct {
	Allowed   bool
	Decisions []Decision // one per check, in order
	Replayed  bool       // answered from the request_id table
	Err       *Error
}

// Code classifies an Error. The codes are part of limitd's API: HTTP sends
// them as the "code" member of error bodies and gRPC maps them to status
// codes, so a code is never renamed. They are defined in the leaf, so that
// the state machine, the service layer and every front end share one set.
type Code string

// Error codes.
const (
	CodeInvalidArgument Code = "invalid_argument"  // the request is malformed; Field names what
	CodeUnauthenticated Code = "unauthenticated"   // an admin operation without the right credentials
	CodeNotFound        Code = "not_found"         // unknown policy, route or node
	CodeConflict        Code = "conflict"          // request_id already used for a different request
	CodePayloadTooLarge Code = "payload_too_large" // the request is larger than the server accepts
	CodeUnavailable     Code = "unavailable"       // no leader, or no answer in time: nothing was counted or a retry is safe
	CodeOutcomeUnknown  Code = "outcome_unknown"   // may have been applied; retry with the same request_id
	CodeInternal        Code = "internal"          // a bug; Message says what
	// CodeKeyBudgetExhausted: a check would create a key (or an op would
	// record a new request id) beyond what the cluster holds: the key
	// budget, the request-id budget, or the leader's free-disk guard.
	// Nothing was counted; existing keys are still decided. Retrying helps
	// once keys expire.
	CodeKeyBudgetExhausted Code = "key_budget_exhausted"
	// CodeCrossSlot: an all-or-nothing request whose keys span several
	// hash slots on a cluster with data groups, where one group's log
	// decides one slot's keys; nothing was counted. Field names the first
	// check outside the first check's slot.
	CodeCrossSlot Code = "cross_slot"
)

// Error is limitd's one typed error: a per-op failure decided inside the state
// machine (for example an unknown policy), and the error every service
// operation returns. Field is the path of the offending input in the
// request's JSON form ("checks[2].limit.window"), empty when the request as a
// whole is at fault.
type Error struct {
	Code    Code
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

// Under locates e's field inside prefix ("checks[2]" + "limit" →
// "checks[2].limit") and returns e.
func (e *Error) Under(prefix string) *Error {
	switch {
	case prefix == "":
	case e.Field == "":
		e.Field = prefix
	default:
		e.Field = prefix + "." + e.Field
	}
	return e
}

// Limits on client input, enforced by the service layer before anything is
// proposed and again by the state machine on every entry. Keys and request
// ids are bounded so that a client cannot make the log, the database or the
// request table grow without bound per request; policy names appear in URLs,
// headers and metric labels. Raising a limit is safe; lowering one would make
// replicas answer an old log differently than it was answered.
const (
	MaxKeyBytes       = 1024
	MaxRequestIDBytes = 128
	MaxPolicyName     = 128
)

// Bounds on allow and deny lists, the one source for each (docs/SECURITY.md
// states them): the service refuses a list past them before proposing it,
// and the state machine refuses the entry again at apply, so no client can
// grow the replicated configuration, which every node holds in memory and
// compiles, without bound. A list's name obeys MaxPolicyName.
//
// MaxListBytes keeps a whole list in one admin command (cluster's
// MaxCommandBytes, 64 KiB, with room for the name; cluster/lists.go fails
// to compile otherwise): a PUT replaces the list atomically, in one entry.
const (
	MaxLists       = 64       // lists in the cluster
	MaxListEntries = 4096     // entries of one list
	MaxListBytes   = 60 << 10 // one list's canonical encoding
)

// List is an allow or deny list as replicated: the canonical JSON the service
// produced from a validated request (the state machine keeps it opaque, like
// an RLS domain's configuration).
type List struct {
	Name   string
	Config []byte // canonical encoding; do not modify
}

// Ban is one banned key as the replicated state holds it (fsm's ban
// records): refused under Policy until Until (leader time, Unix ns), after
// Offences offences remembered.
type Ban struct {
	Key      string
	Policy   string
	Until    int64
	Offences int
}

// Policy is a named limit, replicated through the log.
type Policy struct {
	Name   string
	Spec   algo.Spec
	Shadow bool // dry run: always allowed, refusals reported as ShadowRefused
	// NoLocalRefusals is the API's "local_refusals": false: the node's
	// over-limit cache does not keep this policy's refusals, so each of them
	// is decided through the log (linearizable, at the cost of a Raft round).
	NoLocalRefusals bool
	// Lease is the policy's lease option (the zero Lease: none). Nodes may
	// then reserve part of a key's budget and spend it from memory (fsm/lease.go).
	Lease algo.Lease
	// MaxKeys bounds the live keys under the policy (0: none): a check that
	// would create one more is refused with key_budget_exhausted (fsm/budget.go).
	MaxKeys int64
	// OnExceed is the policy's "on_exceed" option (the zero value: none): a
	// key the policy refuses is banned, refused without counting, for a
	// time that grows with each offence remembered (fsm/ban.go).
	OnExceed OnExceed
	// Options are the limit's options kept beside its spec (fsm/limitopts.go).
	Options LimitOptions
}

// OnExceed is a policy's ban option. Ban > 0 turns it on.
// Escalate is an array, not a slice, so that a Policy stays comparable.
type OnExceed struct {
	Ban time.Duration // the first offence's ban
	// Escalate[:Steps] are each further offence's ban, strictly
	// increasing and longer than Ban; the last one repeats.
	Escalate    [MaxBanSteps]time.Duration
	Steps       int
	ForgetAfter time.Duration // offences are forgotten this long after the last ban ended
}

// Bounds on an on_exceed option, the one source for each: the state
// machine refuses a policy past them at apply, the service before.
const (
	MaxBanSteps    = 16                    // Escalate's length
	MaxBanDuration = 3650 * 24 * time.Hour // any one duration (algo.MaxWindow)
	// MaxBanIndex bounds the bans a node indexes in memory (the read path
	// without a Raft round, GET /v1/bans): an attack from ever new keys
	// must not grow a node's heap without bound. Bans past it are kept and
	// enforced by the state machine all the same (their checks go through
	// the log) and are missing from the listing.
	MaxBanIndex = 1 << 18
)

// Domain is an RLS domain's replicated configuration.
type Domain struct {
	Name   string
	Config []byte // canonical configuration; do not modify
}

// LimitOptions are the options the state machine keeps beside a limit's
// spec, on a policy or on a plan's limit: what apply records or decides
// about the limit beyond its decision (each option's field says which).
// The zero value is none. LimitOptions must stay comparable (arrays, not
// slices), so that a Policy stays comparable: fsm compares policies to
// tell a change from a repeat.
type LimitOptions struct {
	// Notify are the limit's alert thresholds (the API's "notify"), in
	// parts per NotifyScale of the limit, strictly increasing in
	// (0, NotifyScale], unused entries zero at the end: crossing one in a
	// window puts one event in the outbox (fsm/notify.go).
	Notify [MaxNotify]uint16
	// Degraded is what a node does with a check it cannot get decided by a
	// quorum within the check's deadline (DegradedNone: fail, 503; policies
	// only). Tag 'd' (fsm/degraded.go, service/degraded.go).
	Degraded DegradedMode
	// History keeps each closed window's usage of a key this long after
	// the window's end (fsm/history.go); fixed_window and calendar
	// windows only, at most algo.MaxHistoryWindows windows. 0: none.
	History time.Duration
	// ReservationExpiry is what becomes of a reservation whose hold ends
	// unsettled (the API's "reservation_expiry"): ExpirySettle (the zero
	// value) keeps it charged at its estimate, ExpiryReturn credits the
	// estimate back into the window it was spent in. Tag 'r'
	// (fsm/reserve.go).
	ReservationExpiry ReservationExpiry
}

// ReservationExpiry is LimitOptions.ReservationExpiry.
type ReservationExpiry uint8

// Reservation expiry modes. Their text is the API's "reservation_expiry".
const (
	ExpirySettle ReservationExpiry = iota // "settle": charged at its estimate
	ExpiryReturn                          // "return": the estimate given back
)

// String is the mode's API text.
func (e ReservationExpiry) String() string {
	if e == ExpiryReturn {
		return "return"
	}
	return "settle"
}

// DegradedMode is LimitOptions.Degraded.
type DegradedMode uint8

// Degraded modes. Their text is the API's "degraded":{"mode":…}.
const (
	DegradedNone DegradedMode = iota
	// DegradedShare: the node decides alone with its share of the limit,
	// ceil(limit / voters) per key and window, and charges the replicated
	// state with what it admitted once a quorum answers again.
	DegradedShare
)

// Bounds on degraded charges (fsm/degraded.go): keys in one charge entry,
// and how long the state machine remembers a charge's id (a retry within it
// charges nothing twice).
const (
	MaxDegradedCharges      = 4096
	MaxDegradedChargeID     = 128
	MaxDegradedChargeBytes  = 56 << 10 // one entry's charges, encoded (an admin command)
	DegradedChargeRetention = 24 * time.Hour
)

// DegradedCharge is units a node admitted alone, in degraded mode, on Key
// under Policy: charged to the key's state as an overdraft once a quorum
// answers (fsm/degraded.go).
type DegradedCharge struct {
	Policy string
	Key    string
	Units  int64
}

// DegradedChargeResult is what the state machine made of a charge entry.
type DegradedChargeResult struct {
	Duplicate bool  // the id was charged before: nothing charged again
	Charged   int64 // units charged
	Skipped   int64 // units not charged: the policy is gone, or cannot be overdrawn
}

// IsZero reports whether no option is set.
func (o LimitOptions) IsZero() bool { return o == LimitOptions{} }
