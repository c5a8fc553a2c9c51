// Package clustertest owns limitd's in-process cluster harness for tests: N
// cluster.Nodes in one process, on raft's in-memory transport (or loopback
// TCP, optionally with mutual TLS), each with a loopback HTTP server serving
// the node's /internal/ endpoints (or a handler the test gives, such as the
// full HTTP API) so that followers forward to the leader for real.
//
// Node 0 bootstraps; the others join through it, and a join whose outcome is
// unknown is sent again (a join is idempotent). Faults are options and
// methods: Disconnect, Partition, Deafen and Heal cut Raft and node-to-node
// HTTP traffic alike (in-memory transport only); Stop, Start and Restart
// reopen a node on the same data directory; Options.Snapshots sets the
// snapshot policy and Options.DropResponses loses a share of forwarded
// responses, drawn from Options.Seed.
//
// It follows hashicorp/raft's testing.go: MakeCluster(t, n, conf) for the
// common case, MakeClusterOpts for the rest. It imports package testing and
// is meant for tests only.
package clustertest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
)

// Timeout bounds each wait of the harness (leader, readiness, joins,
// convergence) unless a method takes its own.
const Timeout = 30 * time.Second

// FastConfig is a node configuration with Raft timings for loopback tests
// (elections in a few hundred milliseconds) and logs discarded. tr may be
// nil for the TCP transport on RaftAddr, which the caller then sets.
func FastConfig(id, dir, httpAddr string, tr raft.Transport) cluster.Config {
	cfg := cluster.Config{
		NodeID: id, HTTPAddr: httpAddr, DataDir: dir,
		Transport:        tr,
		HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		ApplyTimeout: 2 * time.Second, ExpireInterval: 50 * time.Millisecond,
		LogOutput: io.Discard,
	}
	if tr != nil {
		cfg.RaftAddr = string(tr.LocalAddr())
	}
	return cfg
}

// SteadyTimers gives cfg Raft timers at half the daemon's defaults instead
// of FastConfig's: for tests whose answers a leadership change would alter
// (an outcome_unknown, a retried forward) on a loaded or race-built test
// host. Elections and failovers then take about a second.
func SteadyTimers(_ int, cfg *cluster.Config) {
	cfg.HeartbeatTimeout = cluster.DefaultHeartbeatTimeout / 2
	cfg.ElectionTimeout = cluster.DefaultElectionTimeout / 2
	cfg.LeaderLeaseTimeout = cluster.DefaultLeaderLeaseTimeout / 2
}

// SnapshotPolicy is when Raft snapshots (every Threshold entries, checked
// every Interval) and how many log entries it keeps after one. Zero fields
// keep cluster.Config's defaults.
type SnapshotPolicy struct {
	Threshold, Trailing uint64
	Interval            time.Duration
}

// Options configures MakeClusterOpts. The zero value (with Nodes set) is a
// cluster on the in-memory transport serving /internal/.
type Options struct {
	Nodes int
	// Config adjusts node i's configuration, at every start.
	Config func(i int, cfg *cluster.Config)
	// Handler is what node i's HTTP server serves (default: n.Internal()
	// under /internal/). It is called again at every start.
	Handler func(i int, n *cluster.Node) http.Handler
	// Join adds node i (i > 0) to the cluster (default: c.Node(0).Join with
	// the node's Raft and HTTP addresses). An error matching
	// cluster.ErrOutcomeUnknown is retried.
	Join func(c *Cluster, i int) error
	// TCP runs Raft over loopback TCP instead of the in-memory transport;
	// network faults are then unavailable.
	TCP bool
	// TLS, when set, gives node i its mutual-TLS configuration: Raft and
	// the HTTP servers run over it (implies TCP).
	TLS func(i int) *tls.Config
	// Snapshots is the snapshot policy of every node.
	Snapshots SnapshotPolicy
	// DropResponses is the probability that a forwarded request, delivered
	// and handled, loses its response (in-memory transport only).
	DropResponses float64
	// Seed seeds the response dropping.
	Seed int64
	// SkipShort skips the test under -short (the cluster is slow to start).
	SkipShort bool
	// Ports, when set, gives node i the shared Raft port and data directory
	// of process i (groups.go): the nodes run Raft group Group over it
	// (implies TCP), beside the other groups' clusters on the same Ports.
	Ports *Ports
	// Group is the Raft group the nodes run (with Ports).
	Group uint32
}

