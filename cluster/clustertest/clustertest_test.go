package clustertest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

func spend(t *testing.T, n *cluster.Node, key string, cost int64) (fsm.Result, error) {
	t.Helper()
	spec, err := algo.Spec{Algorithm: algo.SlidingLog, Limit: 3, Window: time.Hour}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	res, err := n.Check(ctx, []fsm.Op{{Checks: []fsm.Check{{Key: key, Spec: &spec, Cost: cost}}}})
	if err != nil {
		return fsm.Result{}, err
	}
	return res[0], nil
}

// A join whose outcome is unknown is sent again; any other error is not.
func TestJoinRetriedWhileOutcomeUnknown(t *testing.T) {
	calls := 0
	c := clustertest.MakeClusterOpts(t, clustertest.Options{
		Nodes: 2,
		Join: func(c *clustertest.Cluster, i int) error {
			calls++
			if calls == 1 {
				return cluster.ErrOutcomeUnknown
			}
			return c.Node(0).Join(context.Background(), c.Node(i).ID(), c.RaftAddr(i), c.HTTPAddr(i))
		},
	})
	if calls != 2 {
		t.Fatalf("join sent %d times, want 2 (once more after the unknown outcome)", calls)
	}
	st, err := c.Node(1).Status(context.Background())
	if err != nil || len(st.Members) != 2 {
		t.Fatalf("status after the retried join: %+v %v", st, err)
	}
	refused := errors.New("refused")
	calls = 0
	if err := (func() error {
		c2 := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 1, Join: func(*clustertest.Cluster, int) error { calls++; return refused }})
		return c2.Join(0)
	})(); !errors.Is(err, refused) || calls != 1 {
		t.Fatalf("join refused outright: %v after %d calls, want the error after 1", err, calls)
	}
}

// Disconnect cuts a follower off for Raft and for forwarding alike: its
// checks fail while the others decide; Heal reconnects it.
func TestDisconnectCutsRaftAndForwarding(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, nil)
	l := c.Leader()
	f := (l + 1) % 3
	c.Disconnect(f)
	if res, err := spend(t, c.Node(f), "k", 1); err == nil {
		t.Fatalf("check through a disconnected follower answered %+v", res)
	}
	if _, err := spend(t, c.Node(l), "k", 1); err != nil {
		t.Fatalf("check on the leader of the majority: %v", err)
	}
	c.Heal()
	c.WaitConverged()
	if res, err := spend(t, c.Node(f), "k", 0); err != nil || res.Decisions[0].Remaining != 2 {
		t.Fatalf("peek through the healed follower: %+v %v, want remaining 2", res, err)
	}
}

// Restart reopens a node on its data directory: its state survives, and it
// serves on the same HTTP address.
func TestRestartKeepsDataDir(t *testing.T) {
	c := clustertest.MakeCluster(t, 1, nil)
	addr, dir := c.HTTPAddr(0), c.DataDir(0)
	if _, err := spend(t, c.Node(0), "r", 2); err != nil {
		t.Fatal(err)
	}
	c.Restart(0)
	c.WaitReady(0)
	if !c.Up(0) || c.HTTPAddr(0) != addr || c.DataDir(0) != dir {
		t.Fatalf("after restart: up %v, http %s (was %s), dir %s (was %s)", c.Up(0), c.HTTPAddr(0), addr, c.DataDir(0), dir)
	}
	if res, err := spend(t, c.Node(0), "r", 0); err != nil || res.Decisions[0].Remaining != 1 {
		t.Fatalf("peek after restart: %+v %v, want remaining 1", res, err)
	}
}
