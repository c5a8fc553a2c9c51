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
