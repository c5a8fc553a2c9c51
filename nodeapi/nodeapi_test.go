package nodeapi

import (
	"testing"
	"time"
)

func TestLatencyBucketsEndAtTheDeadline(t *testing.T) {
	for _, d := range []time.Duration{5 * time.Second, 2 * time.Second, 30 * time.Second, 3 * time.Millisecond} {
		b := LatencyBuckets(d)
		if b[0] != 0.0001 || b[len(b)-1] != d.Seconds() {
			t.Errorf("LatencyBuckets(%v) = %v: want 100µs … %v", d, b, d.Seconds())
		}
		for i := 1; i < len(b); i++ {
			if !(b[i] > b[i-1]) {
				t.Errorf("LatencyBuckets(%v) = %v: not increasing at %d", d, b, i)
			}
		}
	}
}
