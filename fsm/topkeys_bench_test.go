package fsm

import (
	"fmt"
	"testing"
)

// BenchmarkTopKeysAdd: one plan check's sketch update (both buckets), over
// 1,000 keys churning through the sketches (every add of a new key evicts):
// the apply path's cost of top keys per check.
func BenchmarkTopKeysAdd(b *testing.B) {
	p := &Plan{Name: "pro"}
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("tenant:%d", i))
	}
	var t topKeys
	b.ReportAllocs()
	cpu0 := cpuNanos()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t.addPlan(p, keys[i%len(keys)], 1, true, nil, t0+int64(i)*1000)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op") // the box is shared: CPU, not wall time
}
