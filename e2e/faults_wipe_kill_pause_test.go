package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Wiped, killed and paused nodes: three limitd processes under load with request ids,
// each round one of: a follower killed -9, its data directory wiped, and
// started again under the same id with --join (it must come back as a new
// incarnation: non-voter until caught up); the whole cluster killed -9 and
// started again; the leader paused (SIGSTOP) past an election and resumed.
// At the end every unknown outcome is resolved by its request_id and every
// key audited through every node: 0 over-admitted, 0 lost. scripts/chaos.sh
// runs it with LIMITD_CHAOS_ROUNDS rounds (default 3: one of each).
func TestFaultsWipeKillPause(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	if testing.Short() {
		t.Skip("starts three limitd processes and restarts them many times")
	}
	rounds, rng, began, procs, l := startChaos(t, 3)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var gen atomic.Int64
	fixed := crashWindow(time.Duration(rounds)*time.Minute + 30*time.Minute)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int, s int64) { defer wg.Done(); l.worker(w, s, &gen, fixed, stop) }(w, rng.Int63())
	}
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers()

	faults := map[string]int{}
	leaderChanges := 0
	for round := 0; round < rounds; round++ {
		time.Sleep(time.Duration(500+rng.Intn(700)) * time.Millisecond)
		switch fault := round % 3; fault {
		case 0: // wipe a follower that joins (n1 bootstraps without --join)
			leader := l.leader(nil, 30*time.Second)
			var p *proc
			for _, q := range procs {
				if q != leader && q.Join != "" {
					p = q
					break
				}
			}
			l.setUp(p, false)
			p.Kill()
			must(t, os.RemoveAll(p.DataDir))
			must(t, os.MkdirAll(p.DataDir, 0o755))
			p.start(crashFlags...)
			p.waitReady()
			waitVoter(t, l, p, 60*time.Second)
			l.setUp(p, true)
			faults["wipe"]++
			t.Logf("round %d: wiped %s; it rejoined and was promoted", round, p.ID)
		case 1: // whole cluster kill -9
			for _, p := range procs {
				l.setUp(p, false)
				p.Kill()
			}
			for _, p := range procs {
				p.start(crashFlags...)
			}
			for _, p := range procs {
				p.waitReady()
				l.setUp(p, true)
			}
			faults["kill_all"]++
			leaderChanges++
			t.Logf("round %d: killed every node, all back", round)
		case 2: // pause the leader past an election
			leader := l.leader(nil, 30*time.Second)
			l.setUp(leader, false)
			must(t, syscall.Kill(leader.PID(), syscall.SIGSTOP))
			next := l.leader(leader, 30*time.Second)
			must(t, syscall.Kill(leader.PID(), syscall.SIGCONT))
			leader.waitReady()
			l.setUp(leader, true)
			faults["pause_leader"]++
			leaderChanges++
			t.Logf("round %d: paused leader %s, %s took over; resumed", round, leader.ID, next.ID)
		}
	}
	time.Sleep(300 * time.Millisecond)
	stopWorkers()

	l.resolve(rng)
	l.waitConverged(60 * time.Second)
	over, lost, phantom := l.audit()
	digests := stateDigests(t, procs)
	for _, p := range procs {
		if digests[p.ID] != digests[procs[0].ID] {
			t.Errorf("state digests differ: %v", digests)
			break
		}
	}
	crashSummary(t, map[string]any{
		"nodes": 3, "rounds": rounds, "leader_changes": leaderChanges, "ops": l.ops,
		"allowed": l.allowed, "refused": l.refused, "unknown": l.unknown,
		"over_admissions": over, "lost_acknowledged": lost, "phantom": phantom,
		"linearizable": "n/a", "seconds": time.Since(began).Seconds(), "faults": faults,
	})
	if l.allowed == 0 {
		t.Errorf("allowed %d: the run must exercise the quota", l.allowed)
	}
	for i, o := range l.oddities {
		if i == 5 {
			t.Errorf("... %d oddities in all", len(l.oddities))
			break
		}
		t.Error(o)
	}
}

// waitVoter waits until p's own view of the cluster lists it as a voter
// (a wiped node is a non-voter until the leader promotes it).
func waitVoter(t *testing.T, l *crashLoad, p *proc, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var v struct {
			Members []struct{ ID, Suffrage string }
		}
		resp, err := l.client.Get(p.URL("/v1/cluster"))
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
		}
		for _, m := range v.Members {
			if m.ID == p.ID && m.Suffrage == "Voter" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not promoted to voter (last error %v); last lines:\n%s", p.ID, err, strings.Join(p.LogTail(30), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
