package service

import (
	"testing"
	"time"

	"github.com/limitd/limitd/nodeapi"
)

// TestLeaseReturnRetriedInGrace: a return that fails (no leader: an
// election) is sent again past its lease's deadline, while within
// nodeapi.LeaseReturnGrace, and the state machine credits it then: a leader's
// death no longer costs the key the units leased at the time. Past the
// grace the return is given up (lost), not retried for ever. The clocks are
// the test's: the node's (c) and the leader's (r.Now()).
func TestLeaseReturnRetriedInGrace(t *testing.T) {
	var node *failingReturns
	r, s, c, check := dailyLeasedOver(t, 100, func(n *fsmNode) Everything {
		node = &failingReturns{fsmNode: n, fail: 1}
		return node
	})
	check()
	check() // takes a lease of 49 (valid 2 s)
	check() // from it
	// Both clocks past the lease's deadline (and its expiry at the leader)
	// before the return is first sent: it fails, and is sent again.
	past := 2600 * time.Millisecond
	r.Advance(past)
	c.add(past)
	check()       // through the log; the lease goes back, and that round fails
	waitGrants(s) // the retry, in the grace
	st := s.LeaseStats()
	node.mu.Lock()
	calls := node.calls
	node.mu.Unlock()
	if st.Returned != 1 || st.Lost != 0 || len(calls) != 2 || calls[0][0].ID != calls[1][0].ID {
		t.Fatalf("stats %+v, return rounds %v: want the failed return sent again past the deadline and returned, none lost", st, calls)
	}
	if got := peekRemaining(t, s); got != 100-4 {
		t.Fatalf("remaining %d, want %d: the 48 unspent units credited after the lease's expiry", got, 100-4)
	}
}

// TestLeaseReturnGivenUpAfterGrace: a return that keeps failing is sent
// again until its lease's deadline + nodeapi.LeaseReturnGrace and then given
// up (lost: the state machine would credit nothing).
func TestLeaseReturnGivenUpAfterGrace(t *testing.T) {
	var node *failingReturns
	_, s, c, check := dailyLeasedOver(t, 100, func(n *fsmNode) Everything {
		node = &failingReturns{fsmNode: n, fail: 1 << 20}
		return node
	})
	check()
	check() // takes a lease (valid 2 s)
	check() // from it
	c.add(2600 * time.Millisecond)
	check()       // the lease goes back past its deadline; the round fails
	waitGrants(s) // and the retry fails: still within the grace
	if st := s.LeaseStats(); st.Lost != 0 || st.Returned != 0 {
		t.Fatalf("within the grace: %+v, want the return still retried", st)
	}
	c.add(nodeapi.LeaseReturnGrace)
	waitGrants(s) // the last retry fails; none after it
	st := s.LeaseStats()
	node.mu.Lock()
	rounds := len(node.calls)
	node.mu.Unlock()
	waitGrants(s)
	node.mu.Lock()
	after := len(node.calls)
	node.mu.Unlock()
	if st.Lost != 1 || st.Returned != 0 || after != rounds {
		t.Fatalf("past the grace: %+v, %d return rounds then %d: want the return given up (lost), not sent again", st, rounds, after)
	}
}