// Cluster is a running in-process cluster. Its methods may be called from
// several goroutines (clients and a fault injector); Stop, Start and the
// network faults are serialised.
type Cluster struct {
	t     testing.TB
	opts  Options
	net   *network
	trans []*raft.InmemTransport // nil entries with TCP
	raft  []string               // Raft addresses
	srvs  []*httptest.Server
	dirs  []string
	tlsc  []*tls.Config
	base  *http.Transport

	life sync.Mutex // serialises Stop and Start

	mu    sync.RWMutex
	nodes []*cluster.Node
	up    []bool
}

// MakeCluster starts an n-node cluster on the in-memory transport, conf (may
// be nil) adjusting each node's configuration, and waits until every node is
// ready and the replicas agree. It is closed when the test ends.
func MakeCluster(t testing.TB, n int, conf func(i int, cfg *cluster.Config)) *Cluster {
	t.Helper()
	return MakeClusterOpts(t, Options{Nodes: n, Config: conf})
}

// MakeClusterOpts is MakeCluster with every option.
func MakeClusterOpts(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.SkipShort && testing.Short() {
		t.Skip("-short: starts a Raft cluster")
	}
	if opts.Nodes < 1 {
		t.Fatalf("clustertest: %d nodes", opts.Nodes)
	}
	if opts.TLS != nil || opts.Ports != nil {
		opts.TCP = true
	}
	size := opts.Nodes
	c := &Cluster{
		t:    t,
		opts: opts,
		net:  newNetwork(size, opts.DropResponses, opts.Seed),
		base: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, DisableCompression: true},
	}
	for i := 0; i < size; i++ {
		if opts.Ports != nil { // the process's data dir: the group's is under it (cluster.GroupDataDir)
			c.dirs = append(c.dirs, opts.Ports.dirs[i])
		} else {
			c.dirs = append(c.dirs, t.TempDir()) // before Close is registered: cleanups run last in, first out
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(&swapHandler{h: http.NotFoundHandler()})
		srv.Listener.Close()
		srv.Listener = ln
		if opts.TLS != nil {
			tc := opts.TLS(i)
			c.tlsc = append(c.tlsc, tc)
			srv.TLS = tc.Clone()
			srv.TLS.ClientAuth = tls.VerifyClientCertIfGiven
			srv.StartTLS()
		} else {
			srv.Start()
		}
		c.srvs = append(c.srvs, srv)
		c.net.byAddr[ln.Addr().String()] = i
		if opts.Ports != nil {
			c.trans = append(c.trans, nil)
			c.raft = append(c.raft, opts.Ports.Addr(i))
		} else if opts.TCP {
			c.trans = append(c.trans, nil)
			c.raft = append(c.raft, freeAddr(t))
		} else {
			// host:port, as the join API requires of Raft addresses.
			addr := fmt.Sprintf("node%d:8300", i)
			_, tr := raft.NewInmemTransport(raft.ServerAddress(addr))
			c.trans = append(c.trans, tr)
			c.raft = append(c.raft, addr)
		}
		c.nodes = append(c.nodes, nil)
		c.up = append(c.up, false)
	}
	t.Cleanup(c.Close)
	c.applyNet()
	for i := 0; i < size; i++ {
		c.open(i, i == 0)
		if i == 0 {
			c.waitNodeLeader(0)
		}
	}
	for i := 1; i < size; i++ {
		if err := c.Join(i); err != nil {
			t.Fatalf("clustertest: join node%d: %v", i, err)
		}
	}
	for i := 0; i < size; i++ {
		c.WaitReady(i)
	}
	c.WaitConverged()
	return c
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Join adds node i through Options.Join (default: node 0's Join), sending
// it again while its outcome is unknown: a join is idempotent, and a
// one-node leader may step down under load with the join in flight.
func (c *Cluster) Join(i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for {
		var err error
		if c.opts.Join != nil {
			err = c.opts.Join(c, i)
		} else {
			err = c.Node(0).Join(ctx, c.Node(i).ID(), c.raft[i], c.HTTPAddr(i))
		}
		if !errors.Is(err, cluster.ErrOutcomeUnknown) || ctx.Err() != nil {
			return err
		}
		c.Leader()
	}
}

// Config is node i's configuration as the harness opens it.
func (c *Cluster) Config(i int) cluster.Config {
	var tr raft.Transport
	if c.trans[i] != nil {
		tr = &faultRaftTransport{InmemTransport: c.trans[i], node: i, net: c.net}
	}
	cfg := FastConfig(fmt.Sprintf("n%d", i), c.dirs[i], c.HTTPAddr(i), tr)
	cfg.RaftAddr = c.raft[i]
	if p := c.opts.Ports; p != nil {
		cfg.RaftMux, cfg.Group = p.muxes[i], c.opts.Group
	}
	var rt http.RoundTripper = c.base
	if c.opts.TLS != nil {
		cfg.TLS, cfg.HTTPScheme = c.tlsc[i], "https"
		rt = &http.Transport{TLSClientConfig: c.tlsc[i]}
	}
	if !c.opts.TCP {
		rt = &faultTransport{from: i, net: c.net, base: rt}
	}
	cfg.HTTPClient = &http.Client{Transport: rt}
	if p := c.opts.Snapshots; p != (SnapshotPolicy{}) {
		cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = p.Threshold, p.Trailing, p.Interval
	}
	if c.opts.Config != nil {
		c.opts.Config(i, &cfg)
	}
	return cfg
}

// open opens node i on its data directory and serves it.
func (c *Cluster) open(i int, bootstrap bool) {
	c.t.Helper()
	n, err := cluster.Open(c.Config(i), bootstrap)
	if err != nil {
		c.t.Fatalf("clustertest: open node%d: %v", i, err)
	}
	var h http.Handler
	if c.opts.Handler != nil {
		h = c.opts.Handler(i, n)
	} else {
		mux := http.NewServeMux()
		mux.Handle("/internal/", n.Internal())
		h = mux
	}
	c.srvs[i].Config.Handler.(*swapHandler).set(h)
	c.mu.Lock()
	c.nodes[i], c.up[i] = n, true
	c.mu.Unlock()
	// Raft closes its transport on shutdown: reconnect what the faults allow.
	c.applyNet()
}

// swapHandler lets a restarted node serve on the same listener.
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

// Size is the number of nodes, running or not.
func (c *Cluster) Size() int { return len(c.nodes) }

// Node returns node i (the last one opened, even if stopped since).
func (c *Cluster) Node(i int) *cluster.Node {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nodes[i]
}

// Running returns node i and whether it is running, as of one instant.
func (c *Cluster) Running(i int) (*cluster.Node, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nodes[i], c.up[i]
}

// Up reports whether node i is running.
func (c *Cluster) Up(i int) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.up[i]
}

// Nodes returns every node (the last one opened for each index).
func (c *Cluster) Nodes() []*cluster.Node {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]*cluster.Node(nil), c.nodes...)
}

