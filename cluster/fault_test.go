package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

// Fault tests: concurrent clients check keys while a nemesis partitions the
// leader away, isolates minorities, transfers leadership and restarts nodes.
// Every operation is recorded with its invoke and return times and checked
// with porcupine against the model in model_test.go, and directly: no key
// admitted more than its limit, and after healing every key's state accounts
// for every acknowledged decision.
//
// The default run is short (a few rounds per cluster size). scripts/chaos.sh
// runs the long version: LIMITD_CHAOS_ROUNDS=N sets the rounds per test,
// LIMITD_CHAOS_SEED fixes the nemesis and client randomness. Each test logs a
// "CHAOS-SUMMARY {json}" line that the script aggregates.

func chaosRounds(t *testing.T, short int) int {
	if v := os.Getenv("LIMITD_CHAOS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LIMITD_CHAOS_ROUNDS=%q: want a positive integer", v)
		}
		return n
	}
	return short
}

func chaosSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if v := os.Getenv("LIMITD_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("LIMITD_CHAOS_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (LIMITD_CHAOS_SEED=%d repeats the fault and client choices; timing still varies)", seed, seed)
	return seed
}

// stableWindow returns a fixed-window length (a whole number of hours) with
// no window boundary within d from now: fixed windows are aligned to the
// epoch, and a boundary crossed mid-test would legitimately reset a key.
func stableWindow(d time.Duration) time.Duration {
	now := time.Now().UnixNano()
	for k := int64(1); ; k++ {
		w := k * int64(time.Hour)
		if now/w == (now+int64(d))/w {
			return time.Duration(w)
		}
	}
}

// faultNet is the connectivity between nodes, for Raft (applied to the
// InmemTransports) and for node-to-node HTTP (consulted by faultTransport).
type faultNet struct {
	mu     sync.RWMutex
	cut    [][]bool       // cut[i][j]: i cannot reach j
	deaf   []bool         // deaf[i]: i's Raft RPCs are delivered, their responses lost
	byAddr map[string]int // HTTP address → node
	rng    *rand.Rand
	drop   float64 // probability that a delivered forward loses its response
}

func (fn *faultNet) blocked(from, to int) bool {
	fn.mu.RLock()
	defer fn.mu.RUnlock()
	return fn.cut[from][to]
}

func (fn *faultNet) dropResponse() bool {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	return fn.drop > 0 && fn.rng.Float64() < fn.drop
}

func (fn *faultNet) isDeaf(i int) bool {
	fn.mu.RLock()
	defer fn.mu.RUnlock()
	return fn.deaf[i]
}

var errPartitioned = errors.New("network partition (fault injection)")

// faultRaftTransport is a node's Raft transport: an InmemTransport (which the
// partitions disconnect) plus the "deaf" fault, in which the RPCs this node
// sends are delivered but their responses are lost. A deaf leader's entries
// reach the followers, yet it never learns that they committed: it steps
// down with proposals whose fate it cannot know, and the next leader commits
// them. Pipelining is refused while deaf so every append takes that path.
type faultRaftTransport struct {
	*raft.InmemTransport
	node int
	net  *faultNet
}

var errResponseLost = errors.New("raft response lost (fault injection)")

func (t *faultRaftTransport) lost(err error) error {
	if err == nil && t.net.isDeaf(t.node) {
		return errResponseLost
	}
	return err
}

func (t *faultRaftTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if t.net.isDeaf(t.node) {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	return t.InmemTransport.AppendEntriesPipeline(id, target)
}

func (t *faultRaftTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.lost(t.InmemTransport.AppendEntries(id, target, args, resp))
}

func (t *faultRaftTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.lost(t.InmemTransport.RequestVote(id, target, args, resp))
}

func (t *faultRaftTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.lost(t.InmemTransport.RequestPreVote(id, target, args, resp))
}

func (t *faultRaftTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.lost(t.InmemTransport.InstallSnapshot(id, target, args, resp, data))
}

func (t *faultRaftTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.lost(t.InmemTransport.TimeoutNow(id, target, args, resp))
}

// faultTransport is node `from`'s HTTP client transport. A request to a node
// it cannot reach fails as a dial would (nothing was delivered); a request
// whose partition starts while it is in flight, or that the injector picks,
// loses its response after the leader handled it.
type faultTransport struct {
	from int
	net  *faultNet
	base http.RoundTripper
}

func (ft *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	to, known := ft.net.byAddrLookup(req.URL.Host)
	if known && ft.net.blocked(ft.from, to) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errPartitioned}
	}
	resp, err := ft.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if known && (ft.net.blocked(to, ft.from) || ft.net.dropResponse()) {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("response from %s lost: %w", req.URL.Host, errPartitioned)
	}
	return resp, nil
}

