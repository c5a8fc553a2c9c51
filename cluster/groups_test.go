package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/cluster/raftnet"
	"github.com/limitd/limitd/internal/testcerts"
)

// leaderTerm is group c's leader and its term.
func leaderTerm(t *testing.T, c *clustertest.Cluster) (int, uint64) {
	t.Helper()
	l := c.Leader()
	st, err := c.Node(l).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l, st.Term
}

// spendIn spends count units of key in group c through node i (a follower
// forwards to its group's leader), failing the test on an error.
func spendIn(t *testing.T, c *clustertest.Cluster, i int, key string, count int) {
	t.Helper()
	spec := slidingLog(1000, time.Hour)
	for j := 0; j < count; j++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Node(i).Check(ctx, check(key, spec))
		cancel()
		if err != nil {
			t.Fatalf("check %s in group through node%d: %v", key, i, err)
		}
	}
}

// Three nodes hosting three Raft groups over one Raft port each (mutual
// TLS): every group elects its own leader and replicates its own checks to
// its own state, the group's data under groups/<g>/ (group 0 at the data
// dir's root); the ports refuse nothing.
func TestGroupsShareOnePortAndReplicateIndependently(t *testing.T) {
	ca, err := testcerts.NewCA("limitd test CA")
	if err != nil {
		t.Fatal(err)
	}
	nodeTLS := func(i int) *tls.Config {
		pair, err := ca.Node(fmt.Sprintf("n%d", i))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ca.TLS(pair)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	gs := clustertest.MakeGroups(t, 3, clustertest.Options{Nodes: 3, TLS: nodeTLS, SkipShort: true})
	spec := slidingLog(1000, time.Hour)
	for g, c := range gs.Groups {
		for i := 0; i < 3; i++ {
			if c.RaftAddr(i) != gs.Ports.Addr(i) {
				t.Fatalf("group %d node%d on Raft address %s, its port is %s", g, i, c.RaftAddr(i), gs.Ports.Addr(i))
			}
		}
		spendIn(t, c, (g+1)%3, fmt.Sprintf("k%d", g), g+1) // through a node that may be a follower
	}
	for g, c := range gs.Groups {
		c.WaitConverged()
		for i := 0; i < 3; i++ {
			n := c.Node(i)
			for h := range gs.Groups {
				want := int64(1000)
				if h == g {
					want -= int64(g + 1)
				}
				// A peek through the log of group g on node i: only its own key was spent.
				if got := remaining(t, n, fmt.Sprintf("k%d", h), spec); got != want {
					t.Fatalf("group %d node%d: k%d has %d left, want %d", g, i, h, got, want)
				}
			}
			dir := cluster.GroupDataDir(gs.Ports.DataDir(i), uint32(g))
			if _, err := os.Stat(filepath.Join(dir, "fsm.db")); err != nil {
				t.Fatalf("group %d node%d: %v", g, i, err)
			}
		}
	}
	if want := filepath.Join(gs.Ports.DataDir(0), "groups", "2"); cluster.GroupDataDir(gs.Ports.DataDir(0), 2) != want {
		t.Fatalf("group 2's data dir is %s, want %s", cluster.GroupDataDir(gs.Ports.DataDir(0), 2), want)
	}
	for i := 0; i < 3; i++ {
		if s := gs.Ports.Mux(i).Stats(); s != (raftnet.MuxStats{}) {
			t.Fatalf("node%d's port refused connections: %+v", i, s)
		}
	}
}

// A leadership transfer in one group moves that group's leader and term
// only: the other groups' leaders and terms stay as they were.
func TestGroupsLeadershipTransferLeavesOtherGroups(t *testing.T) {
	gs := clustertest.MakeGroups(t, 3, clustertest.Options{Nodes: 3, Config: clustertest.SteadyTimers, SkipShort: true})
	type lt struct {
		leader int
		term   uint64
	}
	before := map[int]lt{}
	for g, c := range gs.Groups {
		l, term := leaderTerm(t, c)
		before[g] = lt{l, term}
	}
	moved := gs.Group(1)
	if err := moved.Node(before[1].leader).TransferLeadership(); err != nil {
		t.Fatalf("transfer in group 1: %v", err)
	}
	deadline := time.Now().Add(clustertest.Timeout)
	for {
		if l, term := leaderTerm(t, moved); l != before[1].leader && term > before[1].term {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("group 1's leadership did not move")
		}
		time.Sleep(20 * time.Millisecond)
	}
	spendIn(t, moved, 0, "after-transfer", 1)
	for _, g := range []int{0, 2} {
		if l, term := leaderTerm(t, gs.Group(g)); l != before[g].leader || term != before[g].term {
			t.Fatalf("group %d: leader node%d term %d after group 1's transfer, was node%d term %d", g, l, term, before[g].leader, before[g].term)
		}
	}
}

// A group's node stopped while its group goes on catches up when started
// again on the shared port (its group reopened on it), and the node's other
// groups, running throughout, are not disturbed.
func TestGroupRestartCatchesUpOnSharedPort(t *testing.T) {
	gs := clustertest.MakeGroups(t, 2, clustertest.Options{Nodes: 3, SkipShort: true})
	c := gs.Group(1)
	l := c.Leader()
	down := (l + 1) % 3
	lead0, termBefore := leaderTerm(t, gs.Group(0))
	c.Stop(down)
	spendIn(t, c, l, "while-down", 5)
	spendIn(t, gs.Group(0), gs.Group(0).Leader(), "other-group", 2)
	c.Start(down)
	c.WaitReady(down)
	c.WaitConverged()
	if got := remaining(t, c.Node(down), "while-down", slidingLog(1000, time.Hour)); got != 995 {
		t.Fatalf("the restarted node's group sees %d left, want 995", got)
	}
	gs.Group(0).WaitConverged()
	if l0, term0 := leaderTerm(t, gs.Group(0)); l0 != lead0 || term0 != termBefore {
		t.Fatalf("group 0: leader node%d term %d after group 1's restart, was node%d term %d", l0, term0, lead0, termBefore)
	}
}

// v1Listener accepts as a node of today's build does: a connection whose
// preamble does not start "limitd-raft/1 " is refused (that build's
// readPreamble), so a v2 preamble for group 0 would fail this test.
type v1Listener struct{ net.Listener }

func (l v1Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &v1Conn{Conn: c}, nil
}

type v1Conn struct {
	net.Conn
	seen int // preamble bytes checked
}

func (c *v1Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	const v1 = "limitd-raft/1 "
	for i := 0; i < n && c.seen < len(v1); i++ {
		if b[i] != v1[c.seen] {
			c.Conn.Close()
			return 0, fmt.Errorf("not a limitd raft preamble (today's build reads only %q)", v1)
		}
		c.seen++
	}
	return n, err
}

// A node of today's build (a transport of its own that reads only the v1
// preamble) forms group 0 with a node of this build whose port also hosts
// group 1: the v2 node speaks v1 for group 0, the rolling-upgrade rule.
func TestV1PeerFormsGroupZeroWithSharedPortNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := raftnet.NewMuxOn(ln, nil, "n0", 2*time.Second, hclog.NewNullLogger())
	t.Cleanup(func() { mux.Close() })
	oldLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := cluster.NewStreamTransport(v1Listener{oldLn}, nil, "n1")
	t.Cleanup(func() { old.Close() })
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 2, TCP: true, SkipShort: true,
		Config: func(i int, cfg *cluster.Config) {
			if i == 0 { // this build, on the shared port
				cfg.RaftMux, cfg.RaftAddr = mux, mux.Addr().String()
			} else {
				cfg.Transport, cfg.RaftAddr = old, string(old.LocalAddr())
			}
		},
		Join: func(c *clustertest.Cluster, i int) error {
			return c.Node(0).Join(context.Background(), c.Node(i).ID(), string(old.LocalAddr()), c.HTTPAddr(i))
		}})
	// Group 1 on node 0's port beside group 0: a one-node group.
	cfg1 := clustertest.FastConfig("n0", c.DataDir(0), c.HTTPAddr(0), nil)
	cfg1.RaftMux, cfg1.Group = mux, 1
	g1, err := cluster.Open(cfg1, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g1.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Timeout)
	defer cancel()
	if err := g1.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	spec := slidingLog(10, time.Hour)
	if _, err := g1.Check(ctx, check("g1", spec)); err != nil {
		t.Fatal(err)
	}
	spendIn(t, c, 1, "g0", 3) // forwarded by the v1 node to group 0's leader
	c.WaitConverged()
	if got := remaining(t, c.Node(1), "g0", slidingLog(1000, time.Hour)); got != 997 {
		t.Fatalf("the v1 node sees %d left of g0, want 997", got)
	}
	if got := remaining(t, g1, "g1", spec); got != 9 {
		t.Fatalf("group 1 sees %d left of g1, want 9", got)
	}
	if got := remaining(t, c.Node(0), "g1", spec); got != 10 {
		t.Fatalf("group 0 sees %d left of group 1's key, want 10", got)
	}
	// Node 1's transport (of the v1 shape) owns its port: not the shared one.
	if s := mux.Stats(); s != (raftnet.MuxStats{}) {
		t.Fatalf("the shared port refused connections: %+v", s)
	}
}