// HTTPAddr is node i's HTTP address (host:port; stable across restarts).
func (c *Cluster) HTTPAddr(i int) string { return c.srvs[i].Listener.Addr().String() }

// URL is node i's HTTP base URL.
func (c *Cluster) URL(i int) string { return c.srvs[i].URL }

// RaftAddr is node i's Raft address.
func (c *Cluster) RaftAddr(i int) string { return c.raft[i] }

// DataDir is node i's data directory (kept across restarts).
func (c *Cluster) DataDir(i int) string { return c.dirs[i] }

// Stop closes node i cleanly (a leader hands over leadership first). A
// stopped node stays stopped.
func (c *Cluster) Stop(i int) {
	c.life.Lock()
	defer c.life.Unlock()
	c.stop(i)
}

func (c *Cluster) stop(i int) {
	c.mu.Lock()
	n, up := c.nodes[i], c.up[i]
	c.up[i] = false
	c.mu.Unlock()
	if !up {
		return
	}
	if err := n.Close(); err != nil {
		c.t.Errorf("clustertest: close node%d: %v", i, err)
	}
}

// MarkStopped records that node i was closed by the test itself.
func (c *Cluster) MarkStopped(i int) {
	c.mu.Lock()
	c.up[i] = false
	c.mu.Unlock()
}

