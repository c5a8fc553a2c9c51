package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
)

// The Go client against a real 3-node cluster: 10,000 single Check calls
// from 64 goroutines while the leader is killed -9 twice (each killed node is
// restarted before the next kill, so a quorum remains). Every acknowledged
// decision must be counted exactly once: for each key, the allowed decisions
// the callers received equal what the key's state says was consumed (read
// with Peek through the leader), and no key admits more than its limit.
//
// It reuses the process harness of process_test.go and crash_test.go
// (newProc, startCrashCluster, crashLoad.leader) rather than its own.
func TestProcessClientExactlyOnceUnderLeaderKills(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	if testing.Short() {
		t.Skip("starts and kills a 3-node process cluster")
	}
	const (
		total   = 10000
		workers = 64
		keys    = 8
		// ~1,250 checks per key: half the keys run out (some refusals), half
		// do not (their consumed count is the exact number of admissions).
		limitLow, limitHigh = 1000, 5000
	)
	procs := startCrashCluster(t, crashFlags...)
	l := newCrashLoad(t, procs)
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.HTTPAddr)
	}
	c, err := client.New(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A window longer than the test with no boundary within it (fixed
	// windows are aligned to the epoch): no rollover. Whole hours, within
	// --max-inline-window's default day.
	w := crashWindow(10 * time.Minute)
	lims := [2]*client.Limit{
		{Algorithm: "fixed_window", Limit: limitLow, Window: w},
		{Algorithm: "fixed_window", Limit: limitHigh, Window: w},
	}
	lim := func(k int) *client.Limit { return lims[k%2] }
	run := time.Now().UnixNano()
	keyName := func(k int) string { return fmt.Sprintf("client-exactly-once:%d:%d", run, k) }

	var (
		next    atomic.Int64
		done    atomic.Int64
		allowed [keys]atomic.Int64
		refused atomic.Int64
		errMu   sync.Mutex
		errs    []error
		wg      sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				k := int(i*7919) % keys
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				d, err := c.Check(ctx, client.Request{Key: keyName(k), Limit: lim(k)})
				cancel()
				switch {
				case err != nil:
					errMu.Lock()
					errs = append(errs, fmt.Errorf("check %d: %w", i, err))
					errMu.Unlock()
				case d.Allowed:
					allowed[k].Add(1)
				default:
					refused.Add(1)
				}
				done.Add(1)
			}
		}()
	}
	// Kill the leader -9 at about 2,000 and 6,000 completed checks.
	for _, at := range []int64{2000, 6000} {
		for done.Load() < at && done.Load() < total {
			time.Sleep(5 * time.Millisecond)
		}
		old := l.leader(nil, 20*time.Second)
		l.setUp(old, false)
		old.Kill()
		next := l.leader(old, 20*time.Second)
		t.Logf("at %d checks: killed leader %s, new leader %s", done.Load(), old.ID, next.ID)
		old.start(crashFlags...)
		old.waitReady()
		l.setUp(old, true)
	}
	wg.Wait()
	for i, err := range errs {
		if i == 5 {
			break
		}
		t.Errorf("%v", err)
	}
	if len(errs) > 0 {
		t.Fatalf("%d of %d checks failed", len(errs), total)
	}
	var sumAllowed int64
	for k := 0; k < keys; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		d, err := c.Peek(ctx, keyName(k), "", lim(k))
		cancel()
		if err != nil {
			t.Fatalf("peek key %d: %v", k, err)
		}
		consumed := d.Limit - d.Remaining
		got := allowed[k].Load()
		sumAllowed += got
		if got > lim(k).Limit {
			t.Errorf("key %d: %d allowed, over the limit %d", k, got, lim(k).Limit)
		}
		if consumed != got {
			t.Errorf("key %d: the callers were allowed %d times, the key's state counts %d", k, got, consumed)
		}
	}
	st := c.Stats()
	t.Logf("allowed %d, refused %d, retries %d, leader changes seen %d, batches %d",
		sumAllowed, refused.Load(), st.Retries, st.LeaderChanges, st.Batches)
	if refused.Load() == 0 || sumAllowed == 0 {
		t.Errorf("allowed %d, refused %d: the run must exercise both", sumAllowed, refused.Load())
	}
	if st.Retries == 0 {
		t.Errorf("no retries: the kills did not reach the client")
	}
}
