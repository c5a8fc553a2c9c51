// Package overlimit owns the over-limit cache: a bounded, in-memory record of
// refusals the state machine has applied, so that a node can answer a check
// that is certain to be refused without a Raft round.
//
// The cache can only refuse, never allow. An entry says "under this limit,
// this key refuses every request of cost ≥ MinCost until Expiry" (leader
// time, ns). It is filled by Observe from decisions the state machine applied
// (on every replica), tightened by later refusals, contradicted and dropped
// by allowances, and invalidated by the writes that can shorten a refusal: a
// key reset (Forget), a policy change or removal (ForgetLimit) and a snapshot
// restore or loss of membership (Clear). Cacheable says which decisions may
// be cached: refusals that do not change state (not count_refused sliding
// logs, not shadow policies) with a finite retry time.
//
// DESIGN.md gives the argument for exactness, the staleness of followers and
// the points where fsm and the check paths call into this package.
package overlimit
