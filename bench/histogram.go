package bench

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The histogram is log-linear in the style of HdrHistogram: values below
// 2·subCount ns are stored exactly, and every power-of-two range above is split
// into subCount equal buckets, so a reported value is at most 1/subCount
// (0.8%) above the true one. Values are clamped below 2^maxBits ns (~18 min).
const (
	subBits    = 7
	subCount   = 1 << subBits
	maxBits    = 40
	maxShift   = maxBits - subBits - 1
	numBuckets = (maxShift + 2) << subBits
	maxValue   = 1<<maxBits - 1
)

// Histogram records latencies. Record and the read methods may run
// concurrently (counts are atomics), so a live progress line can read a
// worker's histogram while the worker writes it.
type Histogram struct {
	counts [numBuckets]atomic.Uint64
	n      atomic.Uint64
	max    atomic.Int64
}

// bucketOf maps a value to its bucket: index = shift·subCount + (v >> shift),
// where shift drops all but the top subBits+1 significant bits.
func bucketOf(v uint64) int {
	if v > maxValue {
		v = maxValue
	}
	shift := bits.Len64(v) - (subBits + 1)
	if shift < 0 {
		shift = 0
	}
	return shift<<subBits + int(v>>uint(shift))
}

// bucketHigh is the largest value that maps to bucket i.
func bucketHigh(i int) uint64 {
	if i < 2*subCount {
		return uint64(i)
	}
	shift := i>>subBits - 1
	top := uint64(i - shift<<subBits)
	return (top+1)<<uint(shift) - 1
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(uint64(v))].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
}

// Merge adds o's counts into h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	m := o.max.Load()
	for {
		cur := h.max.Load()
		if m <= cur || h.max.CompareAndSwap(cur, m) {
			break
		}
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Max is the largest recorded value, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the nearest-rank q-quantile (0 < q ≤ 1): the smallest
// recorded value v such that at least ⌈q·n⌉ values are ≤ v, rounded up to its
// bucket's upper bound and never above Max. It returns 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	max := uint64(h.max.Load())
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), max))
		}
	}
	// A concurrent Record raised n after we loaded it; the top bucket is as
	// good an answer as any.
	return time.Duration(max)
}
