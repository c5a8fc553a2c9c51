package cluster

import (
	"fmt"
	"time"
)

// Fail fast without a quorum: 503 at once, not after the apply timeout. A follower cut off from the leader
// used to take every check and retry until the apply timeout (5 s) before
// answering 503. Raft already knows better: a follower records its last
// contact with a leader, and a leader that cannot reach a quorum for
// LeaderLeaseTimeout steps down by itself. Once no leader is known and none
// has been heard from for longer than an election should take (heartbeat
// timeout + election timeout), checks answer ErrNoLeader at once, naming how
// long it has been. Shorter gaps — an ordinary election or a leadership
// transfer — are still waited out, as before.

// leaderGone is nil while a leader is known or was heard from recently.
func (n *Node) leaderGone() error {
	if n.IsLeader() {
		return nil
	}
	if _, id := n.raft.LeaderWithID(); id != "" {
		return nil
	}
	bound := n.cfg.HeartbeatTimeout + n.cfg.ElectionTimeout
	last, what := n.raft.LastContact(), "no contact with a leader"
	if last.IsZero() {
		// Never heard from one: count from the start, so a node that has
		// just started waits for the first election as before.
		last, what = n.openedAt, "no contact with a leader since this node started"
	}
	if since := time.Since(last); since > bound {
		return fmt.Errorf("%w: %s for %v (no quorum reachable from this node)", ErrNoLeader, what, since.Round(time.Millisecond))
	}
	return nil
}