// A connection naming a group the node does not host is closed and counted
// in the node's metrics (limitd_raft_unknown_group_connections_total), and so
// is a forwarded check naming another group (limitd_forward_wrong_group_total).
func TestUnknownGroupRefusedAndCounted(t *testing.T) {
	gs := clustertest.MakeGroups(t, 1, clustertest.Options{Nodes: 1, SkipShort: true})
	conn, err := net.Dial("tcp", gs.Ports.Addr(0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("limitd-raft/2 n0 5\n")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection for group 5 was answered")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection for group 5 stayed open")
	}
	// A forwarded check naming another group is refused before deciding.
	req, err := http.NewRequest(http.MethodPost, gs.Group(0).URL(0)+"/internal/v1/check", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Limitd-Group", "4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a forwarded check for group 4 answered %d", resp.StatusCode)
	}
	reg := prometheus.NewRegistry()
	for _, col := range gs.Group(0).Node(0).Collectors() {
		reg.MustRegister(col)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if n := mf.GetName(); n == "limitd_raft_unknown_group_connections_total" || n == "limitd_forward_wrong_group_total" {
			got[n] = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got["limitd_raft_unknown_group_connections_total"] != 1 || got["limitd_forward_wrong_group_total"] != 1 {
		t.Fatalf("counters %v, want 1 each", got)
	}
}
