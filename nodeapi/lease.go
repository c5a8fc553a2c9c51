package nodeapi

import "time"

// The quota lease contract between the node that holds leases (service's
// lease table) and the one that grants them (cluster, through the state
// machine's CmdGrantLease and CmdReturnLease; fsm/lease.go says what keeps
// them exact).

// Bounds on lease commands.
const (
	// MaxLeasesPerKey bounds the leases outstanding on one key (a few per
	// node: the current lease and its refill).
	MaxLeasesPerKey = 64
	// MaxLeaseOps bounds the requests of one lease command.
	MaxLeaseOps = 1024
)

// LeaseReturnGrace is how long after a lease's expiry (leader time) its
// return is still credited. A holder whose return fails retries it until
// this long after the lease's deadline (service/lease.go): a leader's death
// makes returns fail until a new leader is elected (1–2.5 s, plus rounds of
// leaseRequestTimeout), and with a short max_ttl the leases have expired by
// then; without the grace their unspent units stayed consumed for the rest
// of the window (a whole day for a daily quota). Longer costs only record
// space (fsm's record bound). The one source of the value: it is part
// of the replicated rules, so every replica must agree on it.
const LeaseReturnGrace = 30 * time.Second

// LeaseRequest asks for a lease on Check's key under its policy (Cost is
// ignored). ID is the holder's name for the lease, unique among its leases
// (a random number): a return names it, and a repeated request with the same
// ID is answered with the same grant.
type LeaseRequest struct {
	ID    uint64
	Check Check
}

// LeaseGrant answers one LeaseRequest. With Units 0 nothing was leased and
// RetryAfter says when a unit may be free; Err is set when the request is
// invalid (unknown policy, a policy without a lease option).
type LeaseGrant struct {
	ID         uint64
	Units      int64
	Valid      time.Duration // from the entry's time
	Window     int64         // pass back in the LeaseReturn
	Limit      int64
	Remaining  int64 // unleased, after the grant
	RetryAfter time.Duration
	// ResetAt is when (leader time, ns) the key's state would be fresh
	// again after the grant if nothing more were spent: for a fixed
	// window, its end. Answers only; not part of any stored encoding.
	ResetAt int64
	Err     *Error
}

// LeaseReturn gives back what a lease did not spend. The holder must not
// spend from the lease after sending it.
type LeaseReturn struct {
	ID      uint64
	Check   Check
	Unspent int64
}

// LeaseHook hears, on the apply goroutine of every replica and in log
// order, of what a node holding leases must act on. It must not block (the
// apply waits) and must not keep the strings' backing memory beyond the call
// (they are copies, but cheap ones are not promised).
type LeaseHook interface {
	// Recall: a check under a policy with a strict lease option was
	// refused while leases on key were outstanding. Their holders should
	// give them back, so that the check, tried again, is refused only if
	// the key truly has nothing left (service/lease.go).
	Recall(policy, key string)
	// Returned: a return of a lease on key was applied.
	Returned(policy, key string)
}
