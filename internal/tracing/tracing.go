// Package tracing is limitd's OpenTelemetry tracing of a check across the
// nodes: set-up from the standard OTEL_* environment variables (Start), and
// the helpers the front ends and the cluster call at their hook sites.
//
// The invariant every hook site keeps: when tracing is off, the check path
// does no work for it. Each site tests Enabled() — one atomic load — before
// it touches a context, a span or an attribute, so that no no-op span is
// ever created and nothing is allocated; the benchmarks show the same
// allocs/op with and without the hooks. setup.Start turns it on (Activate)
// only when the operator asked for OTLP export, before any request is
// served. This package is the OpenTelemetry API alone: the SDK and the
// exporter are setup's, which only serve imports.
//
// Keys are never put in spans as they are: a key is often an API key or a
// user's identity. KeyHash gives a short, stable digest instead, enough to
// tell checks of one key apart from another's in a trace.
package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName names limitd's instrumentation scope in exported spans.
const ScopeName = "github.com/limitd/limitd"

// Span names: a check's spans, outermost first (docs/OPERATIONS.md, Tracing).
const (
	SpanForward      = "limitd.forward"       // a follower's forwarded call to the leader (client)
	SpanForwardServe = "limitd.forward.serve" // the leader's side of a forwarded unit (server)
	SpanCheck        = "limitd.check"         // cluster.Node.Check: the node's part of one request
	SpanCommit       = "limitd.raft.commit"   // one group-commit batch: propose → commit → applied
	SpanForwardBatch = "limitd.forward.batch" // the follower's overflow batch: one POST to the leader
	EventApplied     = "limitd.fsm.applied"   // on SpanCommit: the state machine's answer arrived
)

// Attribute keys limitd sets on its spans.
const (
	AttrNodeID      = attribute.Key("limitd.node.id")
	AttrOps         = attribute.Key("limitd.ops")           // ops in a request or unit
	AttrChecks      = attribute.Key("limitd.checks")        // checks in those ops
	AttrKeyHash     = attribute.Key("limitd.key.hash")      // KeyHash of the first check's key
	AttrRole        = attribute.Key("limitd.role")          // "leader" or "follower" when the node decided how to route
	AttrBatchSize   = attribute.Key("limitd.batch.size")    // ops in one Raft entry (or one overflow POST)
	AttrBatchUnits  = attribute.Key("limitd.batch.units")   // callers' units sharing it
	AttrUnit        = attribute.Key("limitd.forward.unit")  // a forwarded unit's name: "<stream nonce>-<frame id>", hex
	AttrUnits       = attribute.Key("limitd.forward.units") // the forwarded units a batch carries
	AttrRaftIndex   = attribute.Key("limitd.raft.index")    // the entry's Raft log index
	AttrLeader      = attribute.Key("limitd.leader")        // the leader's HTTP address a follower forwarded to
	AttrLinksCapped = attribute.Key("limitd.batch.links_dropped")
)

// MaxLinks bounds the links one batch span records to its callers' spans
// (the SDK's own default limit is 128): a batch of thousands of checks
// would otherwise carry thousands of links. limitd.batch.units says how
// many there were, limitd.batch.links_dropped how many are not linked.
const MaxLinks = 64

var (
	on atomic.Bool
	// tracer is read by hooks that saw Enabled while Activate's off may be
	// swapping it: atomic, so a stop racing a check is no data race.
	tracer atomic.Pointer[trace.Tracer]
	// W3C Trace Context: the traceparent and tracestate headers.
	propagator propagation.TextMapPropagator = propagation.TraceContext{}
)

// Activate turns tracing on with tr (setup.Start's provider's tracer);
// off turns it back off. Activate before serving: the hook sites read
// Enabled on every check.
func Activate(tr trace.Tracer) (off func()) {
	tracer.Store(&tr)
	on.Store(true)
	return func() {
		on.Store(false)
		tracer.Store(nil)
	}
}

// Propagator is the W3C trace-context propagator limitd reads and writes.
func Propagator() propagation.TextMapPropagator { return propagator }

// Detach is context.Background(), keeping only ctx's span while tracing is
// on: for a service that drops a front end's context (its values and
// cancellation) to bound the wait on its own, and a trace that should not
// break there. Off, it is context.Background() and allocates nothing.
func Detach(ctx context.Context) context.Context {
	if !Enabled() {
		return context.Background()
	}
	return KeepSpan(context.Background(), ctx)
}

// KeepSpan returns dst carrying src's span while tracing is on (dst, as it
// is, when off or when src has none).
func KeepSpan(dst, src context.Context) context.Context {
	if !Enabled() {
		return dst
	}
	sc := trace.SpanContextFromContext(src)
	if !sc.IsValid() {
		return dst
	}
	return trace.ContextWithSpanContext(dst, sc)
}

// Enabled reports whether spans are recorded. The hook sites' guard: false
// unless setup.Start found tracing asked for.
func Enabled() bool { return on.Load() }

// Tracer is limitd's tracer (a no-op one while tracing is off).
func Tracer() trace.Tracer {
	if tr := tracer.Load(); tr != nil {
		return *tr
	}
	return noopTracer
}

var noopTracer = noop.NewTracerProvider().Tracer(ScopeName)

// StartSpan starts a span named name under ctx's. Call it only when Enabled.
func StartSpan(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// End ends span, marking it failed when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Extract returns ctx carrying the remote span context of h's traceparent
// header, if any.
func Extract(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// ExtractFrom is Extract from any carrier (gRPC metadata, say).
func ExtractFrom(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	return propagator.Extract(ctx, c)
}

// Inject writes ctx's span context into h as traceparent (and tracestate).
func Inject(ctx context.Context, h http.Header) {
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// KeyHash is a key's digest for a span: the first 8 bytes of its SHA-256,
// in hex. Stable across nodes and restarts, so one key's checks can be
// found in a tracing back end, without the key itself being exported.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}