// Start opens a stopped node i again on its data directory and addresses;
// it rejoins as the member it was.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.life.Lock()
	defer c.life.Unlock()
	if c.Up(i) {
		c.t.Fatalf("clustertest: start node%d: already running", i)
	}
	c.open(i, false)
}

// Restart stops node i and starts it again.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Stop(i)
	c.Start(i)
}

// Close stops every node and server. It runs when the test ends.
func (c *Cluster) Close() {
	if !c.opts.TCP {
		c.Heal()
	}
	c.life.Lock()
	for i := range c.nodes {
		c.stop(i)
	}
	c.life.Unlock()
	for _, s := range c.srvs {
		s.Close()
	}
	c.base.CloseIdleConnections()
}

func (c *Cluster) waitNodeLeader(i int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := c.Node(i).WaitLeader(ctx); err != nil {
		c.t.Fatalf("clustertest: node%d sees no leader: %v", i, err)
	}
}

// WaitReady waits until running node i is ready (cluster.Node.Ready).
func (c *Cluster) WaitReady(i int) {
	c.t.Helper()
	n := c.Node(i)
	deadline := time.Now().Add(Timeout)
	for n.Ready() != nil {
		if time.Now().After(deadline) {
			c.t.Fatalf("clustertest: node%d not ready: %v", i, n.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LeaderNow returns the running node that believes it leads with the
// highest term (an isolated old leader may still believe it for a lease
// timeout), or -1 if none does.
func (c *Cluster) LeaderNow() int {
	best, term := -1, uint64(0)
	for i := range c.nodes {
		c.mu.RLock()
		n, up := c.nodes[i], c.up[i]
		c.mu.RUnlock()
		if !up || !n.IsLeader() {
			continue
		}
		st, err := n.Status(context.Background())
		if err != nil {
			continue
		}
		if best < 0 || st.Term > term {
			best, term = i, st.Term
		}
	}
	return best
}

// WaitLeader waits up to timeout for a leader and returns its index.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.LeaderNow(); l >= 0 {
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("clustertest: no leader within %s", timeout)
	return -1
}

// Leader waits for a leader and returns its index.
func (c *Cluster) Leader() int {
	c.t.Helper()
	return c.WaitLeader(Timeout)
}

// Converged waits up to timeout until every running node has applied the
// leader's commit index and all have the same state digest, and returns
// the digest.
func (c *Cluster) Converged(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var digests []string
	for time.Now().Before(deadline) {
		digests = digests[:0]
		l := c.LeaderNow()
		same := l >= 0
		// Every replica must have applied what the leader's state machine
		// has: Raft's commit index can run ahead of it for good (barriers
		// and configuration entries never reach the state machine).
		var commit uint64
		if l >= 0 {
			commit = c.Node(l).FSM().AppliedIndex()
		}
		for i := range c.nodes {
			if !c.Up(i) {
				continue
			}
			n := c.Node(i)
			d, err := n.FSM().Digest()
			if err != nil {
				return "", fmt.Errorf("digest of node%d: %w", i, err)
			}
			if n.FSM().AppliedIndex() < commit || (len(digests) > 0 && d != digests[0]) {
				same = false
			}
			digests = append(digests, d)
		}
		if same && len(digests) > 0 {
			return digests[0], nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("replicas did not converge within %s: digests %v", timeout, digests)
}

// WaitConverged is Converged with the harness timeout; it fails the test
// if the replicas do not converge.
func (c *Cluster) WaitConverged() string {
	c.t.Helper()
	d, err := c.Converged(Timeout)
	if err != nil {
		c.t.Fatalf("clustertest: %v", err)
	}
	return d
}