func (fn *faultNet) byAddrLookup(addr string) (int, bool) {
	fn.mu.RLock()
	defer fn.mu.RUnlock()
	i, ok := fn.byAddr[addr]
	return i, ok
}

// faultCluster is an in-process cluster whose Raft and HTTP traffic can be
// partitioned and whose nodes can be restarted while clients run. It follows
// testCluster (cluster_test.go) but with node-to-node HTTP that obeys the
// partitions, small snapshot thresholds so snapshots and snapshot installs
// happen during the run, and a lock so clients and the nemesis can share it.
type faultCluster struct {
	t     *testing.T
	snap  snapshotPolicy
	net   *faultNet
	trans []*raft.InmemTransport
	srvs  []*httptest.Server
	dirs  []string
	base  *http.Transport

	mu    sync.RWMutex
	nodes []*Node
	up    []bool
}

// snapshotPolicy is when Raft snapshots (every threshold entries) and how
// much log it keeps after one.
type snapshotPolicy struct{ threshold, trailing uint64 }

func newFaultCluster(t *testing.T, size int, snap snapshotPolicy, seed int64) *faultCluster {
	t.Helper()
	c := &faultCluster{
		t:    t,
		snap: snap,
		net: &faultNet{
			byAddr: map[string]int{},
			rng:    rand.New(rand.NewSource(seed ^ 0x5eed)),
			drop:   0.02,
		},
		base: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, DisableCompression: true},
	}
	for i := 0; i < size; i++ {
		_, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("node%d", i)))
		c.trans = append(c.trans, tr)
		c.dirs = append(c.dirs, t.TempDir())
		c.net.cut = append(c.net.cut, make([]bool, size))
		c.net.deaf = append(c.net.deaf, false)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(&swapHandler{h: http.NotFoundHandler()})
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		c.srvs = append(c.srvs, srv)
		c.net.byAddr[ln.Addr().String()] = i
		c.nodes = append(c.nodes, nil)
		c.up = append(c.up, false)
	}
	t.Cleanup(c.close)
	c.applyNet()
	for i := 0; i < size; i++ {
		c.start(i, i == 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.nodes[0].WaitLeader(ctx); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	for i := 1; i < size; i++ {
		if err := c.nodes[0].Join(ctx, c.nodes[i].ID(), string(c.trans[i].LocalAddr()), c.srvs[i].Listener.Addr().String()); err != nil {
			t.Fatalf("join node%d: %v", i, err)
		}
	}
	for i := range c.nodes {
		c.waitReady(i, 10*time.Second)
	}
	return c
}

func (c *faultCluster) config(i int) Config {
	cfg := fastConfig(fmt.Sprintf("n%d", i), c.dirs[i], c.srvs[i].Listener.Addr().String(),
		&faultRaftTransport{InmemTransport: c.trans[i], node: i, net: c.net})
	cfg.HTTPClient = &http.Client{Transport: &faultTransport{from: i, net: c.net, base: c.base}}
	// With frequent snapshots and few trailing logs, a follower that falls
	// behind a partition or a restart catches up through InstallSnapshot.
	// With rare ones, a restarted node replays a long stretch of log it had
	// already applied and catches up from the log, so a replica that applied
	// entries twice keeps its wrong state for the convergence check to see.
	cfg.SnapshotThreshold = c.snap.threshold
	cfg.SnapshotInterval = 100 * time.Millisecond
	cfg.TrailingLogs = c.snap.trailing
	return cfg
}

// start opens node i on its data directory and transport.
func (c *faultCluster) start(i int, bootstrap bool) {
	c.t.Helper()
	n, err := Open(c.config(i), bootstrap)
	if err != nil {
		c.t.Fatalf("open node%d: %v", i, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/internal/", n.Internal())
	c.srvs[i].Config.Handler.(*swapHandler).set(mux)
	c.mu.Lock()
	c.nodes[i], c.up[i] = n, true
	c.mu.Unlock()
	// Raft closes its transport on shutdown: reconnect what the partition allows.
	c.applyNet()
}

// stop closes node i cleanly (a leader hands over leadership first).
func (c *faultCluster) stop(i int) {
	c.mu.Lock()
	n, up := c.nodes[i], c.up[i]
	c.up[i] = false
	c.mu.Unlock()
	if !up {
		return
	}
	if err := n.Close(); err != nil {
		c.t.Errorf("close node%d: %v", i, err)
	}
}

func (c *faultCluster) close() {
	c.heal()
	for i := range c.nodes {
		c.stop(i)
	}
	for _, s := range c.srvs {
		s.Close()
	}
	c.base.CloseIdleConnections()
}

// node returns node i if it is running.
func (c *faultCluster) node(i int) (*Node, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nodes[i], c.up[i]
}

func (c *faultCluster) size() int { return len(c.trans) }

// applyNet makes the Raft transports match the connectivity matrix.
func (c *faultCluster) applyNet() {
	for i := range c.trans {
		for j := range c.trans {
			if i == j {
				continue
			}
			if c.net.blocked(i, j) {
				c.trans[i].Disconnect(c.trans[j].LocalAddr())
			} else {
				c.trans[i].Connect(c.trans[j].LocalAddr(), c.trans[j])
			}
		}
	}
}

// cutOff separates the nodes in set from the others, both ways.
func (c *faultCluster) cutOff(set []int) {
	in := make([]bool, c.size())
	for _, i := range set {
		in[i] = true
	}
	c.net.mu.Lock()
	for i := range in {
		for j := range in {
			c.net.cut[i][j] = in[i] != in[j]
		}
	}
	c.net.mu.Unlock()
	c.applyNet()
}

// deafen makes node i's Raft RPCs lose their responses, and drops its
// replication pipelines so that the next appends go through the fault.
func (c *faultCluster) deafen(i int) {
	c.net.mu.Lock()
	c.net.deaf[i] = true
	c.net.mu.Unlock()
	c.trans[i].DisconnectAll()
	c.applyNet()
}

func (c *faultCluster) heal() {
	c.net.mu.Lock()
	for i := range c.net.cut {
		clear(c.net.cut[i])
	}
	clear(c.net.deaf)
	c.net.mu.Unlock()
	c.applyNet()
}

// leader returns the running node that believes it leads with the highest
// term (an isolated old leader may still believe it for a lease timeout), or
// -1 if none does.
func (c *faultCluster) leader() int {
	best, term := -1, uint64(0)
	for i := range c.nodes {
		n, up := c.node(i)
		if up && n.IsLeader() {
			if t := n.raft.CurrentTerm(); best < 0 || t > term {
				best, term = i, t
			}
		}
	}
	return best
}

func (c *faultCluster) waitLeader(timeout time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.leader(); l >= 0 {
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %s", timeout)
	return -1
}

func (c *faultCluster) waitReady(i int, timeout time.Duration) {
	c.t.Helper()
	n, _ := c.node(i)
	deadline := time.Now().Add(timeout)
	for n.Ready() != nil {
		if time.Now().After(deadline) {
			c.t.Fatalf("node%d not ready: %v", i, n.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// converged waits until every node has applied the leader's commit index
// and all have the same state digest, and returns the digest.
func (c *faultCluster) converged(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var digests []string
	for time.Now().Before(deadline) {
		digests = digests[:0]
		l := c.leader()
		same := l >= 0
		var commit uint64
		if l >= 0 {
			ln, _ := c.node(l)
			commit = ln.raft.CommitIndex()
		}
		for i := range c.nodes {
			n, _ := c.node(i)
			d, err := n.FSM().Digest()
			if err != nil {
				return "", fmt.Errorf("digest of node%d: %w", i, err)
			}
			if n.FSM().AppliedIndex() < commit || (len(digests) > 0 && d != digests[0]) {
				same = false
			}
			digests = append(digests, d)
		}
		if same {
			return digests[0], nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("replicas did not converge within %s: digests %v", timeout, digests)
}

// faultKeys hands out keys in generations: all clients share a few keys at a
// time, so checks on one key race, and a new generation starts once each key
// has seen about opsPerKey operations, so keys do not all end up spent. Each
// generation also has a quota key whose limit is never reached: every check
// on it changes state, so a replica that applies an entry twice diverges.
type faultKeys struct {
	ops        atomic.Int64
	perGen     int
	opsPerKey  int
	slidingLog *algo.Spec
	fixed      *algo.Spec
	quota      *algo.Spec
}

func newFaultKeys(window time.Duration) *faultKeys {
	spec := func(s algo.Spec) *algo.Spec {
		v, err := s.Validate()
		if err != nil {
			panic(err)
		}
		return &v
	}
	return &faultKeys{
		perGen: 4, opsPerKey: 12,
		slidingLog: spec(algo.Spec{Algorithm: algo.SlidingLog, Limit: 5, Window: int64(24 * time.Hour)}),
		fixed:      spec(algo.Spec{Algorithm: algo.FixedWindow, Limit: 4, Window: int64(window)}),
		quota:      spec(algo.Spec{Algorithm: algo.SlidingLog, Limit: 100000, Window: int64(24 * time.Hour)}),
	}
}

// next picks the key and limit of the next operation.
func (k *faultKeys) next(rng *rand.Rand) (string, *algo.Spec) {
	gen := int(k.ops.Add(1) / int64(k.perGen*k.opsPerKey))
	if rng.Intn(4) == 0 {
		return fmt.Sprintf("quota/%d", gen), k.quota
	}
	idx := gen*k.perGen + rng.Intn(k.perGen)
	if idx%2 == 0 {
		return fmt.Sprintf("sl/%d", idx), k.slidingLog
	}
	return fmt.Sprintf("fw/%d", idx), k.fixed
}

// faultRun drives clients against a faultCluster and records the history.
type faultRun struct {
	c     *faultCluster
	keys  *faultKeys
	start time.Time

	// gate lets the nemesis pause the clients: each operation holds it
	// shared, from its first attempt to its last retry.
	gate sync.RWMutex

	mu      sync.Mutex
	recs    []record
	specs   map[string]*algo.Spec
	oddErrs []string // errors the node should never return
	retries int      // request_id retries after an unknown outcome
}

func (r *faultRun) now() int64 { return int64(time.Since(r.start)) }

func (r *faultRun) add(rec record, spec *algo.Spec, key string) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.specs[key] = spec
	r.mu.Unlock()
}

// pickNode returns a random running node; clients reach partitioned nodes
// too, as real clients would.
func (r *faultRun) pickNode(rng *rand.Rand) *Node {
	for {
		i := rng.Intn(r.c.size())
		if n, up := r.c.node(i); up {
			return n
		}
	}
}

// attempt runs one Check and classifies what the client learned.
func (r *faultRun) attempt(n *Node, op fsm.Op) (limiterOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := n.Check(ctx, []fsm.Op{op})
	switch {
	case err == nil && len(res) == 1 && res[0].Err == nil && len(res[0].Decisions) == 1:
		o := outRefused
		if res[0].Allowed {
			o = outAllowed
		}
		return limiterOutput{Outcome: o, Remaining: res[0].Decisions[0].Remaining}, nil
	case err == nil:
		return limiterOutput{Outcome: outUnknown}, fmt.Errorf("malformed result %+v", res)
	case errors.Is(err, ErrOutcomeUnknown):
		return limiterOutput{Outcome: outUnknown}, nil
	case errors.Is(err, ErrNoLeader):
		return limiterOutput{Outcome: outNotApplied}, nil
	default:
		return limiterOutput{Outcome: outUnknown}, err
	}
}

// client runs operations until stop is closed. Half of the checks carry a
// request_id and are retried with it after an unknown outcome, as the API
// tells clients to; the others accept the unknown.
func (r *faultRun) client(id int, seed int64, stop <-chan struct{}) {
	rng := rand.New(rand.NewSource(seed))
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		r.gate.RLock()
		key, spec := r.keys.next(rng)
		var cost int64 = 1
		switch p := rng.Float64(); {
		case p < 0.15:
			cost = 0
		case p < 0.30:
			cost = 2
		}
		op := fsm.Op{Checks: []fsm.Check{{Key: key, Spec: spec, Cost: cost}}}
		retry := rng.Intn(2) == 0
		if retry {
			op.RequestID = fmt.Sprintf("c%d-%d", id, seq)
		}
		rec := record{Client: id, In: limiterInput{Key: key, Limit: spec.Limit, Cost: cost}, Call: r.now()}
		out, err := r.attempt(r.pickNode(rng), op)
		unknown := out.Outcome == outUnknown
		for tries := 0; retry && err == nil && tries < 5 && (out.Outcome == outUnknown || out.Outcome == outNotApplied); tries++ {
			time.Sleep(time.Duration(20+rng.Intn(80)) * time.Millisecond)
			r.mu.Lock()
			r.retries++
			r.mu.Unlock()
			out, err = r.attempt(r.pickNode(rng), op)
			unknown = unknown || out.Outcome == outUnknown
		}
		// Once an attempt may have been applied, only a definite answer (a
		// replay or a fresh decision under the same request_id) settles it.
		if unknown && out.Outcome == outNotApplied {
			out.Outcome = outUnknown
		}
		rec.Out, rec.Return = out, r.now()
		if err != nil {
			r.mu.Lock()
			r.oddErrs = append(r.oddErrs, fmt.Sprintf("client %d %s: %v", id, key, err))
			r.mu.Unlock()
		}
		r.add(rec, spec, key)
		r.gate.RUnlock()
	}
}

// nemesis is one fault. It returns what to undo after the hold (nil: nothing).
type nemesis struct {
	name string
	do   func(c *faultCluster, rng *rand.Rand) (undo func())
}

var nemeses = []nemesis{
	{"partition-leader", func(c *faultCluster, rng *rand.Rand) func() {
		if l := c.leader(); l >= 0 {
			c.cutOff([]int{l})
		}
		return c.heal
	}},
	{"deaf-leader", func(c *faultCluster, rng *rand.Rand) func() {
		if l := c.leader(); l >= 0 {
			c.deafen(l)
		}
		return c.heal
	}},
	{"isolate-minority", func(c *faultCluster, rng *rand.Rand) func() {
		k := 1 + rng.Intn((c.size()-1)/2)
		c.cutOff(rng.Perm(c.size())[:k])
		return c.heal
	}},
	{"leader-in-minority", func(c *faultCluster, rng *rand.Rand) func() {
		l := c.leader()
		if l < 0 {
			return c.heal
		}
		set := []int{l}
		for _, i := range rng.Perm(c.size()) {
			if len(set) < (c.size()-1)/2 && i != l {
				set = append(set, i)
			}
		}
		c.cutOff(set)
		return c.heal
	}},
	{"transfer-leadership", func(c *faultCluster, rng *rand.Rand) func() {
		if l := c.leader(); l >= 0 {
			if n, up := c.node(l); up {
				if err := n.raft.LeadershipTransfer().Error(); err != nil {
					c.t.Logf("leadership transfer: %v", err)
				}
			}
		}
		return nil
	}},
	// Restarts are quick, so the node catches up from the log rather than
	// from a snapshot install that would paper over a replay bug.
	{"restart-follower", func(c *faultCluster, rng *rand.Rand) func() {
		l := c.leader()
		i := rng.Intn(c.size())
		if i == l {
			i = (i + 1) % c.size()
		}
		c.stop(i)
		time.Sleep(time.Duration(rng.Intn(50)) * time.Millisecond)
		c.start(i, false)
		return nil
	}},
	{"restart-leader", func(c *faultCluster, rng *rand.Rand) func() {
		if l := c.leader(); l >= 0 {
			c.stop(l)
			time.Sleep(time.Duration(rng.Intn(50)) * time.Millisecond)
			c.start(l, false)
		}
		return nil
	}},
}

// leaderID names the current leader and its term ("" if none).
func (c *faultCluster) leaderID() string {
	l := c.leader()
	if l < 0 {
		return ""
	}
	n, _ := c.node(l)
	return fmt.Sprintf("%s@%d", n.ID(), n.raft.CurrentTerm())
}

// leaderWatch counts leader changes seen by polling, starting from last.
func leaderWatch(c *faultCluster, last string, stop <-chan struct{}, changes *atomic.Int64) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if id := c.leaderID(); id != "" && id != last {
			changes.Add(1)
			last = id
		}
	}
}

// chaosSummary is the machine-readable result scripts/chaos.sh aggregates.
type chaosSummary struct {
	Test           string  `json:"test"`
	Nodes          int     `json:"nodes"`
	Rounds         int     `json:"rounds"`
	LeaderChanges  int64   `json:"leader_changes"`
	Ops            int     `json:"ops"`
	Allowed        int     `json:"allowed"`
	Refused        int     `json:"refused"`
	Unknown        int     `json:"unknown"`
	NotApplied     int     `json:"not_applied"`
	Retries        int     `json:"request_id_retries"`
	OverAdmissions int     `json:"over_admissions"`
	LostAcks       int64   `json:"lost_acknowledged"`
	Phantom        int64   `json:"phantom"`
	Linearizable   string  `json:"linearizable"`
	Seconds        float64 `json:"seconds"`
}

// Three nodes snapshot rarely and catch up from the log after faults; five
// nodes snapshot often, keep few trailing logs and catch up through
// snapshot installs.
func TestFaultsThreeNodes(t *testing.T) {
	runFaults(t, 3, len(nemeses), 6, snapshotPolicy{threshold: 2048, trailing: 4096})
}

func TestFaultsFiveNodes(t *testing.T) {
	if testing.Short() && os.Getenv("LIMITD_CHAOS_ROUNDS") == "" {
		t.Skip("-short: the three-node fault test covers the same faults")
	}
	runFaults(t, 5, len(nemeses), 8, snapshotPolicy{threshold: 64, trailing: 16})
}

func runFaults(t *testing.T, size, shortRounds, clients int, snap snapshotPolicy) {
	rounds := chaosRounds(t, shortRounds)
	seed := chaosSeed(t)
	rng := rand.New(rand.NewSource(seed))
	began := time.Now()
	c := newFaultCluster(t, size, snap, seed)
	run := &faultRun{
		c:     c,
		keys:  newFaultKeys(stableWindow(time.Duration(rounds)*10*time.Second + 10*time.Minute)),
		start: time.Now(),
		specs: map[string]*algo.Spec{},
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var changes atomic.Int64
	first := c.leaderID()
	wg.Add(1)
	go func() { defer wg.Done(); leaderWatch(c, first, stop, &changes) }()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int, s int64) { defer wg.Done(); run.client(i, s, stop) }(i, rng.Int63())
	}
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopClients() // also when a round fails the test

	// Every fault appears once per len(nemeses) rounds, in a seeded order.
	order := rng.Perm(len(nemeses))
	for round := 0; round < rounds; round++ {
		nm := nemeses[order[round%len(nemeses)]]
		if round%len(nemeses) == len(nemeses)-1 {
			order = rng.Perm(len(nemeses))
		}
		undo := nm.do(c, rng)
		time.Sleep(time.Duration(300+rng.Intn(400)) * time.Millisecond)
		if undo != nil {
			undo()
		}
		c.waitLeader(10 * time.Second)
		time.Sleep(time.Duration(100+rng.Intn(200)) * time.Millisecond)
		// Pause the clients and check that every replica reaches the same
		// state: a replica that diverged (say, replayed entries after a
		// restart) must be caught before a snapshot install overwrites it.
		run.gate.Lock()
		_, err := c.converged(20 * time.Second)
		run.gate.Unlock()
		if err != nil {
			t.Fatalf("round %d (%s): %v", round, nm.name, err)
		}
		t.Logf("round %d: %s (leader changes so far %d)", round, nm.name, changes.Load())
	}
	stopClients()

	c.heal()
	c.waitLeader(10 * time.Second)
	digest, err := c.converged(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// Final peeks, through every node in turn, once the cluster is whole: each
	// key's state must account for its acknowledged decisions.
	run.mu.Lock()
	keys := make([]string, 0, len(run.specs))
	for k := range run.specs {
		keys = append(keys, k)
	}
	run.mu.Unlock()
	sort.Strings(keys)
	final := map[string]int64{} // key → remaining
	const chunk = 200
	for from := 0; from < len(keys); from += chunk {
		part := keys[from:min(from+chunk, len(keys))]
		ops := make([]fsm.Op, len(part))
		for j, key := range part {
			ops[j] = fsm.Op{Checks: []fsm.Check{{Key: key, Spec: run.specs[key], Cost: 0}}}
		}
		call := run.now()
		var res []fsm.Result
		for tries := 0; ; tries++ {
			n, _ := c.node((from / chunk) % size)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err = n.Check(ctx, ops)
			cancel()
			if err == nil {
				break
			}
			if tries == 20 {
				t.Fatalf("final peeks: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		ret := run.now()
		for j, key := range part {
			if len(res) != len(part) || res[j].Err != nil || len(res[j].Decisions) != 1 {
				t.Fatalf("final peek of %s: malformed result %+v", key, res)
			}
			out := limiterOutput{Outcome: outRefused, Remaining: res[j].Decisions[0].Remaining}
			if res[j].Allowed {
				out.Outcome = outAllowed
			}
			run.add(record{Client: clients, In: limiterInput{Key: key, Limit: run.specs[key].Limit}, Out: out, Call: call, Return: ret}, run.specs[key], key)
			final[key] = out.Remaining
		}
	}
	if d, err := c.converged(10 * time.Second); err != nil {
		t.Fatal(err)
	} else if d != digest {
		t.Errorf("peeks changed the replicated state: digest %s, then %s", digest, d)
	}

	sum := chaosSummary{Test: t.Name(), Nodes: size, Rounds: rounds, LeaderChanges: changes.Load(), Retries: run.retries}
	for _, r := range run.recs {
		if r.Client == clients {
			continue // the final peeks
		}
		sum.Ops++
		switch r.Out.Outcome {
		case outAllowed:
			sum.Allowed++
		case outRefused:
			sum.Refused++
		case outUnknown:
			sum.Unknown++
		case outNotApplied:
			sum.NotApplied++
		}
	}

	tl := tally(run.recs)
	var detail []string
	sum.OverAdmissions, detail = overAdmissions(tl)
	for _, key := range keys {
		k := tl[key]
		used := k.Limit - final[key]
		if used < min(k.Allowed, k.Limit) {
			sum.LostAcks += min(k.Allowed, k.Limit) - used
			detail = append(detail, fmt.Sprintf("%s: state shows %d used, %d were acknowledged", key, used, k.Allowed))
		}
		if used > k.Allowed+k.Unknown {
			sum.Phantom += used - k.Allowed - k.Unknown
			detail = append(detail, fmt.Sprintf("%s: state shows %d used, only %d acknowledged + %d unknown", key, used, k.Allowed, k.Unknown))
		}
	}
	res := linearizable(t, run.recs, time.Minute)
	sum.Linearizable = string(res)
	sum.Seconds = time.Since(began).Seconds()
	line, _ := json.Marshal(sum)
	t.Logf("CHAOS-SUMMARY %s", line)

	if sum.Ops < 10*rounds {
		t.Errorf("only %d operations in %d rounds: the clients were starved, the run proves little", sum.Ops, rounds)
	}
	if sum.Allowed == 0 || sum.Refused == 0 {
		t.Errorf("allowed %d, refused %d: the run must exercise both", sum.Allowed, sum.Refused)
	}
	for i, d := range detail {
		if i == 20 {
			t.Errorf("... and %d more", len(detail)-i)
			break
		}
		t.Error(d)
	}
	if len(run.oddErrs) > 0 {
		t.Errorf("%d checks failed with errors outside the contract (want ErrNoLeader or ErrOutcomeUnknown), e.g. %s", len(run.oddErrs), run.oddErrs[0])
	}
	switch res {
	case porcupine.Illegal:
		t.Error("porcupine: the history is not linearizable against the limiter model")
	case porcupine.Unknown:
		t.Log("porcupine: the check timed out; no violation found in the time given")
	}
}
