package setup

import (
	"os"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/internal/tracing/otlptest"
)

// The variables that turn tracing on are exactly the documented ones
// (docs/OPERATIONS.md, Tracing): an unrelated OTEL_* variable, such as
// the sampler's, leaves it off.
func TestWanted(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		want    bool
		wantErr bool
	}{
		{env: nil, want: false},
		{env: map[string]string{"OTEL_TRACES_SAMPLER": "always_on", "OTEL_SERVICE_NAME": "x"}, want: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: false},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: true},
	} {
		got, reason, err := Wanted(func(k string) string { return c.env[k] })
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("Wanted(%v) = %v (%s), %v; want %v, error %v", c.env, got, reason, err, c.want, c.wantErr)
		}
	}
}

// Off, Start creates no exporter and records nothing: Enabled stays false
// and the tracer is the no-op one.
func TestStartOffCreatesNothing(t *testing.T) {
	stop, on, _, err := Start(t.Context(), Options{NodeID: "n1", Getenv: func(string) string { return "" }})
	if err != nil || on || tracing.Enabled() {
		t.Fatalf("Start with no OTEL_* = on %v, Enabled %v, err %v", on, tracing.Enabled(), err)
	}
	if err := stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Tracer().Start(t.Context(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("the tracer records spans while tracing is off")
	}
}

func TestStartRefusesGRPCProtocol(t *testing.T) {
	env := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
	if _, on, _, err := Start(t.Context(), Options{Getenv: func(k string) string { return env[k] }}); err == nil || on {
		t.Fatalf("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: on %v, err %v; want an error", on, err)
	}
}

func TestKeyHashHidesTheKey(t *testing.T) {
	h := tracing.KeyHash("sk_live_secret")
	if len(h) != 16 || h == tracing.KeyHash("sk_live_other") || h != tracing.KeyHash("sk_live_secret") {
		t.Fatalf("KeyHash = %q", h)
	}
}

// The traces' own protocol setting wins over the general one; off, no
// protocol is refused (nothing would be exported with it).
func TestValidateProtocol(t *testing.T) {
	for _, c := range []struct {
		env map[string]string
		ok  bool
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true},
	} {
		if err := Validate(func(k string) string { return c.env[k] }); (err == nil) != c.ok {
			t.Errorf("Validate(%v) = %v, want ok %v", c.env, err, c.ok)
		}
	}
}

// The sampler is the environment's (OTEL_TRACES_SAMPLER, _ARG), as the
// docs promise for production (parentbased_traceidratio): a ratio of 0
// records no root span, and the default, parentbased_always_on, records a
// root span and follows a caller's unsampled traceparent. Spans are
// created and judged here; the receiver only gives the exporter somewhere
// to send the sampled ones.
func TestStartTakesTheSamplerFromTheEnvironment(t *testing.T) {
	rcv := otlptest.New(t)
	for _, c := range []struct {
		sampler, arg string
		root         bool // a span without a parent is sampled
	}{
		{"", "", true}, // parentbased_always_on
		{"parentbased_traceidratio", "0", false},
		{"traceidratio", "0", false},
		{"always_off", "", false},
		{"parentbased_traceidratio", "1", true},
	} {
		for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
			"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
			t.Setenv(v, "")
			os.Unsetenv(v) // unset, not empty: the SDK reads an empty sampler as a bad one
		}
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
		if c.sampler != "" {
			t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
		}
		if c.arg != "" {
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
		}
		stop, on, _, err := Start(t.Context(), Options{NodeID: "n1"})
		if err != nil || !on {
			t.Fatalf("%s=%s: on %v, %v", c.sampler, c.arg, on, err)
		}
		_, root := tracing.Tracer().Start(t.Context(), "root")
		sampled := root.SpanContext().IsSampled()
		root.End()
		// A caller's traceparent that did not sample: parent-based
		// samplers follow it.
		parent := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true})
		_, child := tracing.Tracer().Start(trace.ContextWithRemoteSpanContext(t.Context(), parent), "child")
		childSampled := child.SpanContext().IsSampled()
		child.End()
		if err := stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if sampled != c.root {
			t.Errorf("OTEL_TRACES_SAMPLER=%q ARG=%q: a root span sampled %v, want %v", c.sampler, c.arg, sampled, c.root)
		}
		if childSampled && (c.sampler == "" || strings.HasPrefix(c.sampler, "parentbased_")) {
			t.Errorf("OTEL_TRACES_SAMPLER=%q: the child of an unsampled traceparent was sampled", c.sampler)
		}
	}
}
