package client

import "time"

// Limit is a rate limit: an inline limit of a check, or the body of a policy.
// Field meanings are those of docs/API.md, "Limits".
type Limit struct {
	// Algorithm: "fixed_window", "sliding_log", "sliding_window",
	// "token_bucket" or "leaky_bucket".
	Algorithm string `json:"algorithm" yaml:"algorithm"`
	// Limit is the requests (cost units) per window; for the buckets, the rate.
	Limit int64 `json:"limit" yaml:"limit"`
	// Window is a duration string such as "500ms", "60s", "1h30m" or "7d";
	// empty for calendar windows. (A string, not a time.Duration, because the
	// server accepts and answers days.)
	Window string `json:"window,omitempty" yaml:"window,omitempty"`
	// Burst is the bucket capacity of token_bucket and leaky_bucket (0: = Limit).
	Burst int64 `json:"burst,omitempty" yaml:"burst,omitempty"`
	// CountRefused: sliding_log only, refused requests are logged too.
	CountRefused bool `json:"count_refused,omitempty" yaml:"count_refused,omitempty"`
	// Calendar: fixed_window only, "day", "week" or "month".
	Calendar string `json:"calendar,omitempty" yaml:"calendar,omitempty"`
	// Timezone: with Calendar, an IANA zone such as "Europe/Paris" (default UTC).
	Timezone string `json:"timezone,omitempty" yaml:"timezone,omitempty"`
	// Hold and MaxHold: concurrency only (Algorithm "concurrency", Limit
	// slots held at once), how long one acquire or renewal holds a slot and
	// the longest renewals may keep it (default 10 × Hold). See Acquire.
	Hold    string `json:"hold,omitempty" yaml:"hold,omitempty"`
	MaxHold string `json:"max_hold,omitempty" yaml:"max_hold,omitempty"`
}

// Policy is a named limit stored in the cluster.
type Policy struct {
	Name string `json:"name" yaml:"name"`
	Limit
	// Shadow: checks always answer allowed, reporting ShadowRefused instead.
	Shadow bool `json:"shadow" yaml:"shadow"`
	// LocalRefusals lets every node answer the policy's refusals from its
	// over-limit cache (docs/API.md, "Local refusals"). nil in a put means
	// the server's default, true; a pointer to false turns the cache off for
	// this policy. GetPolicy and ListPolicies set it.
	LocalRefusals *bool `json:"local_refusals,omitempty" yaml:"local_refusals,omitempty"`
	// Lease lets nodes reserve part of a busy key's budget and answer its
	// allowed checks from memory (docs/API.md, "Leases"); nil: no leases.
	// PutPolicy replaces the whole policy, so a put without it turns leases
	// off; GetPolicy and ListPolicies set it when the policy has one, so a
	// get-modify-put keeps it.
	Lease *Lease `json:"lease,omitempty" yaml:"lease,omitempty"`
	// MaxKeys bounds the live keys under the policy (0: no bound of its
	// own); past it a check that would create a key is refused with
	// key_budget_exhausted. GetPolicy sets it, so a get-modify-put keeps it.
	MaxKeys int64 `json:"max_keys,omitempty" yaml:"max_keys,omitempty"`
	// OnExceed bans a key the policy refuses (docs/API.md, "Bans"); nil:
	// none. Like Lease, a put without it turns it off.
	OnExceed *OnExceed `json:"on_exceed,omitempty" yaml:"on_exceed,omitempty"`
	// Notify are alert thresholds, fractions of the limit such as [0.8, 1]
	// (docs/API.md, "Alerts"); nil: none. Like Lease, a put without it
	// turns it off.
	Notify []float64 `json:"notify,omitempty" yaml:"notify,omitempty"`
	// Degraded lets a node that reaches no quorum decide alone with its
	// share ({Mode: "share"}; docs/CLUSTER.md "Degraded mode"); nil: none
	// (503). Like Lease, a put without it turns it off.
	Degraded *Degraded `json:"degraded,omitempty" yaml:"degraded,omitempty"`
	// ReservationExpiry is what becomes of a reservation whose hold ends
	// before a settle: "settle" or "" (the default: it stays charged at its
	// estimate) or "return" (its estimate is given back, in the window it
	// was spent in; docs/API.md "Costs known later"). GetPolicy sets it.
	ReservationExpiry string `json:"reservation_expiry,omitempty" yaml:"reservation_expiry,omitempty"`
}

// Degraded is a policy's degraded option; Mode "share" is the one mode.
type Degraded struct {
	Mode string `json:"mode" yaml:"mode"`
}

// OnExceed is a policy's ban option: durations such as "10m" or "7d".
type OnExceed struct {
	Ban         string   `json:"ban" yaml:"ban"`
	Escalate    []string `json:"escalate,omitempty" yaml:"escalate,omitempty"`
	ForgetAfter string   `json:"forget_after,omitempty" yaml:"forget_after,omitempty"`
}

