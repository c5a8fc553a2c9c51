package e2e

import (
	"context"
	"encoding/hex"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/internal/tracing/otlptest"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// A limitd process started with OTEL_EXPORTER_OTLP_ENDPOINT (and nothing
// else of tracing's) exports its checks' spans to that collector: the HTTP
// and the gRPC check under their callers' traceparent, the node's
// limitd.check under each, with the resource naming the service and the
// node; a clean stop flushes them.
func TestProcessExportsCheckTraces(t *testing.T) {
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(v, "") // restored at the end
		os.Unsetenv(v)  // and unset for the child: the SDK reads an empty sampler as a bad one
	}
	rcv := otlptest.New(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	grpcAddr := freePort(t)
	t.Setenv("LIMITD_GRPC_ADDR", grpcAddr)
	p := newProc(t, "traced", "")
	p.start()
	p.waitReady()

	const httpTrace, grpcTrace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "5bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, p.URL("/v1/check"),
		strings.NewReader(`{"key":"sk_live_http","limit":{"algorithm":"fixed_window","limit":10,"window":"1m"},"cost":1}`))
	req.Header.Set("traceparent", "00-"+httpTrace+"-"+parent+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %d", resp.StatusCode)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+grpcTrace+"-"+parent+"-01")
	if _, err := limitdv1.NewLimitdClient(conn).Check(ctx, &limitdv1.CheckRequest{Key: "sk_live_grpc",
		Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 10, Window: "1m"}}); err != nil {
		t.Fatalf("gRPC Check: %v", err)
	}

	if err := p.term(); err != nil { // a clean stop flushes the spans
		t.Fatal(err)
	}
	if !strings.Contains(p.Logs(), "tracing on") {
		t.Errorf("no 'tracing on' line in the log:\n%s", p.Logs())
	}
	if got := rcv.Resource("service.name"); got != "limitd" {
		t.Errorf("service.name = %q", got)
	}
	if got := rcv.Resource("limitd.node.id"); got != "traced" {
		t.Errorf("limitd.node.id = %q", got)
	}
	for _, c := range []struct{ name, trace string }{{"POST /v1/check", httpTrace}, {"limitd.v1.Limitd/Check", grpcTrace}} {
		var front *tracepb.Span
		for _, s := range rcv.Named(c.name) {
			if hex.EncodeToString(s.TraceId) == c.trace && hex.EncodeToString(s.ParentSpanId) == parent {
				front = s
			}
		}
		if front == nil {
			t.Errorf("no %s span under the caller's traceparent; spans: %v", c.name, rcv.Names())
			continue
		}
		chk := rcv.ChildOf(tracing.SpanCheck, front)
		if chk == nil {
			t.Errorf("no %s under %s; spans: %v", tracing.SpanCheck, c.name, rcv.Names())
			continue
		}
		if rcv.ChildOf(tracing.SpanCommit, chk) == nil {
			t.Errorf("no %s under %s's %s", tracing.SpanCommit, c.name, tracing.SpanCheck)
		}
	}
}
