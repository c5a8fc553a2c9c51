package service

import (
	"context"
	"time"

	"github.com/limitd/limitd/lease"
	"github.com/limitd/limitd/nodeapi"
)

// Quota leases, what they mean to a check (the runtime that holds them is
// package lease; the replicated accounting is fsm/lease.go).
//
// For a policy with a lease option, a node reserves part of a busy key's
// budget through the log and answers allowed checks from it in memory
// (package lease says what keeps that exact). What stays exact (the
// per-check path through the log, as before): checks with a request_id,
// check/all and batches, peeks (cost 0), inline limits and every policy
// without the option. `remaining` in an answer from a lease is a bound:
// this node's unspent leases plus what the state machine reported unleased
// at its last grant. reset_after is an estimate, by this node's wall clock,
// of when the key's state resets as the grant reported it (for a fixed
// window, its end). A check that the lease cannot cover goes through the
// log. This node's leases on a key go back before it proposes a reset of
// the key (ResetKey), and all of them at CloseLeases.

// Leaser is the Node's part in quota leases: GrantLeases asks the leader
// for leases held by this node and ReturnLeases gives back what they did
// not spend (see nodeapi.LeaseRequest, nodeapi.LeaseGrant,
// nodeapi.LeaseReturn for the contract); SetLeaseHook installs the lease
// table as the one listener to the recalls and returns the node's state
// machine applies (nodeapi.LeaseHook), without which a strict recall would
// never reach the holders. A node that takes no leases answers every grant
// with an error: checks then go through the log, as for any lease that
// could not be taken.
type Leaser interface {
	lease.Node
	SetLeaseHook(h nodeapi.LeaseHook)
}

// LeaseStats counts the node's leases, for metrics.
type LeaseStats = lease.Stats

// LeaseView is one key's quota leases on this node, as the status page
// shows them.
type LeaseView = lease.View

// newLeases is the node's lease table, installed as its lease hook.
func newLeases(n Leaser, o lease.Options) *lease.Table {
	t := lease.New(n, o)
	n.SetLeaseHook(t) // recalls and returns, as the node's state machine applies them
	return t
}

// leased answers c from this node's lease on its key, if it holds one that
// covers c; otherwise it may start taking one in the background and reports
// a miss (the caller decides through the log).
func (s *Service) leased(c *nodeapi.Check, l *Limit) (nodeapi.Decision, bool) {
	if c.Policy == "" || c.Cost <= 0 || !l.Known || !l.lease.Enabled() {
		return nodeapi.Decision{}, false
	}
	return s.leases.Spend(c.Policy, c.Key, l.Spec, l.lease, c.Cost)
}

// decideStrict decides c through the log under a strict lease option. A
// refusal while leases on the key are outstanding (LeasedElsewhere: the
// state machine has told their holders to give them back) is tried again
// each time a return on the key is applied here, until it is allowed, or
// refused with no lease outstanding, or no return came within
// the table's StrictWait, or after lease.StrictTries tries. So it is refused only if
// the key has nothing left once the holders that can answer have given
// their leases back; a holder that cannot (crashed, partitioned) keeps its
// units until its lease expires, which the refusal's retry_after bounds.
func (s *Service) decideStrict(ctx context.Context, c nodeapi.Check, l Limit) (CheckResult, *Error) {
	t := s.leases
	var res CheckResult
	var e *Error
	for i := 0; ; i++ {
		// Watched before the decision: a return applied after it was
		// made (the recall's answer) cannot slip by unseen.
		w := t.WatchReturns(c.Policy, c.Key)
		res, e = s.decideOne(ctx, c, l, "", true) // peek = true: counted once, below
		if e != nil || Allowed(&res.Decision) || !res.Decision.LeasedElsewhere || i+1 >= lease.StrictTries {
			t.Unwatch(c.Policy, c.Key, w)
			break
		}
		tm := time.NewTimer(t.StrictWait())
		var returned bool
		select {
		case <-w:
			returned = true
		case <-tm.C:
		case <-ctx.Done():
		}
		tm.Stop()
		if !returned {
			t.Unwatch(c.Policy, c.Key, w)
			break
		}
	}
	if e == nil {
		s.obs.Decided(res.Limit, res.Decision)
	}
	return res, e
}

// CloseLeases gives back every lease this node holds and stops taking new
// ones; call it when the node shuts down, before the node is closed. It
// waits for the returns at most until ctx ends (what is not returned is
// lost: under-admission until the leases expire).
func (s *Service) CloseLeases(ctx context.Context) {
	s.leases.Close(ctx)
}

// LeaseStats reports the node's lease counters.
func (s *Service) LeaseStats() LeaseStats {
	return s.leases.Stats()
}

// LeaseSnapshot lists up to limit of the keys this node holds unexpired
// leases with units left on, the most spent first (then by policy and
// key), and how many more such keys it holds (lease.Table.Snapshot).
func (s *Service) LeaseSnapshot(limit int) (views []LeaseView, more int) {
	return s.leases.Snapshot(limit)
}
