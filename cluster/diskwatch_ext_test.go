package cluster_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

// slowLogStore delays every log write by its node's delay.
type slowLogStore struct {
	cluster.LogStore
	delay *atomic.Int64
}

func (s slowLogStore) StoreLogs(ls []*raft.Log) error {
	time.Sleep(time.Duration(s.delay.Load()))
	return s.LogStore.StoreLogs(ls)
}

func (s slowLogStore) StoreLog(l *raft.Log) error {
	time.Sleep(time.Duration(s.delay.Load()))
	return s.LogStore.StoreLog(l)
}

// TestSlowLeaderDiskHandsLeadershipAway: the leader's log writes slow to
// 300 ms each under load; it hands leadership to another voter, counts it,
// and reports its disk stalled in its status.
func TestSlowLeaderDiskHandsLeadershipAway(t *testing.T) {
	var delays [3]atomic.Int64
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, Config: func(i int, cfg *cluster.Config) {
		cfg.DiskStallTransfer, cfg.DiskStallWindow = 150*time.Millisecond, 600*time.Millisecond
		cluster.SetWrapLogStore(cfg, func(s cluster.LogStore) cluster.LogStore { return slowLogStore{s, &delays[i]} })
	}})
	l := c.Leader()
	ctx := context.Background()
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1_000_000_000, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // load, through the other nodes
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			_, _ = c.Node((l+1+i%2)%3).Check(cctx, []fsm.Op{{Checks: []fsm.Check{{Key: "k", Spec: &spec, Cost: 1}}}})
			cancel()
		}
	}()
	defer func() { close(stop); <-done }()
	delays[l].Store(int64(300 * time.Millisecond))
	deadline := time.Now().Add(clustertest.Timeout)
	for c.Node(l).IsLeader() || c.LeaderNow() < 0 {
		if time.Now().After(deadline) {
			t.Fatal("the leader with a slow disk kept leading")
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := c.Node(l).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		if m.ID == c.Node(l).ID() && (!m.DiskStalled || m.LogWriteP99Ms < 150) {
			t.Fatalf("the slow node's status: %+v", m)
		}
	}
	t.Logf("leadership moved from node %d to node %d", l, c.LeaderNow())
}
