package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

// errFuture is a proposal refused before it reached the log.
type errFuture struct{ err error }

func (f errFuture) Error() error          { return f.err }
func (f errFuture) Index() uint64         { return 0 }
func (f errFuture) Response() interface{} { return nil }

// remaining peeks key's remaining budget through the log on n.
func remaining(t *testing.T, n *cluster.Node, key string, spec *algo.Spec) int64 {
	t.Helper()
	res, err := n.Check(context.Background(), []fsm.Op{{Checks: []fsm.Check{{Key: key, Spec: spec}}}})
	if err != nil {
		t.Fatalf("peek %s: %v", key, err)
	}
	return res[0].Decisions[0].Remaining
}

// A leader that answers a forwarded check with outcome unknown (it lost
// leadership after proposing) makes the follower return
// cluster.ErrOutcomeUnknown without forwarding again: the check is counted
// once. Fails if the leader labels the failure "not proposed" or the
// follower retries an unknown outcome.
func TestForwardedOutcomeUnknownIsNotRetried(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.Leader()
	leader := c.Node(l)
	var proposals atomic.Int32
	cluster.SetPropose(leader, func(cmd []byte, timeout time.Duration) raft.ApplyFuture {
		f := leader.Raft().Apply(cmd, timeout)
		if proposals.Add(1) == 1 {
			return lostFuture{f}
		}
		return f
	})
	spec := slidingLog(5, time.Hour)
	follower := c.Node((l + 1) % 3)
	res, err := follower.Check(context.Background(), check("fwd-lost", spec))
	if !errors.Is(err, cluster.ErrOutcomeUnknown) {
		t.Fatalf("forwarded check whose leader lost leadership after proposing: %+v %v, want cluster.ErrOutcomeUnknown", res, err)
	}
	if got := proposals.Load(); got != 1 {
		t.Fatalf("the leader saw %d proposals for one forwarded check: the follower retried an unknown outcome", got)
	}
	if got := remaining(t, leader, "fwd-lost", spec); got != 4 {
		t.Fatalf("remaining after one check with an unknown outcome: %d, want 4 (counted once)", got)
	}
}

// A forwarded batch the leader splits into entries: when a later entry
// fails before it is proposed, the earlier ones are already applied, so the
// batch's outcome is unknown — not "not proposed", which would make the
// follower forward the whole batch again and count the first part twice.
func TestSplitForwardedBatchLaterPartFailsIsOutcomeUnknown(t *testing.T) {
	c := newTestClusterWith(t, 3, func(cfg *cluster.Config) { cfg.BatchMaxOps = 2 })
	l := c.Leader()
	leader := c.Node(l)
	var proposals atomic.Int32
	cluster.SetPropose(leader, func(cmd []byte, timeout time.Duration) raft.ApplyFuture {
		if proposals.Add(1) == 2 {
			return errFuture{raft.ErrNotLeader} // refused: nothing of this part reached the log
		}
		return leader.Raft().Apply(cmd, timeout)
	})
	spec := slidingLog(5, time.Hour)
	var ops []fsm.Op
	for i := 0; i < 3; i++ { // 3 ops: entries of 2 and 1
		ops = append(ops, check(fmt.Sprintf("split-%d", i), spec)...)
	}
	res, err := c.Node((l+1)%3).Check(context.Background(), ops)
	if !errors.Is(err, cluster.ErrOutcomeUnknown) {
		t.Fatalf("forwarded batch whose second part failed: %+v %v, want cluster.ErrOutcomeUnknown", res, err)
	}
	if got := proposals.Load(); got != 2 {
		t.Fatalf("%d proposals for a batch of 2 parts: the follower forwarded it again", got)
	}
	want := []int64{4, 4, 5} // the first part applied once, the second never
	for i, w := range want {
		key := fmt.Sprintf("split-%d", i)
		if got := remaining(t, leader, key, spec); got != w {
			t.Errorf("%s: remaining %d, want %d", key, got, w)
		}
	}
}

// Leadership moves while a follower's check is on its way over HTTP (the
// leaders refuse the check stream, as releases without it do; the stream's
// case is TestStreamLeaderChange): the old leader answers "not leader"
// without proposing, the follower forwards to the new leader, and the check
// is counted exactly once.
func TestLeaderChangeMidForward(t *testing.T) {
	var moved atomic.Bool
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3,
		Handler: func(_ int, n *cluster.Node) http.Handler {
			mux := http.NewServeMux()
			inner := n.Internal()
			mux.Handle("/internal/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == cluster.PathCheckStream {
					http.NotFound(w, r)
					return
				}
				if r.URL.Path == cluster.PathCheck {
					if moved.CompareAndSwap(false, true) {
						// The check arrives at a leader that hands leadership
						// over before it reads the request.
						if err := n.Raft().LeadershipTransfer().Error(); err != nil {
							t.Errorf("leadership transfer: %v", err)
						}
					}
				}
				inner.ServeHTTP(w, r)
			}))
			return mux
		}})
	old := c.Leader()
	// The follower forwards to the new leader, or decides locally if it is
	// the new leader; either way the check goes through once.
	follower := c.Node((old + 1) % 3)
	spec := slidingLog(5, time.Hour)
	res, err := follower.Check(context.Background(), check("moved", spec))
	if err != nil {
		t.Fatalf("check forwarded while leadership moved: %v", err)
	}
	if !res[0].Allowed {
		t.Fatalf("check forwarded while leadership moved: %+v, want allowed", res[0])
	}
	if !moved.Load() {
		t.Fatal("the check was never forwarded")
	}
	if nl := c.Leader(); nl == old {
		t.Fatalf("leadership did not move from node%d", old)
	}
	for i, n := range c.Nodes() {
		if got := remaining(t, n, "moved", spec); got != 4 {
			t.Errorf("node%d: remaining %d, want 4 (counted once)", i, got)
		}
	}
}

// The leader's lease endpoint refuses what is not a lease command (a policy
// change smuggled through it, junk) with 400 labelled bad_request, so a
// follower reads it as refused, not as an outcome it cannot know; nothing is
// proposed.
func TestLeaseEndpointRefusesOtherCommands(t *testing.T) {
	c := clustertest.MakeCluster(t, 1, nil)
	n := c.Node(0)
	before := n.FSM().AppliedIndex()
	h := n.Internal()
	for name, body := range map[string][]byte{
		"policy": fsm.EncodePutPolicy(fsm.Policy{Name: "p", Spec: algo.Spec{Algorithm: algo.FixedWindow, Limit: 1, Window: time.Minute}}),
		"junk":   []byte("not a command"),
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/internal/v1/lease", bytes.NewReader(body)))
		if rec.Code != http.StatusBadRequest || rec.Header().Get("X-Limitd-Error") != "bad_request" {
			t.Errorf("%s: %d %q %s, want 400 bad_request", name, rec.Code, rec.Header().Get("X-Limitd-Error"), rec.Body)
		}
	}
	if got := n.FSM().AppliedIndex(); got != before {
		t.Fatalf("applied index %d → %d: something was proposed", before, got)
	}
	if _, ok := n.Catalog().Policy("p"); ok {
		t.Fatal("a policy change went through the lease endpoint")
	}
}
