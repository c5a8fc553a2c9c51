package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTarget decides by key: k%3 == 0 fails with a 503, 1 is allowed, 2 is
// refused; it counts what it answered so the report can be checked exactly.
type fakeTarget struct {
	delay                    time.Duration
	keys                     int
	calls, allowed, refused  atomic.Int64
	failed, slotErrs, checks atomic.Int64
	outOfRange               atomic.Int64
	mu                       sync.Mutex
	seen                     map[int]bool
}

func (f *fakeTarget) wait(ctx context.Context) error {
	if f.delay == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(f.delay):
		return nil
	}
}

func (f *fakeTarget) note(k int) {
	if k < 0 || k >= f.keys {
		f.outOfRange.Add(1)
	}
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[int]bool{}
	}
	f.seen[k] = true
	f.mu.Unlock()
}

func (f *fakeTarget) Do(ctx context.Context, k int) (bool, error) {
	if err := f.wait(ctx); err != nil {
		return false, err
	}
	f.note(k)
	f.calls.Add(1)
	switch k % 3 {
	case 0:
		f.failed.Add(1)
		return false, &StatusError{Status: 503, Code: "unavailable"}
	case 1:
		f.allowed.Add(1)
		return true, nil
	}
	f.refused.Add(1)
	return false, nil
}

// DoBatch: every 5th request fails whole with a 503; otherwise k%3 == 0 is
// a 4xx slot error, 1 allowed, 2 refused.
func (f *fakeTarget) DoBatch(ctx context.Context, keys []int, out []Outcome) error {
	if err := f.wait(ctx); err != nil {
		return err
	}
	if f.calls.Add(1)%5 == 0 {
		f.failed.Add(int64(len(keys)))
		return &StatusError{Status: 503}
	}
	for i, k := range keys {
		f.note(k)
		f.checks.Add(1)
		switch k % 3 {
		case 0:
			f.slotErrs.Add(1)
			out[i] = Outcome{Err: &StatusError{Code: "invalid_argument"}}
		case 1:
			f.allowed.Add(1)
			out[i] = Outcome{Allowed: true}
		default:
			f.refused.Add(1)
			out[i] = Outcome{}
		}
	}
	return nil
}

func testWorkload() Workload {
	w := DefaultWorkload()
	w.Concurrency = 8
	w.Keys = 50
	w.Duration = 150 * time.Millisecond
	w.Warmup = 0
	return w
}

func TestRunCountsAddUp(t *testing.T) {
	f := &fakeTarget{keys: 50, delay: 100 * time.Microsecond}
	w := testWorkload()
	begin := time.Now()
	r, err := Run(context.Background(), w, f, nil)
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests == 0 {
		t.Fatal("no requests")
	}
	// With no warm-up every answered request is counted, and in-flight ones
	// are awaited: the report equals what the target answered.
	if r.Requests != f.calls.Load() || r.Allowed != f.allowed.Load() || r.Refused != f.refused.Load() || r.Errors != f.failed.Load() {
		t.Errorf("report %d req / %d allowed / %d refused / %d errors, target answered %d / %d / %d / %d",
			r.Requests, r.Allowed, r.Refused, r.Errors, f.calls.Load(), f.allowed.Load(), f.refused.Load(), f.failed.Load())
	}
	if r.Checks != r.Allowed+r.Refused+r.Errors || r.Checks != r.Requests {
		t.Errorf("checks %d != allowed+refused+errors %d or requests %d", r.Checks, r.Allowed+r.Refused+r.Errors, r.Requests)
	}
	if r.ErrorsByClass["5xx"] != r.Errors || len(r.ErrorsByClass) != 1 {
		t.Errorf("errors by class %v, want all %d as 5xx", r.ErrorsByClass, r.Errors)
	}
	if r.LastError == "" {
		t.Error("no example error")
	}
	// Ordering, not wall-clock bounds: the run stops once the duration has
	// passed (never before), and within the time Run took.
	if r.Elapsed < w.Duration || r.Elapsed > took {
		t.Errorf("elapsed %v, want from the duration %v to the %v Run took", r.Elapsed, w.Duration, took)
	}
	// Latency of answered requests: at least the target's delay.
	if r.P50 < 100*time.Microsecond || r.P99 < r.P50 || r.Max < r.P99 {
		t.Errorf("latencies p50 %v p99 %v max %v", r.P50, r.P99, r.Max)
	}
	if f.outOfRange.Load() != 0 {
		t.Errorf("%d keys outside [0, 50)", f.outOfRange.Load())
	}
	if r.Concurrency != 8 || r.Keys != 50 || r.Dist != DistUniform || r.Batch != 1 || r.Interrupted {
		t.Errorf("workload not reported: %+v", r)
	}
}

