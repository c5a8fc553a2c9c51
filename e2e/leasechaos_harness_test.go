package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// The harness the two lease chaos runs share (TestLeaseChaosKill9,
// TestLeaseChaosClockSteps): the same policies, keys and load, the same
// wait for the leases to go back, the same two-sided audit. They differ in
// their faults and in how an allowed answer is placed in its window (a
// placeFunc), so that one fix to the load or the audit holds for both.

// placeFunc numbers the window (by its end) an allowed answer counted in,
// from the times its check was sent and answered; straddled says the check
// was in flight across a window boundary.
type placeFunc func(policy string, a leaseAnswer, sent, at time.Time) (window int64, straddled bool)

// leaseChaosKeys are the keys each policy's workers check: "window"'s four
// run out each window, "quota"'s two never do.
var leaseChaosKeys = map[string][]string{"window": {"w/0", "w/1", "w/2", "w/3"}, "quota": {"q/0", "q/1"}}

// leaseChaosLimits are the policies' limits.
var leaseChaosLimits = map[string]int64{"window": leaseWindowLimit, "quota": leaseQuotaLimit}

// newLeaseChaos is the clients' account over a started chaos cluster, with
// its two leased policies (share 0.2, max_ttl 2s) put: "window" (a fixed
// window of leaseWindow) and "quota" (a window of whole hours that outlasts
// rounds, so it is still the same when the audit reads it).
func newLeaseChaos(t *testing.T, rounds int, procs []*proc, load *crashLoad) *leaseChaos {
	t.Helper()
	lc := &leaseChaos{crashLoad: load, allowed: map[leaseWindowKey]int64{}, windows: map[string]time.Duration{}}
	quotaWindow := crashWindow(time.Duration(rounds)*time.Minute + 30*time.Minute)
	qw, err := time.ParseDuration(quotaWindow)
	must(t, err)
	lc.windows["window"], lc.windows["quota"] = leaseWindow, qw
	for name, window := range map[string]string{"window": leaseWindow.String(), "quota": quotaWindow} {
		body := fmt.Sprintf(`{"algorithm":"fixed_window","limit":%d,"window":"%s","lease":{"share":0.2,"max_ttl":"2s"}}`, leaseChaosLimits[name], window)
		req, err := http.NewRequest(http.MethodPut, procs[0].URL("/v1/policies/"+name), bytes.NewReader([]byte(body)))
		must(t, err)
		resp, err := lc.client.Do(req)
		must(t, err)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("put policy %s: %s %s", name, resp.Status, data)
		}
	}
	return lc
}

// startWorkers starts three workers per key, on different nodes first:
// "window" at 3 times its limit's rate (each window runs out a third of the
// way in), "quota" at 60/s. The returned stop ends them and waits for them;
// it may be called more than once.
func (lc *leaseChaos) startWorkers(place placeFunc) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	rates := map[string]float64{"window": 3 * leaseWindowLimit / leaseWindow.Seconds() / 3, "quota": 20}
	for policy, ks := range leaseChaosKeys {
		for _, k := range ks {
			for w := 0; w < 3; w++ {
				wg.Add(1)
				go func() { defer wg.Done(); lc.worker(policy, k, rates[policy], w, place, done) }()
			}
		}
	}
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

// worker checks one key at about rate per second until stop, through the
// running nodes in turn, each allowed answer counted in the window place
// names.
func (lc *leaseChaos) worker(policy, key string, rate float64, first int, place placeFunc, stop <-chan struct{}) {
	period := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for i := first; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		p := lc.procs[i%len(lc.procs)]
		if up, _ := lc.up.Load(p.ID); !up.(bool) {
			time.Sleep(time.Millisecond) // no spin on the box's few cores while a node is down
			continue
		}
		a, sent, at, ok := lc.check(p, policy, key, 1)
		lc.amu.Lock()
		lc.ops++
		switch {
		case !ok:
			lc.unknown++
		case a.Allowed:
			w, straddled := place(policy, a, sent, at)
			lc.allowed[leaseWindowKey{policy, key, w}]++
			if straddled {
				lc.straddled++
			}
			if a.ResetAfterMS <= 0 {
				lc.zeroReset++ // a fixed window's allowed answer resets after some time: report it
			}
		default:
			lc.refused++
		}
		lc.amu.Unlock()
		if next = next.Add(period); time.Until(next) > 0 {
			time.Sleep(time.Until(next))
		} else {
			next = time.Now() // behind (a kill): do not burst to catch up
		}
	}
}

// waitLeasesBack waits until no node holds a lease (each goes back once its
// key is idle for a second), for at most 30 s, then for the last returns to
// apply and the replicas to converge on the same state.
func (lc *leaseChaos) waitLeasesBack(t *testing.T, procs []*proc) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var held float64
		for _, p := range procs {
			v, err := lc.metric(p, "limitd_leased_keys")
			if err != nil {
				v = 1
			}
			held += v
		}
		if held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases still held 30 s after the clients stopped")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the last returns applied
	lc.waitConverged(60 * time.Second)
}

// overAdmitted is the first half of the audit: every key's window holds at
// most its limit of allowed answers. It fails the test for each that holds
// more and returns their number, the windows seen and the allowed answers.
func (lc *leaseChaos) overAdmitted(t *testing.T) (over, windows int, allowed int64) {
	t.Helper()
	names := make([]leaseWindowKey, 0, len(lc.allowed))
	for k, n := range lc.allowed {
		names = append(names, k)
		allowed += n
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := names[i], names[j]
		return a.policy < b.policy || a.policy == b.policy && (a.key < b.key || a.key == b.key && a.window < b.window)
	})
	for _, k := range names {
		windows++
		if n := lc.allowed[k]; n > leaseChaosLimits[k.policy] {
			over++
			t.Errorf("%s %s window %d: %d allowed answers, limit %d", k.policy, k.key, k.window, n, leaseChaosLimits[k.policy])
		}
	}
	return over, windows, allowed
}

// lostAcknowledged is the second half: through every node, the usage the
// replicated state shows for a key's current window (peek's answer and the
// window it names) is at least the allowed answers the clients saw in it.
// It fails the test for each shortfall and returns the windows compared, the
// units lost, and what the first node shows beyond the answers (the
// under-admission: reported by the kill run, not asserted here).
func (lc *leaseChaos) lostAcknowledged(t *testing.T, procs []*proc, peek func(p *proc, policy, key string) (leaseAnswer, int64)) (audited int, lost, under int64) {
	t.Helper()
	for policy, ks := range leaseChaosKeys {
		for _, key := range ks {
			for _, p := range procs {
				a, window := peek(p, policy, key)
				k := leaseWindowKey{policy, key, window}
				used, saw := leaseChaosLimits[policy]-a.Remaining, lc.allowed[k]
				if saw == 0 {
					continue // the window rolled since the clients stopped: nothing to compare
				}
				audited++
				if used < saw {
					lost += saw - used
					t.Errorf("%s %s on %s: the state shows %d used (remaining %d, reset after %d ms, window %d), %d allowed answers were received; windows %v", policy, key, p.ID, used, a.Remaining, a.ResetAfterMS, k.window, saw, lc.windowsOf(policy, key))
				} else if p == procs[0] {
					under += used - saw
				}
			}
		}
	}
	return audited, lost, under
}

// reportOddities fails the test with the first five answers outside the
// contract.
func (lc *leaseChaos) reportOddities(t *testing.T) {
	t.Helper()
	for i, o := range lc.oddities {
		if i == 5 {
			t.Errorf("... %d oddities in all", len(lc.oddities))
			break
		}
		t.Error(o)
	}
}
