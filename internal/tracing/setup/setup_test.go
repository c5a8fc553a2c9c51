package setup

import (
	"testing"

	"github.com/limitd/limitd/internal/tracing"
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