// Lease is a policy's lease option, with the HTTP API's fields and rules.
type Lease struct {
	// Share is the part of what remains that one lease takes, 0 < Share <= 1.
	// nil is the server's default, 0.05 (a pointer, so that an explicit 0 is
	// refused rather than read as the default); GetPolicy always sets it.
	Share *float64 `json:"share,omitempty" yaml:"share,omitempty"`
	// MaxTTL bounds how long a lease may be spent: a duration string such as
	// "2s" or "500ms", at most "10m". Empty is the server's default, "2s";
	// GetPolicy always sets it.
	MaxTTL string `json:"max_ttl,omitempty" yaml:"max_ttl,omitempty"`
	// Strict is the HTTP API's "lease.strict" (docs/API.md, "Leases"); nil
	// is the server's default, and GetPolicy sets it when the server has the
	// field. A server that does not know it refuses it (400 naming
	// "lease.strict") rather than drop it.
	Strict *bool `json:"strict,omitempty" yaml:"strict,omitempty"`
}

// LocalRefusalsOn reports whether the policy's refusals may be answered from
// the over-limit cache: LocalRefusals, or true when it is nil.
func (p Policy) LocalRefusalsOn() bool { return p.LocalRefusals == nil || *p.LocalRefusals }

// Request is one check. Exactly one of Policy and Limit must be set.
type Request struct {
	Key    string // what is limited: a user id, an API key, an IP…
	Policy string // a policy name
	Limit  *Limit // or an inline limit
	// Cost is how much to spend; 0 means 1. (Peek looks without spending.)
	Cost int64
	// RequestID makes the check idempotent. Empty: the client generates one,
	// so that its own retries never count twice.
	RequestID string
}

// Decision is the answer to a check.
type Decision struct {
	Allowed   bool
	Limit     int64
	Remaining int64
	// ResetAfter: time until the key is back to its fresh state if nothing more arrives.
	ResetAfter time.Duration
	// RetryAfter: when refused, time until the same request would be allowed;
	// 0 when allowed; negative (Never) when it can never be allowed.
	RetryAfter time.Duration
	// Delay: leaky_bucket only, how long to wait before proceeding.
	Delay time.Duration
	// ShadowRefused: a shadow policy would have refused.
	ShadowRefused bool
	// Replayed: the stored decision of an earlier request with the same id.
	Replayed bool
	// Reason says why the check was answered other than by its limit:
	// "allowed" (an allow list: not counted), "denied" (a deny list: not
	// counted), "banned" (the key is banned under the policy's on_exceed);
	// "" for a decision of the limit.
	Reason string
	// Degraded: the decision was not made by a quorum: the cluster could not
	// be reached and the client's fail mode (WithFailMode) made it, or the
	// node could not reach a quorum and decided alone with its share (a
	// policy's "degraded" option).
	Degraded bool
	// Slot and SlotExpires: under a concurrency limit, the slot an allowed
	// check holds (its request id) and the time until its hold ends.
	Slot        string
	SlotExpires time.Duration
}

// Never is Decision.RetryAfter for a request that can never be allowed
// (its cost exceeds the limit or the burst).
const Never time.Duration = -1

// AllResult is the answer to CheckAll: allowed only if every check allowed,
// and then every one was consumed; otherwise nothing was.
type AllResult struct {
	Allowed  bool
	Results  []Decision // in the order of the checks
	Replayed bool
}

// BatchResult is one entry of Batch: a decision or that entry's own error.
type BatchResult struct {
	Decision Decision
	Err      error // *Error, e.g. ErrInvalidArgument with Field "checks[1].key"
}

// ClusterStatus is GET /v1/cluster: the answering node's view.
type ClusterStatus struct {
	NodeID         string   `json:"node_id"`
	State          string   `json:"state"`
	LeaderID       string   `json:"leader_id"`
	LeaderHTTPAddr string   `json:"leader_http_addr"`
	Term           uint64   `json:"term"`
	CommitIndex    uint64   `json:"commit_index"`
	AppliedIndex   uint64   `json:"applied_index"`
	Members        []Member `json:"members"`
}

// Member is one server of the cluster.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	// Health is the answering node's knowledge of the member: "healthy",
	// "unhealthy" or "unknown" (a follower about the other followers);
	// empty in the public view.
	Health  string `json:"health,omitempty"`
	Healthy bool   `json:"healthy"` // Health == "healthy"
}

// Digest is GET /v1/cluster/digest: a fingerprint of the node's replicated
// state and the applied index it describes.
type Digest struct {
	Digest       string `json:"digest"`
	AppliedIndex uint64 `json:"applied_index"`
}
