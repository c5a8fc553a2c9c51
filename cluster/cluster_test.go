package cluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

// newTestCluster is the harness's cluster of size nodes.
func newTestCluster(t *testing.T, size int) *clustertest.Cluster {
	t.Helper()
	return clustertest.MakeCluster(t, size, nil)
}

// newTestClusterWith is newTestCluster with tweak applied to every node's
// configuration.
func newTestClusterWith(t *testing.T, size int, tweak func(*cluster.Config)) *clustertest.Cluster {
	t.Helper()
	return clustertest.MakeCluster(t, size, func(_ int, cfg *cluster.Config) { tweak(cfg) })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func slidingLog(limit int64, window time.Duration) *algo.Spec {
	s, err := algo.Spec{Algorithm: algo.SlidingLog, Limit: limit, Window: window}.Validate()
	if err != nil {
		panic(err)
	}
	return &s
}

func check(key string, spec *algo.Spec) []fsm.Op {
	return []fsm.Op{{Checks: []fsm.Check{{Key: key, Spec: spec, Cost: 1}}}}
}

func TestSingleNodeBootstrapsAndDecides(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.Node(0)
	spec := slidingLog(3, time.Hour)
	for i := 0; i < 5; i++ {
		res, err := n.Check(context.Background(), check("k", spec))
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; res[0].Allowed != want {
			t.Fatalf("check %d: allowed=%v, want %v", i, res[0].Allowed, want)
		}
	}
}

// The flush timer commits applies that share an open transaction, so the
// file does not wait for the next CommitEvery-th batch.
func TestFlushTimerCommitsSharedApplies(t *testing.T) {
	c := newTestCluster(t, 1) // fastConfig: default FSMCommitEvery (1000), 100 ms flush
	n := c.Node(0)
	if _, err := n.Check(context.Background(), check("k", slidingLog(3, time.Hour))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n.FSM().Pending() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d applied batches still uncommitted after 5 s", n.FSM().Pending())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGroupCommitGathersConcurrentChecks(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.Node(0)
	spec := slidingLog(1000, time.Hour)
	before := n.FSM().AppliedIndex()
	const workers, each = 32, 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				res, err := n.Check(context.Background(), check("shared", spec))
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != workers*each {
		t.Fatalf("allowed %d of %d under a limit of 1000", allowed, workers*each)
	}
	entries := n.FSM().AppliedIndex() - before
	if entries >= workers*each {
		t.Fatalf("%d checks took %d log entries: no group commit", workers*each, entries)
	}
	t.Logf("%d checks in %d log entries", workers*each, entries)
}

func TestFollowerForwardsAndCountsOnce(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.Leader()
	spec := slidingLog(5, time.Hour)
	allowed := 0
	for i := 0; i < 8; i++ {
		n := c.Node((l + 1 + i%2) % 3) // alternate between the two followers
		res, err := n.Check(context.Background(), check("fwd", spec))
		if err != nil {
			t.Fatalf("check %d via follower: %v", i, err)
		}
		if res[0].Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("allowed %d through followers, want exactly the limit 5", allowed)
	}
	// A peek on every node, through the log, agrees the budget is spent.
	for i, n := range c.Nodes() {
		res, err := n.Check(context.Background(), []fsm.Op{{Checks: []fsm.Check{{Key: "fwd", Spec: spec, Cost: 0}}}})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Decisions[0].Remaining != 0 {
			t.Fatalf("node%d sees remaining %d, want 0", i, res[0].Decisions[0].Remaining)
		}
	}
	c.WaitConverged()
}

func TestPartitionedLeaderDoesNotReopenBudget(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.Leader()
	spec := slidingLog(5, time.Hour)
	for i := 0; i < 5; i++ {
		res, err := c.Node(old).Check(context.Background(), check("p", spec))
		if err != nil || !res[0].Allowed {
			t.Fatalf("spend %d: %v %+v", i, err, res)
		}
	}
	c.WaitConverged()

	c.Disconnect(old)
	// A check on the isolated old leader cannot commit: it must fail (unknown
	// outcome or no leader), never be acknowledged.
	inflight := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Node(old).Check(ctx, check("other", spec))
		inflight <- err
	}()

	var nl int
	deadline := time.Now().Add(10 * time.Second)
	for {
		nl = -1
		for i, n := range c.Nodes() {
			if i != old && n.IsLeader() {
				nl = i
			}
		}
		if nl >= 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if nl < 0 {
		t.Fatal("no new leader among the majority")
	}
	res, err := c.Node(nl).Check(context.Background(), check("p", spec))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Allowed {
		t.Fatal("new leader reopened a spent sliding_log budget")
	}
	if err := <-inflight; err == nil {
		t.Fatal("a check on the partitioned old leader was acknowledged")
	} else if !errors.Is(err, cluster.ErrOutcomeUnknown) && !errors.Is(err, cluster.ErrNoLeader) {
		t.Fatalf("partitioned leader: got %v, want outcome unknown or no leader", err)
	}

	c.Heal()
	c.WaitConverged()
	// The old leader's uncommitted check must not have been counted: "other"
	// has its full budget minus nothing.
	res, err = c.Node(old).Check(context.Background(), []fsm.Op{{Checks: []fsm.Check{{Key: "other", Spec: spec, Cost: 0}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Decisions[0].Remaining; got != 5 {
		t.Fatalf("uncommitted check on the old leader was counted: remaining %d, want 5", got)
	}
}

func TestRestartKeepsStateAndRejoins(t *testing.T) {
	c := newTestCluster(t, 3)
	spec := slidingLog(4, time.Hour)
	for i := 0; i < 4; i++ {
		if _, err := c.Node(c.Leader()).Check(context.Background(), check("r", spec)); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitConverged()
	for i := range c.Nodes() { // restart every node in turn
		c.Stop(i)
		c.Start(i)
		c.WaitReady(i)
	}
	res, err := c.Node(c.Leader()).Check(context.Background(), check("r", spec))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Allowed {
		t.Fatal("budget reopened after restarts")
	}
	c.WaitConverged()
}

func TestStatusListsMembers(t *testing.T) {
	c := newTestCluster(t, 3)
	st, err := c.Node(1).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 3 || st.LeaderID == "" || st.LeaderHTTP == "" {
		t.Fatalf("status %+v", st)
	}
	for _, m := range st.Members {
		if m.HTTPAddr == "" || m.Suffrage != "Voter" {
			t.Fatalf("member %+v", m)
		}
	}
	l := c.Leader()
	victim := (l + 1) % 3
	if err := c.Node((l+2)%3).Remove(context.Background(), c.Node(victim).ID()); err != nil {
		t.Fatal(err)
	}
	st, _ = c.Node(l).Status(context.Background())
	if len(st.Members) != 2 {
		t.Fatalf("after remove: %d members", len(st.Members))
	}
	var fe *fsm.Error
	if err := c.Node(l).Remove(context.Background(), "nope"); !errors.As(err, &fe) || fe.Code != "not_found" {
		t.Fatalf("remove unknown: %v", err)
	}
}

// An entry the state machine cannot apply stops it: the node reports it in
// Ready, refuses checks, and still shuts down instead of hanging.
func TestFatalApplyStopsNodeAndCloseReturns(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.Node(0)
	f := n.Raft().Apply([]byte{250, 1}, time.Second) // an unknown command type
	_ = f                                            // never answered: the state machine stops before responding
	deadline := time.Now().Add(5 * time.Second)
	for n.Ready() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := n.Ready(); err == nil {
		t.Fatal("node still ready after a fatal apply error")
	}
	if _, err := n.Check(context.Background(), check("k", slidingLog(1, time.Hour))); err == nil {
		t.Fatal("check accepted by a stopped state machine")
	}
	done := make(chan error, 1)
	go func() { done <- n.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung after a fatal apply error")
	}
	c.MarkStopped(0)
}

// A removed node says so: Removed is closed, Ready reports "removed from
// cluster", and checks through it answer cluster.ErrUnavailable.
func TestRemovedNodeStopsServing(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.Leader()
	victim := (l + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Node(l).Remove(ctx, c.Node(victim).ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Node(victim).Removed():
	case <-ctx.Done():
		t.Fatal("the removed node did not notice its removal")
	}
	if err := c.Node(victim).Ready(); err == nil || !strings.Contains(err.Error(), "removed from cluster") {
		t.Fatalf("Ready of the removed node: %v, want \"removed from cluster\"", err)
	}
	if _, err := c.Node(victim).Check(ctx, check("k", slidingLog(5, time.Hour))); !errors.Is(err, cluster.ErrUnavailable) {
		t.Fatalf("check through the removed node: %v, want cluster.ErrUnavailable", err)
	}
	select {
	case <-c.Node(l).Removed():
		t.Fatal("the leader reports itself removed")
	default:
	}
}

func memberHealth(t *testing.T, n *cluster.Node) map[string]string {
	t.Helper()
	st, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, m := range st.Members {
		if m.Healthy != (m.Health == cluster.HealthHealthy) {
			t.Fatalf("member %+v: healthy and health disagree", m)
		}
		h[m.ID] = m.Health
	}
	return h
}

// /v1/cluster health: a follower cannot know about the other followers, a
// node without a leader cannot know about any peer; both say "unknown", and
// the leader reports a stopped member unhealthy.
func TestStatusHealthSaysUnknownWhereItCannotKnow(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.Leader()
	f1, f2 := (l+1)%3, (l+2)%3
	id := func(i int) string { return c.Node(i).ID() }
	h := memberHealth(t, c.Node(f1))
	if h[id(l)] != cluster.HealthHealthy || h[id(f1)] != cluster.HealthHealthy || h[id(f2)] != cluster.HealthUnknown {
		t.Fatalf("follower's view %v: want leader and itself healthy, the other follower unknown", h)
	}
	c.Stop(f2)
	waitFor(t, func() bool { return memberHealth(t, c.Node(l))[id(f2)] == cluster.HealthUnhealthy })
	if h := memberHealth(t, c.Node(f1)); h[id(f2)] != cluster.HealthUnknown {
		t.Fatalf("follower's view of a stopped member: %v, want unknown (it cannot know)", h)
	}
	// Cut the follower off: without a leader it knows nothing of its peers
	// and is itself out of contact.
	c.Disconnect(f1)
	waitFor(t, func() bool { _, lid := c.Node(f1).Raft().LeaderWithID(); return lid == "" })
	h = memberHealth(t, c.Node(f1))
	if h[id(l)] != cluster.HealthUnknown || h[id(f2)] != cluster.HealthUnknown || h[id(f1)] != cluster.HealthUnhealthy {
		t.Fatalf("isolated node's view %v: want peers unknown and itself unhealthy", h)
	}
}

// A state machine that halts under load (an entry it cannot apply) answers
// every waiter at once, on the leader and on the followers that forwarded to
// it, even callers without a deadline of their own; later calls answer
// cluster.ErrUnavailable naming the cause.
func TestHaltedStateMachineAnswersEveryWaiter(t *testing.T) {
	// A long proposal timeout: the waiters must answer because the state
	// machine halted, not because their proposals timed out.
	c := newTestClusterWith(t, 3, func(cfg *cluster.Config) { cfg.ApplyTimeout = time.Minute })
	spec := slidingLog(1_000_000, time.Hour)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var ok, answered atomic.Int64
	errs := make(chan error, 1000)
	for i := 0; i < 30; i++ {
		n := c.Node(i % 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := n.Check(context.Background(), check("k", spec))
				answered.Add(1)
				if err == nil {
					ok.Add(1)
					continue
				}
				if !errors.Is(err, cluster.ErrOutcomeUnknown) && !errors.Is(err, cluster.ErrUnavailable) {
					select {
					case errs <- err:
					default:
					}
				}
				return // the state machine halted
			}
		}()
	}
	waitFor(t, func() bool { return ok.Load() > 200 })
	l := c.Node(c.Leader())
	l.Raft().Apply([]byte{250, 1}, time.Second) // an unknown command type halts every replica

	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		close(stop)
		t.Fatalf("waiters still blocked 10 s after the state machine halted (%d answered)", answered.Load())
	}
	close(stop)
	close(errs)
	for err := range errs {
		t.Errorf("a waiter answered %v, want cluster.ErrOutcomeUnknown or cluster.ErrUnavailable", err)
	}
	for _, n := range c.Nodes() {
		waitFor(t, func() bool { return n.Health() != nil })
		_, err := n.Check(context.Background(), check("k", spec))
		if !errors.Is(err, cluster.ErrUnavailable) || !errors.Is(err, cluster.ErrNoLeader) {
			t.Fatalf("node %s after the halt: %v, want cluster.ErrUnavailable (also matching cluster.ErrNoLeader)", n.ID(), err)
		}
	}
}
