package tracegrpc

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/limitd/limitd/internal/tracing"
)

// A check call gets a server span under the traceparent of its metadata,
// and its handler runs in that span; an admin call gets none.
func TestInterceptorSpansCheckCalls(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	off := tracing.Activate(tp.Tracer(tracing.ScopeName))
	defer off()

	const tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", tp1))
	inHandler := map[string]trace.SpanContext{}
	for _, m := range []string{"/limitd.v1.Limitd/Check", "/limitd.v1.Limitd/PutPolicy"} {
		handler := func(ctx context.Context, _ any) (any, error) {
			inHandler[m] = trace.SpanContextFromContext(ctx)
			return nil, nil
		}
		if _, err := UnaryServerInterceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: m}, handler); err != nil {
			t.Fatal(err)
		}
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (Check's only)", len(spans))
	}
	s := spans[0]
	if s.Name() != "limitd.v1.Limitd/Check" || s.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q kind %v", s.Name(), s.SpanKind())
	}
	if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("parent %v, want the metadata's traceparent", s.Parent())
	}
	if got := inHandler["/limitd.v1.Limitd/Check"]; got.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("Check's handler ran in span %v, not the call's %v", got.SpanID(), s.SpanContext().SpanID())
	}
	if got := inHandler["/limitd.v1.Limitd/PutPolicy"]; got.IsValid() {
		t.Errorf("PutPolicy's handler ran in span %v: admin calls are not traced", got.SpanID())
	}
}
