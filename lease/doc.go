// Package lease owns a node's quota lease runtime: the table of leases the
// node holds (what is left of each, when it must stop being spent, when it
// goes back), the flusher that sends grants and returns as a few Raft
// entries, the sweeper that gives back idle and expiring leases, the wait
// of a strict retry for a return, and the tuning constants of all of it.
// The replicated accounting is fsm's (fsm/lease.go); what a lease means to
// a check, and which checks may use one, is the service's
// (service/lease.go). It imports only algo and nodeapi.
//
// For a policy with a lease option, a node reserves part of a busy key's
// budget through the log and answers allowed checks from it in memory. What
// is leased is already counted in the replicated state, so spending it needs
// no Raft round and can never admit more than the limit. The rules that keep
// that true here:
//
//   - A lease is spent only before its local deadline: the monotonic time at
//     which this node *sent* the grant request plus the grant's validity.
//     The leader stamped the grant later than that, so whatever the clocks
//     of the nodes say, the deadline falls before the end of the window the
//     units were counted in.
//   - Never more than granted; a lease given back (returned) is never spent
//     again: it leaves the table before its return is sent.
//   - A grant whose answer never came (outcome unknown, timeout) is not
//     spent: its units, if it was made, are asked back whole and are
//     otherwise lost (under-admission).
//
// Leases are dropped (unspent units returned) when the state machine recalls
// them (a strict refusal elsewhere, Recall), when the table sees the
// policy's limit or lease option change, before this node proposes a reset
// of the key (Forget), after a key is idle for leaseIdle, and at Close. A
// key reset made through another node does not revoke them: the state
// machine keeps outstanding leased units counted across a reset
// (fsm/lease.go), so spending them stays exact. A leader change needs
// nothing either: a grant is an entry in the log, and a new leader has it;
// a return that fails meanwhile is sent again until its lease's deadline +
// nodeapi.LeaseReturnGrace, and the state machine credits it until then.
//
// DESIGN.md keeps the measurements behind the tuning.
package lease
