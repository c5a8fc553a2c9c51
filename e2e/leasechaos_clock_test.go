package e2e

import (
	"fmt"
	"testing"
	"time"
)

// The chaos run of stepped clocks with quota leases on: three limitd
// processes serve one leased policy ("window": a fixed window of 10 s,
// limit 300, share 0.2, max_ttl 2s) on four keys checked at about three
// times that rate, round robin through every node, without request ids.
// Each round steps the leader's clock forward (it restarts with
// LIMITD_FAULT_CLOCK_OFFSET=+3s and leads again), back (it restarts with
// no offset and leads again), then fails over to a follower whose clock is
// ahead (+3s). A process's clock can only be set at its start, so a step is
// a clean restart (SIGTERM hands leadership over) and a failover is SIGTERM
// of leaders until the chosen node leads.
//
// The audit is per window of leader time, the time decisions are made in:
// an allowed answer belongs to the window that ends at its answer time plus
// its reset_after, rounded to the nearest window boundary. That is exact
// while leader time stays within half a window of the clients' clock: the
// offsets here are 0 or +3 s, and leader time never runs behind the
// largest offset it has seen (cluster/clock.go), so it stays 0 to 3 s ahead.
// Per window the allowed answers must be ≤ the limit (0 over-admitted), and
// once every lease went back the usage the replicated state shows through
// every node must be ≥ the allowed answers of its window (0 lost).
//
// scripts/chaos.sh (suite clock) runs it with LIMITD_CHAOS_ROUNDS rounds
// (default 1).

// clockAhead is the forward step: well under half of leaseWindow.
const clockAhead = 3 * time.Second

func clockOffsetEnv(d time.Duration) []string {
	return []string{fmt.Sprintf("LIMITD_FAULT_CLOCK_OFFSET=%s", d), "LIMITD_FAULT_INJECTION=1"}
}

// leaderWindowOf is the window (numbered by its end) of leader time an
// allowed answer received at at counted in.
func leaderWindowOf(w time.Duration, a leaseAnswer, at time.Time) int64 {
	end := at.UnixNano() + a.ResetAfterMS*int64(time.Millisecond)
	return (end + int64(w)/2) / int64(w)
}

// placeByLeader is the placeFunc of the stepped clocks: leaderWindowOf (a
// check's send time, by the clients' clock, names no window here).
func (lc *leaseChaos) placeByLeader(policy string, a leaseAnswer, _, at time.Time) (int64, bool) {
	return leaderWindowOf(lc.windows[policy], a, at), false
}

func TestLeaseChaosClockSteps(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	if testing.Short() {
		t.Skip("starts three limitd processes and restarts them with stepped clocks (scripts/chaos.sh SUITES=clock)")
	}
	rounds, _, began, procs, load := startChaos(t, 1)
	lc := newLeaseChaos(t, rounds, procs, load)
	stopWorkers := lc.startWorkers(lc.placeByLeader)
	defer stopWorkers()

	offsets := map[string]time.Duration{}
	restarts, failovers, kills := 0, 0, 0
	// restart stops p cleanly (a leader hands over first) and starts it
	// with its clock at offset d.
	restart := func(p *proc, d time.Duration) {
		t.Helper()
		lc.setUp(p, false)
		if err := p.term(); err != nil {
			t.Fatalf("stop %s: %v", p.ID, err)
		}
		p.Node.Env = clockOffsetEnv(d)
		offsets[p.ID] = d
		p.start(crashFlags...)
		p.waitReady()
		lc.setUp(p, true)
		restarts++
	}
	// leadTo makes target the leader: every other leader is killed -9 and
	// comes back with its clock unchanged. Not SIGTERM: a clean stop hands
	// over to the follower Raft picks, the same one every time, and the
	// election after a kill is won by either follower.
	leadTo := func(target *proc) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			l := lc.leader(nil, 30*time.Second)
			if l == target {
				return
			}
			if attempt == 12 {
				t.Fatalf("%s does not lead after %d failovers (%s does)", target.ID, attempt, l.ID)
			}
			lc.setUp(l, false)
			l.Kill()
			lc.leader(l, 30*time.Second)
			l.start(crashFlags...)
			l.waitReady()
			lc.setUp(l, true)
			failovers++
			kills++
		}
	}
	for round := 0; round < rounds; round++ {
		time.Sleep(1500 * time.Millisecond) // leases taken again
		l := lc.leader(nil, 30*time.Second)
		restart(l, clockAhead)
		leadTo(l)
		t.Logf("round %d: leader %s's clock stepped forward by %s", round, l.ID, clockAhead)
		time.Sleep(1500 * time.Millisecond)
		restart(l, 0)
		leadTo(l)
		t.Logf("round %d: leader %s's clock stepped back to the true time", round, l.ID)
		time.Sleep(1500 * time.Millisecond)
		var f *proc
		for _, p := range procs {
			if p != l {
				f = p
				break
			}
		}
		restart(f, clockAhead)
		leadTo(f)
		t.Logf("round %d: failed over to %s, whose clock is %s ahead", round, f.ID, clockAhead)
	}
	time.Sleep(time.Second)
	stopWorkers()

	lc.waitLeasesBack(t, procs)

	over, windows, allowed := lc.overAdmitted(t)
	// A peek (cost 0) of a window nothing was spent in says reset_after 0,
	// which names no window: the window a peek saw is the one an allowed
	// probe (cost 1 on a key of its own) saw just before and just after it.
	probes := 0
	answer := func(p *proc, policy, key string, cost int) (leaseAnswer, time.Time) {
		for try := 0; try < 50; try++ {
			if a, _, at, ok := lc.check(p, policy, key, cost); ok {
				return a, at
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("check of %s on %s: no answer", key, p.ID)
		return leaseAnswer{}, time.Time{}
	}
	probe := func(p *proc, policy string) int64 {
		probes++
		a, at := answer(p, policy, fmt.Sprintf("probe/%d", probes), 1)
		if !a.Allowed {
			t.Fatalf("probe %d on %s refused", probes, p.ID)
		}
		return leaderWindowOf(lc.windows[policy], a, at)
	}
	audited, lost, _ := lc.lostAcknowledged(t, procs, func(p *proc, policy, key string) (leaseAnswer, int64) {
		for try := 0; ; try++ {
			if try == 5 {
				t.Fatalf("peek of %s on %s: the window rolled at every try", key, p.ID)
			}
			before := probe(p, policy)
			a, _ := answer(p, policy, key, 0)
			if probe(p, policy) == before {
				return a, before
			}
		}
	})
	lc.sameState(t, procs)
	crashSummary(t, map[string]any{
		"nodes": 3, "rounds": rounds, "leader_changes": failovers + 2*rounds, "restarts": restarts, "kills": kills,
		"clock_ahead_s": clockAhead.Seconds(),
		"ops":           lc.ops, "allowed": allowed, "refused": lc.refused, "unknown": lc.unknown,
		"windows": windows, "audited": audited, "over_admissions": over, "lost_acknowledged": lost,
		"zero_reset_after": lc.zeroReset, "linearizable": "n/a", "seconds": time.Since(began).Seconds(),
	})
	if allowed == 0 || lc.refused == 0 || audited == 0 {
		t.Errorf("allowed %d, refused %d, audited %d: the run must exercise each", allowed, lc.refused, audited)
	}
	lc.reportOddities(t)
}
