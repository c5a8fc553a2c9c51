package forward

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/trace"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/tracing"
)

// UnitName names a forwarded unit in spans (limitd.forward.unit on the
// follower's limitd.forward span, limitd.forward.units on the leader's
// limitd.raft.commit span): the stream's nonce and the frame's id, hex.
// The check stream's frames carry no trace context — adding one would
// change the frame layout both sides parse — so this name is what joins a
// follower's trace to the leader's batch.
func UnitName(t Tag) string {
	return strconv.FormatUint(t.Nonce, 16) + "-" + strconv.FormatUint(t.ID, 16)
}

// traceUnit records on ctx's span (the follower's limitd.forward) the unit
// its ops went in. Called only when tracing is Enabled.
func traceUnit(ctx context.Context, nonce, frame uint64) {
	trace.SpanFromContext(ctx).SetAttributes(tracing.AttrUnit.String(UnitName(Tag{Nonce: nonce, ID: frame})))
}

// ChecksTraced is Checks for the follower's overflow batcher while tracing
// is on: ctx carries the batch's span, whose traceparent goes with the
// POST (Post injects it), so the leader's request span is its child.
func (f *Forwarder) ChecksTraced(ctx context.Context, ops []fsm.Op, ext []byte, encoded func()) ([]fsm.Result, error) {
	return f.checks(trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(ctx)), ops, ext, encoded)
}
