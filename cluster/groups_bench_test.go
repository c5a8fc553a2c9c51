package cluster_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
)

// daemonTimers gives the harness's nodes limitd serve's Raft timers (the
// harness's are for fast elections, and their idle cost is not the
// product's).
func daemonTimers(_ int, cfg *cluster.Config) {
	cfg.HeartbeatTimeout = cluster.DefaultHeartbeatTimeout
	cfg.ElectionTimeout = cluster.DefaultElectionTimeout
	cfg.LeaderLeaseTimeout = cluster.DefaultLeaderLeaseTimeout
	cfg.CommitTimeout = cluster.DefaultCommitTimeout
	cfg.ExpireInterval = cluster.DefaultExpireInterval
}

// spreadLeaders hands group g's leadership to node g mod nodes, as the
// leader balancer would (about as many leaders on each node).
func spreadLeaders(b *testing.B, gs *clustertest.Groups, nodes int) {
	b.Helper()
	for g, c := range gs.Groups {
		want := g % nodes
		for try := 0; c.Leader() != want && try < 20; try++ {
			l := c.Leader()
			c.Node(l).TransferLeadershipTo(c.Node(want).ID(), c.RaftAddr(want))
			time.Sleep(200 * time.Millisecond)
		}
		if c.Leader() != want {
			b.Fatalf("group %d: leader node%d, want node%d", g, c.Leader(), want)
		}
	}
}

// BenchmarkGroupsIdleCPU: the CPU an idle node spends as the groups it
// hosts grow (3 nodes in one process, each group on all three, leaders
// spread, one Raft port per node, daemon timers): process CPU over
// LIMITD_IDLE_SECONDS (default 20) of idle, per node, as a share of one
// core. Run with -benchtime=1x.
func BenchmarkGroupsIdleCPU(b *testing.B) {
	idle := 20 * time.Second
	if s, err := strconv.Atoi(os.Getenv("LIMITD_IDLE_SECONDS")); err == nil && s > 0 {
		idle = time.Duration(s) * time.Second
	}
	const nodes = 3
	for _, groups := range []int{1, 3, 6, 12} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			gs := clustertest.MakeGroups(b, groups, clustertest.Options{Nodes: nodes, Config: daemonTimers})
			spreadLeaders(b, gs, nodes)
			time.Sleep(2 * time.Second) // the transfers' aftermath
			var cpu int64
			var took time.Duration
			for b.Loop() {
				cpu0, t0 := processCPU(), time.Now()
				time.Sleep(idle)
				cpu, took = processCPU()-cpu0, time.Since(t0)
			}
			perNode := float64(cpu) / float64(took.Nanoseconds()) / nodes
			b.ReportMetric(100*perNode, "%core/node")
			b.ReportMetric(100*perNode/float64(groups), "%core/replica")
		})
	}
}

// BenchmarkGroupsCheckCPU: CPU per check under the same closed-loop load
// (64 clients, each sending one check at a time to the leader of its key's
// group, 1,000 keys) with one group and with three groups over the same 3
// nodes and ports, leaders spread; process CPU (all three nodes) per
// check beside checks/s and log entries per 1,000 checks. Run with
// -benchtime=20000x.
func BenchmarkGroupsCheckCPU(b *testing.B) {
	const nodes, clients, keys = 3, 64, 1000
	for _, groups := range []int{1, 3} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			gs := clustertest.MakeGroups(b, groups, clustertest.Options{Nodes: nodes, Config: daemonTimers})
			spreadLeaders(b, gs, nodes)
			s, err := algo.Spec{Algorithm: algo.SlidingWindow, Limit: 1_000_000_000, Window: time.Hour}.Validate()
			if err != nil {
				b.Fatal(err)
			}
			spec := &s
			leaders := make([]*cluster.Node, groups)
			for g, c := range gs.Groups {
				leaders[g] = c.Node(c.Leader())
			}
			var next atomic.Int64
			var failed atomic.Int64
			applied := func() (sum uint64) {
				for _, n := range leaders {
					sum += n.FSM().AppliedIndex()
				}
				return sum
			}
			b.ResetTimer()
			cpu0, t0, idx0 := processCPU(), time.Now(), applied()
			var wg sync.WaitGroup
			for w := 0; w < clients; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						k := int(i % keys)
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						if _, err := leaders[k%groups].Check(ctx, check("k"+strconv.Itoa(k), spec)); err != nil {
							failed.Add(1)
						}
						cancel()
					}
				}()
			}
			wg.Wait()
			took := time.Since(t0)
			b.StopTimer()
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d checks failed", f)
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/check")
			b.ReportMetric(float64(b.N)/took.Seconds(), "checks/s")
			// Entries per 1,000 checks: smaller natural batches per group
			// mean more entries (and fsyncs) per check.
			b.ReportMetric(1000*float64(applied()-idx0)/float64(b.N), "entries/1k-checks")
		})
	}
}
