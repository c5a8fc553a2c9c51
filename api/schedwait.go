package api

import (
	"math"
	rtmetrics "runtime/metrics"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// schedWaitMetric is the Go runtime's record of how long goroutines waited
// to run once runnable: a check waits this long for a CPU at every hop
// inside a node (an HTTP read, a batcher's flush, raft's goroutines, the
// answer), so on a loaded machine it is a stage of the latency budget that
// no other histogram shows.
const schedWaitMetric = "/sched/latencies:seconds"

// schedWaitBuckets bound limitd_go_sched_wait_seconds: 1 µs to 1 s in
// 1-2.5-5 steps. client_golang's go_sched_latencies_seconds (not enabled)
// re-bins the runtime's histogram into buckets about 11× apart, too coarse
// for waits of tens to hundreds of microseconds.
var schedWaitBuckets = []float64{
	1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
}

// schedWaitCollector exports the runtime's scheduling-latency histogram as
// limitd_go_sched_wait_seconds, read at each scrape. The runtime samples
// goroutine transitions (not every one), so the count is a sample's; the
// mean and quantiles are what to read. The sum is estimated from each
// runtime bucket's midpoint (its buckets are a few per cent wide).
type schedWaitCollector struct {
	desc *prometheus.Desc

	mu     sync.Mutex
	sample []rtmetrics.Sample
}

func newSchedWaitCollector() *schedWaitCollector {
	return &schedWaitCollector{
		desc: prometheus.NewDesc("limitd_go_sched_wait_seconds",
			"Time goroutines spent runnable before running (Go runtime "+schedWaitMetric+", sampled by the runtime): the wait for a CPU at each hop of a check inside this node.",
			nil, nil),
		sample: []rtmetrics.Sample{{Name: schedWaitMetric}},
	}
}

func (c *schedWaitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *schedWaitCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	rtmetrics.Read(c.sample)
	v := c.sample[0].Value
	c.mu.Unlock()
	if v.Kind() != rtmetrics.KindFloat64Histogram {
		return // a runtime without the metric: nothing to export
	}
	count, sum, cum := rebinHistogram(v.Float64Histogram(), schedWaitBuckets)
	ch <- prometheus.MustNewConstHistogram(c.desc, count, sum, cum)
}

// rebinHistogram turns a runtime histogram into Prometheus's form over
// bounds: the total count, a sum from the buckets' midpoints, and the
// cumulative count at or below each bound. A runtime bucket counts under
// the first bound at or above its upper edge, so no bound's count includes
// a value that may exceed it.
func rebinHistogram(h *rtmetrics.Float64Histogram, bounds []float64) (uint64, float64, map[float64]uint64) {
	per := make([]uint64, len(bounds)+1) // the last: above every bound
	var count uint64
	var sum float64
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		if math.IsInf(lo, -1) || lo < 0 {
			lo = 0
		}
		mid := lo
		if !math.IsInf(hi, 1) {
			mid = (lo + hi) / 2
		}
		count += n
		sum += mid * float64(n)
		per[sort.SearchFloat64s(bounds, hi)] += n
	}
	cum := make(map[float64]uint64, len(bounds))
	var run uint64
	for i, b := range bounds {
		run += per[i]
		cum[b] = run
	}
	return count, sum, cum
}
