package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBucketBoundaries(t *testing.T) {
	// Every bucket's upper bound maps back to it and the next value to the
	// next bucket: buckets tile the range with no gaps or overlaps.
	for i := 0; i < numBuckets-1; i++ {
		hi := bucketHigh(i)
		if got := bucketOf(hi); got != i {
			t.Fatalf("bucketOf(bucketHigh(%d)=%d) = %d", i, hi, got)
		}
		if got := bucketOf(hi + 1); got != i+1 {
			t.Fatalf("bucketOf(%d) = %d, want %d", hi+1, got, i+1)
		}
	}
	if got := bucketOf(math.MaxUint64); got != numBuckets-1 {
		t.Errorf("huge values land in bucket %d, want the last (%d)", got, numBuckets-1)
	}
	if bucketHigh(numBuckets-1) != maxValue {
		t.Errorf("last bucket ends at %d, want %d", bucketHigh(numBuckets-1), uint64(maxValue))
	}
}

// exactQuantile is the nearest-rank definition on a sorted sample.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = max(rank, 1)
	return sorted[rank-1]
}

func TestQuantileWithinRelativeError(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	samples := map[string][]time.Duration{}
	// Log-normal around 1 ms: the shape of request latencies.
	ln := make([]time.Duration, 50_000)
	for i := range ln {
		ln[i] = time.Duration(math.Exp(r.NormFloat64()*0.8) * float64(time.Millisecond))
	}
	samples["lognormal"] = ln
	// Wide uniform spread, 1 µs .. 10 s.
	wide := make([]time.Duration, 20_000)
	for i := range wide {
		wide[i] = time.Duration(math.Pow(10, 3+7*r.Float64()))
	}
	samples["wide"] = wide
	samples["single"] = []time.Duration{1234567}

	for name, vals := range samples {
		var h Histogram
		for _, v := range vals {
			h.Record(v)
		}
		sorted := slices.Clone(vals)
		slices.Sort(sorted)
		for _, q := range []float64{0.001, 0.5, 0.9, 0.99, 0.999, 1} {
			want := exactQuantile(sorted, q)
			got := h.Quantile(q)
			// Reported values round up to the bucket bound: never below the
			// true value, at most 1/128 above.
			if got < want || float64(got-want) > float64(want)/subCount {
				t.Errorf("%s p%g = %v, want %v (+0.8%% at most)", name, q*100, got, want)
			}
		}
		if h.Max() != sorted[len(sorted)-1] {
			t.Errorf("%s max = %v, want exactly %v", name, h.Max(), sorted[len(sorted)-1])
		}
		if h.Count() != uint64(len(vals)) {
			t.Errorf("%s count = %d, want %d", name, h.Count(), len(vals))
		}
	}
}

func TestQuantileSmallValuesExact(t *testing.T) {
	// 1..100 ns are each their own bucket: nearest-rank percentiles are exact.
	var h Histogram
	for v := 100; v >= 1; v-- {
		h.Record(time.Duration(v))
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {0.001, 1}, {1, 100}} {
		if got := h.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%g) = %v, want %v", tt.q, got, tt.want)
		}
	}
	var empty Histogram
	if empty.Quantile(0.99) != 0 || empty.Max() != 0 {
		t.Errorf("empty histogram: p99 %v max %v, want 0", empty.Quantile(0.99), empty.Max())
	}
	var neg Histogram
	neg.Record(-5)
	if neg.Quantile(1) != 0 {
		t.Errorf("negative latency recorded as %v, want 0", neg.Quantile(1))
	}
}

func TestHistogramMergeEqualsCombinedRecording(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	var a, b, all Histogram
	for i := range 10_000 {
		v := time.Duration(r.Int64N(int64(50 * time.Millisecond)))
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
		all.Record(v)
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		if m.Quantile(q) != all.Quantile(q) {
			t.Errorf("merged p%g = %v, recorded together %v", q*100, m.Quantile(q), all.Quantile(q))
		}
	}
	if m.Max() != all.Max() || m.Count() != all.Count() {
		t.Errorf("merged max/count %v/%d, want %v/%d", m.Max(), m.Count(), all.Max(), all.Count())
	}
}

func TestHistogramConcurrentRecordAndRead(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				h.Record(time.Duration(w*5000 + i))
			}
		}()
	}
	for range 50 {
		h.Quantile(0.99) // must not race (go test -race) or panic
	}
	wg.Wait()
	if h.Count() != 20_000 || h.Max() != 19_999 {
		t.Errorf("count %d max %v, want 20000 and 19.999µs", h.Count(), h.Max())
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Record(time.Duration(i&0xfffff) * time.Microsecond)
	}
}
