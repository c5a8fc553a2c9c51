package cluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

// peek checks key with cost (0: a peek) through n, on a quota of 100 a day.
func peek(n *cluster.Node, key string, cost int64) (int64, error) {
	return peekWithin(n, key, cost, time.Second)
}

func peekWithin(n *cluster.Node, key string, cost int64, wait time.Duration) (int64, error) {
	spec, err := algo.Spec{Algorithm: algo.FixedWindow, Limit: 100, Window: 24 * time.Hour}.Validate()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := n.Check(ctx, []fsm.Op{{Checks: []fsm.Check{{Key: key, Spec: &spec, Cost: cost}}}})
	if err != nil {
		return 0, err
	}
	return res[0].Decisions[0].Remaining, nil
}

// The wiped voter that could elect a stale leader: follower A stops; B (leader) and C acknowledge
// checks A never saw; B and C stop; C's data directory is wiped; A and C
// start. Before incarnations, C (no configuration) voted for A, which won
// and served the day's quota afresh. Now C refuses to vote, so no leader
// forms until B is back; C then rejoins as a non-voter, is promoted once it
// holds the history, and with B gone again A and C still serve what was
// acknowledged.
func TestWipedVoterCannotElectStaleLeader(t *testing.T) {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, SkipShort: true})
	leader := c.Leader()
	if leader != 0 {
		c.Node(leader).TransferLeadershipTo(c.Node(0).ID(), c.RaftAddr(0))
		if c.WaitLeader(clustertest.Timeout) != 0 {
			t.Skip("could not move leadership to node 0") // the harness's names below assume it
		}
	}
	const a, b, cc = 1, 0, 2
	c.Stop(a)
	const spent = 10
	for range spent {
		if _, err := peek(c.Node(b), "daily", 1); err != nil {
			t.Fatalf("check on B with C: %v", err)
		}
	}
	c.Stop(b)
	c.Stop(cc)
	dir := c.DataDir(cc)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.Start(a)
	c.Start(cc)
	// Many election timeouts: A must not win with C's vote. Whatever
	// answers must answer with what was acknowledged.
	served := func(phase string, nodes ...int) {
		t.Helper()
		for _, i := range nodes {
			if rem, err := peekWithin(c.Node(i), "daily", 0, 200*time.Millisecond); err == nil && rem != 100-spent {
				t.Fatalf("%s: node%d serves remaining %d, acknowledged usage leaves %d", phase, i, rem, 100-spent)
			}
		}
	}
	for range 10 {
		served("A and wiped C", a, cc)
	}
	if l := c.LeaderNow(); l >= 0 {
		rem, err := peek(c.Node(l), "daily", 0)
		t.Fatalf("node%d leads with A and a wiped C (it serves remaining %d, %v; acknowledged usage leaves %d)", l, rem, err, 100-spent)
	}
	c.Start(b)
	c.WaitLeader(clustertest.Timeout)
	if err := c.Join(cc); err != nil {
		t.Fatalf("rejoin C: %v", err)
	}
	// C is promoted once caught up, and may then vote.
	deadline := time.Now().Add(clustertest.Timeout)
	for !voter(c, cc) {
		if time.Now().After(deadline) {
			t.Fatal("wiped C was never promoted back to voter")
		}
		time.Sleep(50 * time.Millisecond)
	}
	served("B back, C promoted", a, b, cc)
	c.Stop(c.Leader())
	c.WaitLeader(clustertest.Timeout)
	for _, i := range []int{a, b, cc} {
		if c.Up(i) {
			if rem, err := peek(c.Node(i), "daily", 0); err != nil || rem != 100-spent {
				t.Fatalf("after the leader stopped: node%d remaining %d (%v), want %d", i, rem, err, 100-spent)
			}
		}
	}
}

// voter reports whether every running node's view makes node i a voter and
// node i itself may vote (its incarnation recorded).
func voter(c *clustertest.Cluster, i int) bool {
	st, err := c.Node(i).Status(context.Background())
	if err != nil {
		return false
	}
	for _, m := range st.Members {
		if m.ID == c.Node(i).ID() {
			return m.Suffrage == "Voter" && cluster.MayVote(c.Node(i))
		}
	}
	return false
}
