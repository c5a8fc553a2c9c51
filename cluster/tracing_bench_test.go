package cluster

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/tracing"
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

// BenchmarkBatcherDoTraced is BenchmarkBatcherDo with tracing on, every
// span sampled and kept by an in-memory processor: what the batch span
// costs a caller when it is on (the off case must stay BatcherDo's).
func BenchmarkBatcherDoTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	off := tracing.Activate(tp.Tracer(tracing.ScopeName))
	defer off()
	res := make([]fsm.Result, 1)
	bt := newBatcher(128, 1, 0, func(ops []fsm.Op, _ []byte, encoded func()) ([]fsm.Result, error) {
		encoded()
		return res[:len(ops)], nil
	}, nil)
	bt.traced(tracing.SpanCommit, func(_ context.Context, ops []fsm.Op, _ []byte, encoded func()) ([]fsm.Result, error) {
		encoded()
		return res[:len(ops)], nil
	})
	ops := []fsm.Op{{Checks: []fsm.Check{{Key: "user:12345", Cost: 1}}}}
	ctx, span := tracing.StartSpan(context.Background(), tracing.SpanCheck, 0)
	defer span.End()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bt.do(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
}
