package cluster

import (
	"context"

	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/tracing"
)

// The cluster's spans of a check (docs/OPERATIONS.md, Tracing). Every
// function here runs only when tracing.Enabled: the hook sites in Check,
// the batcher and proposeChecks test it first, so that with tracing off a
// check does no work and allocates nothing for it.

// checkTraced is Check with its spans: limitd.check under the caller's
// (the front end's request span), and on a follower limitd.forward around
// the call to the leader.
func (n *Node) checkTraced(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	ctx, span := tracing.StartSpan(ctx, tracing.SpanCheck, trace.SpanKindInternal, opsAttrs(ops)...)
	var res []fsm.Result
	err := n.onLeader(ctx,
		func() (err error) {
			span.SetAttributes(tracing.AttrRole.String("leader"))
			res, err = n.leaderBatch.do(ctx, ops)
			return err
		},
		func(addr string) (err error) {
			span.SetAttributes(tracing.AttrRole.String("follower"))
			fctx, fspan := tracing.StartSpan(ctx, tracing.SpanForward, trace.SpanKindClient, tracing.AttrLeader.String(addr))
			res, err = n.fwd.Check(fctx, ops) // the stream names the unit on fspan (limitd.forward.unit)
			tracing.End(fspan, err)
			return err
		})
	tracing.End(span, err)
	return res, err
}

// opsAttrs describes ops without their keys: the counts, and the first
// check's key hashed (tracing.KeyHash), never the key itself.
func opsAttrs(ops []fsm.Op) []attribute.KeyValue {
	checks := 0
	first := ""
	for _, op := range ops {
		if checks == 0 && len(op.Checks) > 0 {
			first = op.Checks[0].Key
		}
		checks += len(op.Checks)
	}
	attrs := []attribute.KeyValue{tracing.AttrOps.Int(len(ops)), tracing.AttrChecks.Int(checks)}
	if checks > 0 {
		attrs = append(attrs, tracing.AttrKeyHash.String(tracing.KeyHash(first)))
	}
	return attrs
}

// traced makes b's batches spans named name, sent with send (which gets
// the batch's span in its context) instead of b.send while tracing is on.
func (b *batcher) traced(name string, send func(ctx context.Context, ops []fsm.Op, ext []byte, encoded func()) ([]fsm.Result, error)) {
	b.traceName, b.traceSend = name, send
}

// sendTraced sends one batch in its span. A batch is many callers' units in
// one Raft entry (or one overflow POST): its span is a child of the first
// traced caller's span, so that a lone check reads as one trace, and links
// to the others' (at most tracing.MaxLinks), so that each of them finds the
// commit it waited for. limitd.batch.size is the entry's ops; a forwarded
// unit's name (limitd.forward.units) joins it to the follower's
// limitd.forward span, whose trace the check stream does not carry.
func (b *batcher) sendTraced(batch []*pending, ops []fsm.Op, ext []byte, encoded func()) ([]fsm.Result, error) {
	var parent trace.SpanContext
	var links []trace.Link
	dropped := 0
	for _, p := range batch {
		switch {
		case !p.span.IsValid():
		case !parent.IsValid():
			parent = p.span
		case len(links) < tracing.MaxLinks:
			links = append(links, trace.Link{SpanContext: p.span})
		default:
			dropped++
		}
	}
	attrs := []attribute.KeyValue{tracing.AttrBatchSize.Int(len(ops)), tracing.AttrBatchUnits.Int(len(batch))}
	if dropped > 0 {
		attrs = append(attrs, tracing.AttrLinksCapped.Int(dropped))
	}
	if len(ext) > 0 {
		var units []string
		_ = forward.ForEachTag(ext, len(ops), func(t forward.Tag, _, _ int) { units = append(units, forward.UnitName(t)) })
		attrs = append(attrs, tracing.AttrUnits.StringSlice(units))
	}
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	ctx, span := tracing.Tracer().Start(ctx, b.traceName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	res, err := b.traceSend(ctx, ops, ext, encoded)
	tracing.End(span, err)
	return res, err
}

// traceApplied marks on the commit span (ctx's) the entry's index and the
// moment the leader's state machine answered it: the apply is an event, not
// a span, because raft's FSM goroutine applies many entries in one
// ApplyBatch, out of any request's context.
func traceApplied(ctx context.Context, f raft.ApplyFuture, err error) {
	span := trace.SpanFromContext(ctx)
	if err != nil {
		return
	}
	idx := tracing.AttrRaftIndex.Int64(int64(f.Index()))
	span.SetAttributes(idx)
	span.AddEvent(tracing.EventApplied, trace.WithAttributes(idx))
}
