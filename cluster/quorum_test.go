package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

// A follower cut off from the quorum answers a check with ErrNoLeader and
// the reason as soon as it knows no leader, however long the caller would
// wait (here 30 s: without the fast path the check only ends with it).
func TestCutOffFollowerFailsFast(t *testing.T) {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, SkipShort: true})
	f := (c.Leader() + 1) % 3
	c.Disconnect(f)
	for {
		if id, _ := c.Node(f).LeaderID(); id == "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	spec, err := algo.Spec{Algorithm: algo.FixedWindow, Limit: 10, Window: time.Hour}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := c.Node(f).Check(ctx, []fsm.Op{{Checks: []fsm.Check{{Key: "k", Spec: &spec, Cost: 1}}}})
		if !errors.Is(err, cluster.ErrNoLeader) {
			t.Fatalf("check on a cut-off follower: %v, want ErrNoLeader", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("the check waited out the caller's deadline: %v", err)
		}
		if strings.Contains(err.Error(), "no contact with a leader") {
			return
		}
		// Within heartbeat+election timeout of the last contact it still waits.
	}
}

// The leader's health flag of a member follows its heartbeats both ways,
// across leadership changes: a follower cut off while l led, healed while
// another node led, is healthy again when l leads again (Raft's new
// heartbeat goroutines never report "resumed" for a failure they did not see).
func TestMemberHealthFollowsHeartbeatsBothWays(t *testing.T) {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, SkipShort: true})
	l := c.Leader()
	f, o := (l+1)%3, (l+2)%3
	health := func(viewer, member int) string {
		st, err := c.Node(viewer).Status(context.Background())
		if err != nil {
			return err.Error()
		}
		for _, m := range st.Members {
			if m.ID == c.Node(member).ID() {
				return m.Health
			}
		}
		return "absent"
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(clustertest.Timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting: %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	c.Disconnect(f)
	wait("leader sees the cut-off member unhealthy", func() bool { return health(l, f) == cluster.HealthUnhealthy })
	if err := c.Node(l).TransferLeadershipTo(c.Node(o).ID(), c.RaftAddr(o)); err != nil {
		t.Fatal(err)
	}
	wait("o leads", func() bool { return c.Node(o).IsLeader() })
	c.Heal()
	wait("o sees the member healthy", func() bool { return health(o, f) == cluster.HealthHealthy })
	if err := c.Node(o).TransferLeadershipTo(c.Node(l).ID(), c.RaftAddr(l)); err != nil {
		t.Fatal(err)
	}
	wait("l leads again", func() bool { return c.Node(l).IsLeader() })
	wait("l sees the healed member healthy again", func() bool { return health(l, f) == cluster.HealthHealthy })
}
