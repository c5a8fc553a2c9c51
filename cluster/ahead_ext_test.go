package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/backup"
	"github.com/limitd/limitd/cluster/clustertest"
)

// In a cluster of three, a follower answers the checks it forwards from its
// own log once it holds their entry, the leader's answers lost on the way:
// every check is answered, allowed as the limit says and counted once. With
// NoApplyAhead the same check gets no answer (ErrOutcomeUnknown at its
// deadline). Fails if the follower does not apply ahead, delivers the wrong
// results, or answers a check twice.
func TestFollowerAnswersFromItsLog(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoApplyAhead=%v", off), func(t *testing.T) {
			wait := answerWait()
			c := clustertest.MakeCluster(t, 3, func(i int, cfg *cluster.Config) {
				clustertest.SteadyTimers(i, cfg)
				cfg.NoApplyAhead = off
				// The node's own bound (the harness's 2 s) would cut the
				// checks' wait short on the first check and on the leader.
				cfg.ApplyTimeout = wait
			})
			l := c.Leader()
			follower := c.Node((l + 1) % 3)
			spec := slidingLog(5, time.Hour)
			// Open the stream with the leader still answering.
			if _, err := follower.Check(context.Background(), check("warm", spec)); err != nil {
				t.Fatalf("first check: %v", err)
			}
			cluster.SetStreamDropAnswers(c.Node(l), true)
			before := cluster.AnswersFromLog(follower)
			for i := 0; i < 7; i++ {
				// Without applying ahead the check waits out its deadline
				// (that is the assertion): a short one keeps the run short.
				d := wait
				if off {
					d = 2 * time.Second
				}
				ctx, cancel := context.WithTimeout(context.Background(), d)
				res, err := follower.Check(ctx, check("from-log", spec))
				cancel()
				if off {
					if !errors.Is(err, cluster.ErrOutcomeUnknown) {
						t.Fatalf("check %d without the leader's answer and without applying ahead: %+v %v, want ErrOutcomeUnknown", i, res, err)
					}
					break
				}
				if err != nil {
					t.Fatalf("check %d answered from the follower's log: %v", i, err)
				}
				if want := i < 5; res[0].Allowed != want {
					t.Fatalf("check %d: allowed %v, want %v (limit 5)", i, res[0].Allowed, want)
				}
			}
			if off {
				if n := cluster.AnswersFromLog(follower); n != 0 {
					t.Fatalf("%d answers from the log with NoApplyAhead", n)
				}
				return
			}
			if n := cluster.AnswersFromLog(follower) - before; n != 7 {
				t.Fatalf("%d checks answered from the log, want 7", n)
			}
			if got := remaining(t, c.Node(l), "from-log", spec); got != 0 {
				t.Fatalf("remaining %d on the leader, want 0 (5 allowed, each counted once)", got)
			}
			c.WaitConverged() // the replicas that applied ahead agree with the leader
		})
	}
}

// answerWait bounds each check of TestFollowerAnswersFromItsLog. An answer
// from the follower's log comes within milliseconds when apply-ahead works;
// the bound only has to outlast one forward and commit on a loaded host,
// which a race-built binary has been seen to take past 2 s. It weakens
// nothing: every answer must still come from the follower's log (counted,
// exactly 7), the leader's being dropped, so a longer wait cannot turn a
// missing answer into a pass.
func answerWait() time.Duration {
	wait := 10 * time.Second
	if raceBuild() {
		wait *= 3 // the race detector slows Raft's goroutines 2-10x
	}
	return wait
}

// raceBuild reports whether this test binary was built with -race (go test
// records it in the build settings), the cluster tests having no build-tag
// constant of their own.
func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// In a cluster of five the leader and one follower are not a majority: no
// follower applies ahead, and a forwarded check whose leader's answer is lost
// gets none (ErrOutcomeUnknown). Fails if a follower of five answers from
// its log.
func TestNoAnswersFromLogInFive(t *testing.T) {
	if testing.Short() {
		t.Skip("five nodes: slow to start")
	}
	c := clustertest.MakeCluster(t, 5, clustertest.SteadyTimers)
	l := c.Leader()
	follower := c.Node((l + 1) % 5)
	spec := slidingLog(5, time.Hour)
	if _, err := follower.Check(context.Background(), check("warm", spec)); err != nil {
		t.Fatalf("first check: %v", err)
	}
	// While the cluster formed it had three voters or fewer, and followers
	// applied ahead then: count from here.
	before := make([]uint64, c.Size())
	for i, n := range c.Nodes() {
		before[i] = cluster.EntriesAhead(n)
	}
	cluster.SetStreamDropAnswers(c.Node(l), true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if res, err := follower.Check(ctx, check("five", spec)); !errors.Is(err, cluster.ErrOutcomeUnknown) {
		t.Fatalf("check without the leader's answer in a cluster of five: %+v %v, want ErrOutcomeUnknown", res, err)
	}
	for i, n := range c.Nodes() {
		if a, e := cluster.AnswersFromLog(n), cluster.EntriesAhead(n)-before[i]; a != 0 || e != 0 {
			t.Errorf("node %d of five: %d answers from its log, %d entries applied ahead", i, a, e)
		}
	}
}

// A follower that answers from its log has state ahead of raft's applied
// index; its backups must still hold the state of the index they name (a
// restore refuses a state ahead of its header). Checks forwarded by the
// follower, each followed at once by the follower's backup. Fails if a
// backup's state is past its header's index.
func TestBackupOfFollowerApplyingAhead(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, clustertest.SteadyTimers)
	l := c.Leader()
	follower := c.Node((l + 1) % 3)
	spec := slidingLog(1000, time.Hour)
	for i := 0; i < 20; i++ {
		if _, err := follower.Check(context.Background(), check("backup-ahead", spec)); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		data, h := backupBytes(t, follower)
		if _, err := backup.Inspect(bytes.NewReader(data), t.TempDir()); err != nil {
			t.Fatalf("backup %d of the follower (header at %d): %v", i, h.Index, err)
		}
	}
	if cluster.AnswersFromLog(follower) == 0 {
		t.Fatal("the follower answered nothing from its log: the test did not test applying ahead")
	}
}