func TestRunBatchCountsEveryCheck(t *testing.T) {
	f := &fakeTarget{keys: 50, delay: 100 * time.Microsecond}
	w := testWorkload()
	w.Batch = 10
	w.Dist = DistZipf
	r, err := Run(context.Background(), w, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	failedRequests := f.calls.Load() / 5
	if r.Requests != f.calls.Load() || r.Checks != r.Requests*10 {
		t.Errorf("requests %d (target %d), checks %d, want 10 per request", r.Requests, f.calls.Load(), r.Checks)
	}
	if r.Allowed != f.allowed.Load() || r.Refused != f.refused.Load() {
		t.Errorf("allowed/refused %d/%d, target %d/%d", r.Allowed, r.Refused, f.allowed.Load(), f.refused.Load())
	}
	if r.ErrorsByClass["4xx"] != f.slotErrs.Load() || r.ErrorsByClass["5xx"] != failedRequests*10 {
		t.Errorf("errors by class %v, want 4xx %d (slots) and 5xx %d (whole requests)", r.ErrorsByClass, f.slotErrs.Load(), failedRequests*10)
	}
	if r.Checks != r.Allowed+r.Refused+r.Errors {
		t.Errorf("checks %d != %d + %d + %d", r.Checks, r.Allowed, r.Refused, r.Errors)
	}
	if f.seen[0] != true {
		t.Error("zipf never drew the hottest key")
	}
}

func TestRunWarmupNotCounted(t *testing.T) {
	f := &fakeTarget{keys: 50, delay: time.Millisecond}
	w := testWorkload()
	w.Warmup = 300 * time.Millisecond // longer than ProgressInterval: the first tick is in it
	w.Duration = 300 * time.Millisecond
	var ticks []Progress
	var mu sync.Mutex
	begin := time.Now()
	r, err := Run(context.Background(), w, f, func(p Progress) {
		mu.Lock()
		ticks = append(ticks, p)
		mu.Unlock()
	})
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	// About half the calls happened in the warm-up.
	if r.Requests >= f.calls.Load() || r.Requests < f.calls.Load()/4 {
		t.Errorf("counted %d of %d requests with a warm-up as long as the run", r.Requests, f.calls.Load())
	}
	// The warm-up is not in Elapsed: it is at least the measured duration
	// and at most what Run took minus the warm-up.
	if r.Elapsed < w.Duration || r.Elapsed > took-w.Warmup {
		t.Errorf("elapsed %v, want the measured %v only (Run took %v with a %v warm-up)", r.Elapsed, w.Duration, took, w.Warmup)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ticks) == 0 || !ticks[0].Warmup || ticks[0].Checks != 0 {
		t.Fatalf("progress ticks %+v: want a first tick in the warm-up", ticks)
	}
	last := ticks[len(ticks)-1]
	if last.Warmup || last.Checks == 0 || last.ChecksPerSec <= 0 || last.P99 <= 0 || last.Total != 600*time.Millisecond {
		t.Errorf("last progress tick %+v: want live figures", last)
	}
}

func TestRunInterrupted(t *testing.T) {
	f := &fakeTarget{keys: 50, delay: 20 * time.Millisecond}
	w := testWorkload()
	w.Duration = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r, err := Run(ctx, w, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Stopped by the context, not by the (minute-long) duration.
	if r.Elapsed >= w.Duration {
		t.Errorf("elapsed %v: Run waited for the duration %v after the context ended", r.Elapsed, w.Duration)
	}
	if !r.Interrupted || r.Requests == 0 {
		t.Errorf("interrupted %v requests %d: want a partial report", r.Interrupted, r.Requests)
	}
	// Requests cut off by the context are not the target's errors; the
	// fake's own 503s are. A 503 that lands together with the cut is
	// dropped with it (the worker sees the context ended), so the report may
	// miss up to one per worker, but never counts more than the target did.
	failed := f.failed.Load()
	if r.Errors > failed {
		t.Errorf("errors %d, target failed %d: cancelled requests were counted", r.Errors, failed)
	}
	if failed-r.Errors > int64(w.Concurrency) {
		t.Errorf("errors %d, target failed %d: more dropped than requests in flight at the cut", r.Errors, failed)
	}
}

func TestRunRejectsBadWorkloads(t *testing.T) {
	single := struct{ Target }{&fakeTarget{keys: 50}} // hides DoBatch
	bad := []func(*Workload){
		func(w *Workload) { w.Concurrency = 0 },
		func(w *Workload) { w.Batch = 0 },
		func(w *Workload) { w.Duration = 0 },
		func(w *Workload) { w.Warmup = -1 },
		func(w *Workload) { w.Dist = "pareto" },
		func(w *Workload) { w.Keys = 0 },
		func(w *Workload) { w.Batch = 2 }, // single-check target
	}
	for i, mutate := range bad {
		w := testWorkload()
		mutate(&w)
		if _, err := Run(context.Background(), w, single, nil); err == nil {
			t.Errorf("case %d: no error for %+v", i, w)
		}
	}
	if err := (Workload{}).Validate(); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("zero workload validated: %v", err)
	}
}

// Measuring is called once, when the measured interval starts: after the
// warm-up (calls the target had by then are warm-up calls), or at once
// without one.
func TestRunMeasuringAtMeasuredStart(t *testing.T) {
	for _, warmup := range []time.Duration{0, 200 * time.Millisecond} {
		f := &fakeTarget{keys: 50, delay: time.Millisecond}
		w := testWorkload()
		w.Warmup, w.Duration = warmup, 200*time.Millisecond
		var calls atomic.Int64
		var seen atomic.Int64 // target calls when Measuring ran
		w.Measuring = func() { calls.Add(1); seen.Store(f.calls.Load()) }
		r, err := Run(context.Background(), w, f, nil)
		if err != nil {
			t.Fatal(err)
		}
		if calls.Load() != 1 {
			t.Errorf("warm-up %v: Measuring called %d times, want once", warmup, calls.Load())
		}
		if warmup == 0 && seen.Load() != 0 {
			t.Errorf("no warm-up: Measuring ran after %d calls, want before any", seen.Load())
		}
		if warmup > 0 && (seen.Load() == 0 || seen.Load() >= f.calls.Load() || r.Requests == 0) {
			t.Errorf("warm-up %v: Measuring ran after %d of %d calls (%d measured), want between the warm-up's and the run's", warmup, seen.Load(), f.calls.Load(), r.Requests)
		}
	}
}
