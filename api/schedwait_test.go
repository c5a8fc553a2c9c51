package api

import (
	"math"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRebinHistogram(t *testing.T) {
	h := &rtmetrics.Float64Histogram{
		// [-Inf,0) [0,1µs) [1µs,2µs) [2µs,3ms) [3ms,+Inf)
		Buckets: []float64{math.Inf(-1), 0, 1e-6, 2e-6, 3e-3, math.Inf(1)},
		Counts:  []uint64{1, 4, 2, 3, 5},
	}
	count, sum, cum := rebinHistogram(h, []float64{1e-6, 1e-3, 5e-3})
	if count != 15 {
		t.Errorf("count %d, want 15", count)
	}
	// Midpoints: 0 (clamped), 0.5µs, 1.5µs, (2µs+3ms)/2; the open bucket at its lower edge.
	want := 1*0 + 4*0.5e-6 + 2*1.5e-6 + 3*(2e-6+3e-3)/2 + 5*3e-3
	if math.Abs(sum-want) > 1e-12 {
		t.Errorf("sum %g, want %g", sum, want)
	}
	// A runtime bucket counts under the first bound at or above its upper edge:
	// [1µs,2µs) may hold 1.9µs, so it is not under 1µs; [2µs,3ms) not under 1ms.
	for b, n := range map[float64]uint64{1e-6: 5, 1e-3: 7, 5e-3: 10} {
		if cum[b] != n {
			t.Errorf("cumulative at %g: %d, want %d", b, cum[b], n)
		}
	}
	if len(cum) != 3 {
		t.Errorf("%d bounds, want 3", len(cum))
	}
}

// TestSchedWaitCollector: the runtime's scheduling latencies reach /metrics
// as a histogram with the bounds above once goroutines have waited to run.
func TestSchedWaitCollector(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				runtime.Gosched() // each a transition the runtime may sample
			}
		}()
	}
	wg.Wait()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newSchedWaitCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "limitd_go_sched_wait_seconds" {
		t.Fatalf("families %v", mfs)
	}
	h := mfs[0].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() == 0 || h.GetSampleSum() <= 0 {
		t.Errorf("no waits recorded after 8,000 yields: count %d sum %g", h.GetSampleCount(), h.GetSampleSum())
	}
	if n := len(h.GetBucket()); n != len(schedWaitBuckets) {
		t.Errorf("%d buckets, want %d", n, len(schedWaitBuckets))
	}
	if last := h.GetBucket()[len(h.GetBucket())-1]; last.GetCumulativeCount() > h.GetSampleCount() {
		t.Errorf("bucket count %d above the total %d", last.GetCumulativeCount(), h.GetSampleCount())
	}
}
