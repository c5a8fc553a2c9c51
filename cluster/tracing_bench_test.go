package cluster

import (
	"context"
	"testing"

	"github.com/limitd/limitd/fsm"
)

// BenchmarkBatcherDo is one caller's unit through the group-commit batcher
// with a send that answers at once: the cost the batcher adds to a check,
// where the tracing hooks are (off here, as by default: compare allocs/op
// with the batcher before them).
func BenchmarkBatcherDo(b *testing.B) {
	res := make([]fsm.Result, 1)
	send := func(ops []fsm.Op, _ []byte, encoded func()) ([]fsm.Result, error) {
		encoded()
		return res[:len(ops)], nil
	}
	bt := newBatcher(128, 1, 0, send, nil)
	ops := []fsm.Op{{Checks: []fsm.Check{{Key: "user:12345", Cost: 1}}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bt.do(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
}
