package cluster_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
)

// slowLog delays every StoreLogs while slow is set, before the write.
type slowLog struct {
	cluster.LogStore
	slow  *atomic.Bool
	delay time.Duration
}

func (s *slowLog) StoreLogs(logs []*raft.Log) error {
	if s.slow.Load() {
		time.Sleep(s.delay)
	}
	return s.LogStore.StoreLogs(logs)
}

func (s *slowLog) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// Apply-ahead rests on the leader storing an entry before it sends it
// (ahead.go; hashicorp/raft v1.7.3's dispatchLogs): a follower holding an
// entry of the leader's term then knows two logs hold it. With the leader's
// log writes delayed and its answers dropped, a follower's forwarded check
// is answered from the follower's own log, and never sooner than the
// leader's write of its entry can have finished. Fails if raft sends an
// entry before the leader has stored it: the follower and the other
// follower then hold it, and the follower answers while the leader is still
// writing (shown with a raft whose dispatchLogs notifies its replicators
// before StoreLogs).
func TestNoAnswerAheadOfTheLeadersLog(t *testing.T) {
	const delay = 300 * time.Millisecond
	var slow [3]atomic.Bool
	c := clustertest.MakeCluster(t, 3, func(i int, cfg *cluster.Config) {
		clustertest.SteadyTimers(i, cfg)
		// Each entry waits out the delay on the leader; the harness's 2 s
		// deadline leaves a loaded machine too little room for that.
		cfg.ApplyTimeout = 10 * time.Second
		cluster.SetWrapLogStore(cfg, func(s cluster.LogStore) cluster.LogStore {
			return &slowLog{LogStore: s, slow: &slow[i], delay: delay}
		})
	})
	l := c.Leader()
	follower := c.Node((l + 1) % 3)
	spec := slidingLog(1000, time.Hour)
	if _, err := follower.Check(context.Background(), check("warm", spec)); err != nil {
		t.Fatalf("first check: %v", err)
	}
	cluster.SetStreamDropAnswers(c.Node(l), true)
	slow[l].Store(true)
	defer slow[l].Store(false)
	before := cluster.AnswersFromLog(follower)
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, err := follower.Check(ctx, check("behind-the-leader", spec))
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if took < delay {
			t.Fatalf("check %d answered %v after it was asked: before the leader's write of its entry (%v) could have finished", i, took, delay)
		}
	}
	if cluster.AnswersFromLog(follower) == before {
		t.Fatal("no check was answered from the follower's log: the test did not test applying ahead")
	}
}
