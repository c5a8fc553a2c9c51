package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

// testCluster is an in-process cluster: Raft over InmemTransport (so tests
// can partition nodes) and each node's internal HTTP endpoints on a loopback
// httptest server (so followers forward for real).
type testCluster struct {
	t      *testing.T
	nodes  []*Node
	trans  []*raft.InmemTransport
	srvs   []*httptest.Server
	dirs   []string
	closed []bool
	tweak  func(*Config) // optional: adjusts each node's configuration
}

func fastConfig(id, dir, httpAddr string, tr raft.Transport) Config {
	return Config{
		NodeID: id, RaftAddr: string(tr.LocalAddr()), HTTPAddr: httpAddr, DataDir: dir,
		Transport:        tr,
		HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		ApplyTimeout: 2 * time.Second, ExpireInterval: 50 * time.Millisecond,
		LogOutput: io.Discard,
	}
}

func newTestCluster(t *testing.T, size int) *testCluster {
	t.Helper()
	return newTestClusterWith(t, size, nil)
}

func newTestClusterWith(t *testing.T, size int, tweak func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, tweak: tweak}
	for i := 0; i < size; i++ {
		_, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("node%d", i)))
		c.trans = append(c.trans, tr)
		c.dirs = append(c.dirs, t.TempDir())
	}
	for i := range c.trans {
		for j := range c.trans {
			if i != j {
				c.trans[i].Connect(c.trans[j].LocalAddr(), c.trans[j])
			}
		}
	}
	for i := 0; i < size; i++ {
		c.nodes = append(c.nodes, nil)
		c.srvs = append(c.srvs, nil)
		c.closed = append(c.closed, false)
		c.start(i, i == 0)
	}
	c.waitLeader(c.nodes[0])
	for i := 1; i < size; i++ {
		// A join is idempotent, so one whose outcome is unknown (the
		// one-node leader stepped down under load) is simply sent again.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		for {
			err = c.nodes[0].Join(ctx, c.nodes[i].ID(), string(c.trans[i].LocalAddr()), c.srvs[i].Listener.Addr().String())
			if !errors.Is(err, ErrOutcomeUnknown) || ctx.Err() != nil {
				break
			}
			c.waitLeader(c.nodes[0])
		}
		cancel()
		if err != nil {
			t.Fatalf("join node%d: %v", i, err)
		}
	}
	for _, n := range c.nodes {
		c.waitReady(n)
	}
	t.Cleanup(c.close)
	c.waitConverged()
	return c
}

// start opens node i (again, after a stop) on its directory and transport.
func (c *testCluster) start(i int, bootstrap bool) {
	c.t.Helper()
	if c.srvs[i] == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(nil)
		srv.Listener.Close()
		srv.Listener = ln
		c.srvs[i] = srv
	}
	// Raft closes its transport on shutdown; a restarted node reconnects.
	c.heal()
	cfg := fastConfig(fmt.Sprintf("n%d", i), c.dirs[i], c.srvs[i].Listener.Addr().String(), c.trans[i])
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	n, err := Open(cfg, bootstrap)
	if err != nil {
		c.t.Fatalf("open node%d: %v", i, err)
	}
	c.nodes[i] = n
	c.closed[i] = false
	mux := http.NewServeMux()
	mux.Handle("/internal/", n.Internal())
	if c.srvs[i].Config.Handler == nil {
		c.srvs[i].Config.Handler = &swapHandler{}
		c.srvs[i].Start()
	}
	c.srvs[i].Config.Handler.(*swapHandler).set(mux)
}

type swapHandler struct {
	mu sync.RWMutex
	h  http.Handler
}

func (s *swapHandler) set(h http.Handler) { s.mu.Lock(); s.h = h; s.mu.Unlock() }
func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	h := s.h
	s.mu.RUnlock()
	h.ServeHTTP(w, r)
}

func (c *testCluster) stop(i int) {
	if c.closed[i] {
		return
	}
	c.closed[i] = true
	if err := c.nodes[i].Close(); err != nil {
		c.t.Errorf("close node%d: %v", i, err)
	}
}

