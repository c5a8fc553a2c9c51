// Package setup turns limitd's tracing on from the standard OTEL_*
// environment: the OpenTelemetry SDK and its OTLP/HTTP exporter. Apart from
// package tracing so that the packages with hook sites (service, cluster)
// build only the OpenTelemetry API, not the SDK; only serve imports this.
package setup

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/limitd/limitd/internal/tracing"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME (or
// service.name in OTEL_RESOURCE_ATTRIBUTES) does not say otherwise.
const DefaultServiceName = "limitd"

// Wanted reports whether the environment asks for traces, and why: tracing
// is on when OTEL_TRACES_EXPORTER is "otlp", or, with OTEL_TRACES_EXPORTER
// unset, when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set. OTEL_TRACES_EXPORTER=none, and OTEL_SDK_DISABLED=true, keep it off
// whatever else is set; any other exporter name is an error (limitd ships
// only the OTLP one).
func Wanted(getenv func(string) string) (bool, string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, "OTEL_SDK_DISABLED=true", nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "otlp":
		return true, "OTEL_TRACES_EXPORTER=otlp", nil
	case "none":
		return false, "OTEL_TRACES_EXPORTER=none", nil
	case "":
	default:
		return false, "", fmt.Errorf("OTEL_TRACES_EXPORTER=%q: limitd exports traces only as \"otlp\" (or \"none\")", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if getenv(v) != "" {
			return true, v + " is set", nil
		}
	}
	return false, "no OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_*ENDPOINT set", nil
}

// Validate reports an OTEL_* setting limitd cannot honour: an exporter
// other than otlp, or, with tracing wanted, an OTLP protocol other than
// http/protobuf. Serve calls it before it writes anything, so that a
// refused start leaves the data directory as it was.
func Validate(getenv func(string) string) error {
	want, _, err := Wanted(getenv)
	if err != nil || !want {
		return err
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" {
			if p != "http/protobuf" {
				return fmt.Errorf("%s=%q: limitd exports OTLP over HTTP only (http/protobuf)", v, p)
			}
			return nil // the traces' own setting wins over the general one
		}
	}
	return nil
}

// Options are what Start adds to the environment's settings.
type Options struct {
	NodeID  string // the resource's limitd.node.id and service.instance.id
	Version string // service.version
	// Getenv reads the environment (os.Getenv when nil) for Wanted; the
	// SDK and the exporter read the process environment themselves.
	Getenv func(string) string
}

// Start turns tracing on when the environment asks for it (Wanted): an OTLP
// over HTTP (protobuf) exporter configured by OTEL_EXPORTER_OTLP_* , a batch
// span processor (OTEL_BSP_*), the sampler of OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on), and the W3C
// trace-context propagator. When it is not asked for, Start creates no
// exporter and tracing stays off. The returned stop flushes the spans still
// buffered and turns tracing off; it is never nil. Call Start before serving:
// the hook sites read Enabled on every check.
func Start(ctx context.Context, o Options) (stop func(context.Context) error, enabled bool, reason string, err error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = osGetenv
	}
	nothing := func(context.Context) error { return nil }
	if err := Validate(getenv); err != nil {
		return nothing, false, "", err
	}
	want, reason, _ := Wanted(getenv)
	if !want {
		return nothing, false, reason, nil
	}
	exp, err := otlptracehttp.New(ctx) // endpoint, headers, TLS, timeout: OTEL_EXPORTER_OTLP_*
	if err != nil {
		return nothing, false, reason, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", DefaultServiceName)}
	if o.NodeID != "" {
		attrs = append(attrs, tracing.AttrNodeID.String(o.NodeID), attribute.String("service.instance.id", o.NodeID))
	}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the defaults above.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && res == nil {
		return nothing, false, reason, errors.Join(fmt.Errorf("tracing: resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)) // the sampler: OTEL_TRACES_SAMPLER*
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(tracing.Propagator())
	off := tracing.Activate(tp.Tracer(tracing.ScopeName))
	return func(ctx context.Context) error {
		off()
		return tp.Shutdown(ctx)
	}, true, reason, nil
}
