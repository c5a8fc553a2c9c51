// Package tracegrpc is the gRPC side of package tracing: a server
// interceptor for the check calls. Apart, so that the cluster, which
// imports tracing, does not build gRPC.
package tracegrpc

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/internal/tracing"
)

// checkMethods are the calls a span is started for: limitd.v1's checks and
// Envoy RLS's ShouldRateLimit (the method names are unique across the
// services served).
var checkMethods = map[string]bool{"Check": true, "CheckAll": true, "Batch": true, "ShouldRateLimit": true}

// UnaryServerInterceptor starts a server span for each check call —
// checkMethods — under the
// traceparent in the call's metadata, if any. Hand-written rather than
// otelgrpc: it is twenty lines, and otelgrpc would bring its metrics too.
// Install it only when Enabled.
func UnaryServerInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	if !tracing.Enabled() || !checkMethods[method] {
		return handler(ctx, req)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = tracing.ExtractFrom(ctx, mdCarrier(md))
	}
	name := strings.TrimPrefix(info.FullMethod, "/")
	ctx, span := tracing.StartSpan(ctx, name, trace.SpanKindServer,
		attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", method),
		attribute.String("rpc.service", name[:max(0, strings.LastIndexByte(name, '/'))]))
	resp, err := handler(ctx, req)
	st, _ := status.FromError(err)
	span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
	if err != nil {
		span.SetStatus(codes.Error, st.Message())
	}
	span.End()
	return resp, err
}

// mdCarrier reads gRPC metadata as a propagation.TextMapCarrier (its keys
// are lower case, as W3C's traceparent is).
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