func (c *testCluster) close() {
	for i := range c.nodes {
		c.stop(i)
	}
	for _, s := range c.srvs {
		s.Close()
	}
}

func (c *testCluster) waitLeader(n *Node) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitLeader(ctx); err != nil {
		c.t.Fatalf("node %s: no leader: %v", n.ID(), err)
	}
}

func (c *testCluster) waitReady(n *Node) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Ready() != nil {
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s not ready: %v", n.ID(), n.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leader returns the index of the current leader among running nodes.
func (c *testCluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range c.nodes {
			if !c.closed[i] && n.IsLeader() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader elected")
	return -1
}

// isolate cuts node i off from every other node, both directions.
func (c *testCluster) isolate(i int) {
	c.trans[i].DisconnectAll()
	for j := range c.trans {
		if j != i {
			c.trans[j].Disconnect(c.trans[i].LocalAddr())
		}
	}
}

func (c *testCluster) heal() {
	for i := range c.trans {
		for j := range c.trans {
			if i != j {
				c.trans[i].Connect(c.trans[j].LocalAddr(), c.trans[j])
			}
		}
	}
}

// waitConverged waits until every running node has applied the same index
// and has the same state digest.
func (c *testCluster) waitConverged() string {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last []string
	for time.Now().Before(deadline) {
		last = last[:0]
		same := true
		for i, n := range c.nodes {
			if c.closed[i] {
				continue
			}
			d, err := n.FSM().Digest()
			if err != nil {
				c.t.Fatal(err)
			}
			if len(last) > 0 && d != last[0] {
				same = false
			}
			last = append(last, d)
		}
		if same {
			return last[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("nodes did not converge: digests %v", last)
	return ""
}

func slidingLog(limit int64, window time.Duration) *algo.Spec {
	s, err := algo.Spec{Algorithm: algo.SlidingLog, Limit: limit, Window: int64(window)}.Validate()
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
	n := c.nodes[0]
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
	n := c.nodes[0]
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
	n := c.nodes[0]
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
	l := c.leader()
	spec := slidingLog(5, time.Hour)
	allowed := 0
	for i := 0; i < 8; i++ {
		n := c.nodes[(l+1+i%2)%3] // alternate between the two followers
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
	for i, n := range c.nodes {
		res, err := n.Check(context.Background(), []fsm.Op{{Checks: []fsm.Check{{Key: "fwd", Spec: spec, Cost: 0}}}})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Decisions[0].Remaining != 0 {
			t.Fatalf("node%d sees remaining %d, want 0", i, res[0].Decisions[0].Remaining)
		}
	}
	c.waitConverged()
}

func TestPartitionedLeaderDoesNotReopenBudget(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.leader()
	spec := slidingLog(5, time.Hour)
	for i := 0; i < 5; i++ {
		res, err := c.nodes[old].Check(context.Background(), check("p", spec))
		if err != nil || !res[0].Allowed {
			t.Fatalf("spend %d: %v %+v", i, err, res)
		}
	}
	c.waitConverged()

	c.isolate(old)
	// A check on the isolated old leader cannot commit: it must fail (unknown
	// outcome or no leader), never be acknowledged.
	inflight := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.nodes[old].Check(ctx, check("other", spec))
		inflight <- err
	}()

	var nl int
	deadline := time.Now().Add(10 * time.Second)
	for {
		nl = -1
		for i, n := range c.nodes {
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
	res, err := c.nodes[nl].Check(context.Background(), check("p", spec))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Allowed {
		t.Fatal("new leader reopened a spent sliding_log budget")
	}
	if err := <-inflight; err == nil {
		t.Fatal("a check on the partitioned old leader was acknowledged")
	} else if !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrNoLeader) {
		t.Fatalf("partitioned leader: got %v, want outcome unknown or no leader", err)
	}

	c.heal()
	c.waitConverged()
	// The old leader's uncommitted check must not have been counted: "other"
	// has its full budget minus nothing.
	res, err = c.nodes[old].Check(context.Background(), []fsm.Op{{Checks: []fsm.Check{{Key: "other", Spec: spec, Cost: 0}}}})
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
		if _, err := c.nodes[c.leader()].Check(context.Background(), check("r", spec)); err != nil {
			t.Fatal(err)
		}
	}
	c.waitConverged()
	for i := range c.nodes { // restart every node in turn
		c.stop(i)
		c.start(i, false)
		c.waitReady(c.nodes[i])
	}
	res, err := c.nodes[c.leader()].Check(context.Background(), check("r", spec))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Allowed {
		t.Fatal("budget reopened after restarts")
	}
	c.waitConverged()
}

func TestStatusListsMembers(t *testing.T) {
	c := newTestCluster(t, 3)
	st, err := c.nodes[1].Status(context.Background())
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
	l := c.leader()
	victim := (l + 1) % 3
	if err := c.nodes[(l+2)%3].Remove(context.Background(), c.nodes[victim].ID()); err != nil {
		t.Fatal(err)
	}
	st, _ = c.nodes[l].Status(context.Background())
	if len(st.Members) != 2 {
		t.Fatalf("after remove: %d members", len(st.Members))
	}
	var fe *fsm.Error
	if err := c.nodes[l].Remove(context.Background(), "nope"); !errors.As(err, &fe) || fe.Code != "not_found" {
		t.Fatalf("remove unknown: %v", err)
	}
}

// An entry the state machine cannot apply stops it: the node reports it in
// Ready, refuses checks, and still shuts down instead of hanging.
func TestFatalApplyStopsNodeAndCloseReturns(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	f := n.raft.Apply([]byte{250, 1}, time.Second) // an unknown command type
	_ = f                                          // never answered: the state machine stops before responding
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
	c.closed[0] = true
}

// A removed node says so: Removed is closed, Ready reports "removed from
// cluster", and checks through it answer ErrUnavailable.
func TestRemovedNodeStopsServing(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	victim := (l + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.nodes[l].Remove(ctx, c.nodes[victim].ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.nodes[victim].Removed():
	case <-ctx.Done():
		t.Fatal("the removed node did not notice its removal")
	}
	if err := c.nodes[victim].Ready(); err == nil || !strings.Contains(err.Error(), "removed from cluster") {
		t.Fatalf("Ready of the removed node: %v, want \"removed from cluster\"", err)
	}
	if _, err := c.nodes[victim].Check(ctx, check("k", slidingLog(5, time.Hour))); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("check through the removed node: %v, want ErrUnavailable", err)
	}
	select {
	case <-c.nodes[l].Removed():
		t.Fatal("the leader reports itself removed")
	default:
	}
}

func memberHealth(t *testing.T, n *Node) map[string]string {
	t.Helper()
	st, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, m := range st.Members {
		if m.Healthy != (m.Health == HealthHealthy) {
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
	l := c.leader()
	f1, f2 := (l+1)%3, (l+2)%3
	id := func(i int) string { return c.nodes[i].ID() }
	h := memberHealth(t, c.nodes[f1])
	if h[id(l)] != HealthHealthy || h[id(f1)] != HealthHealthy || h[id(f2)] != HealthUnknown {
		t.Fatalf("follower's view %v: want leader and itself healthy, the other follower unknown", h)
	}
	c.stop(f2)
	waitFor(t, func() bool { return memberHealth(t, c.nodes[l])[id(f2)] == HealthUnhealthy })
	if h := memberHealth(t, c.nodes[f1]); h[id(f2)] != HealthUnknown {
		t.Fatalf("follower's view of a stopped member: %v, want unknown (it cannot know)", h)
	}
	// Cut the follower off: without a leader it knows nothing of its peers
	// and is itself out of contact.
	c.isolate(f1)
	waitFor(t, func() bool { _, lid := c.nodes[f1].raft.LeaderWithID(); return lid == "" })
	h = memberHealth(t, c.nodes[f1])
	if h[id(l)] != HealthUnknown || h[id(f2)] != HealthUnknown || h[id(f1)] != HealthUnhealthy {
		t.Fatalf("isolated node's view %v: want peers unknown and itself unhealthy", h)
	}
}
