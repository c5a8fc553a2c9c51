package tracing_test

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/internal/tracing/otlptest"
	"github.com/limitd/limitd/internal/tracing/setup"
	"github.com/limitd/limitd/service"
)

// apiCluster starts an n-node in-process cluster whose nodes serve the
// HTTP API and the internal endpoints behind tracing.HTTP, as serve does
// when tracing is on.
func apiCluster(t *testing.T, n int) *clustertest.Cluster { return apiClusterStream(t, n, true) }

// apiClusterStream is apiCluster whose leaders refuse the check stream
// unless stream, as a leader without it does (404): followers forward on
// the overflow path, one POST per batch.
func apiClusterStream(t *testing.T, n int, stream bool) *clustertest.Cluster {
	return clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: n, SkipShort: true, Config: clustertest.SteadyTimers,
		Handler: func(_ int, node *cluster.Node) http.Handler {
			logger := slog.New(slog.DiscardHandler)
			metrics := api.NewMetrics(prometheus.NewRegistry(), 5*time.Second, logger)
			svc := service.New(clustertest.ServiceDeps(node), service.Config{Observer: metrics})
			pub := api.New(svc, node, metrics, api.Config{Logger: logger}).Handler()
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !stream && r.URL.Path == forward.PathCheckStream {
					http.NotFound(w, r)
					return
				}
				if strings.HasPrefix(r.URL.Path, "/internal/") {
					node.Internal().ServeHTTP(w, r)
					return
				}
				pub.ServeHTTP(w, r)
			})
			return tracing.HTTP(h) // a pass-through while tracing is off
		}})
}

func check(t *testing.T, url, key, traceparent string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/check",
		strings.NewReader(`{"key":"`+key+`","limit":{"algorithm":"fixed_window","limit":100,"window":"1m"},"cost":1}`))
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check on %s: %d %s", url, resp.StatusCode, b)
	}
}

// clearOTEL empties every variable that could turn tracing on, so the
// test's environment decides.
func clearOTEL(t *testing.T) {
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(v, "") // restored at the end
		os.Unsetenv(v)  // unset, not empty: the SDK reads an empty sampler as a bad one
	}
}

// A check on a 3-node cluster, traced: on the leader, the HTTP span under
// the caller's traceparent, the node's limitd.check under it and the
// group-commit span under that, with the batch size, the Raft index and the
// apply event; on a follower, limitd.forward naming the unit that the
// leader's commit span names too. No span carries the key. Off (no OTEL_*
// variable), no exporter is created and nothing reaches the receiver.
func TestCheckSpansAcrossTheCluster(t *testing.T) {
	clearOTEL(t)
	rcv := otlptest.New(t)
	c := apiCluster(t, 3)
	leader := c.Leader()
	follower := (leader + 1) % 3

	// Off: no exporter, no span.
	stop, on, _, err := setup.Start(context.Background(), setup.Options{NodeID: "n-test"})
	if err != nil || on || tracing.Enabled() {
		t.Fatalf("tracing on without OTEL_*: on %v, err %v", on, err)
	}
	check(t, c.URL(leader), "sk_live_off", "")
	check(t, c.URL(follower), "sk_live_off", "")
	stop(context.Background())
	time.Sleep(100 * time.Millisecond)
	if n := rcv.Posts(); n != 0 {
		t.Fatalf("tracing off: the receiver got %d exports", n)
	}

	// On.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	stop, on, _, err = setup.Start(context.Background(), setup.Options{NodeID: "n-test", Version: "v-test"})
	if err != nil || !on || !tracing.Enabled() {
		t.Fatalf("tracing off with OTEL_EXPORTER_OTLP_ENDPOINT: on %v, err %v", on, err)
	}
	t.Cleanup(func() { stop(context.Background()) })
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	check(t, c.URL(leader), "sk_live_secret_1", "00-"+traceID+"-"+parentID+"-01")
	check(t, c.URL(follower), "sk_live_secret_2", "")
	if err := stop(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	if tracing.Enabled() {
		t.Fatal("Enabled after stop")
	}

	if got := rcv.Resource("service.name"); got != "limitd" {
		t.Errorf("service.name = %q, want limitd", got)
	}
	if got := rcv.Resource("limitd.node.id"); got != "n-test" {
		t.Errorf("limitd.node.id = %q", got)
	}

	// The leader's check: one trace, the caller's.
	var httpSpan *tracepb.Span
	for _, s := range rcv.Named("POST /v1/check") {
		if hex.EncodeToString(s.TraceId) == traceID {
			httpSpan = s
		}
	}
	if httpSpan == nil {
		t.Fatalf("no POST /v1/check span in the caller's trace; spans: %v", rcv.Names())
	}
	if hex.EncodeToString(httpSpan.ParentSpanId) != parentID || httpSpan.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("POST /v1/check: parent %x kind %v; want the traceparent's %s, server", httpSpan.ParentSpanId, httpSpan.Kind, parentID)
	}
	chk := childOf(t, rcv, tracing.SpanCheck, httpSpan)
	if v := otlptest.Attr(chk, "limitd.role"); v.GetStringValue() != "leader" {
		t.Errorf("limitd.check on the leader: limitd.role %v", v)
	}
	if v := otlptest.Attr(chk, "limitd.key.hash"); v.GetStringValue() != tracing.KeyHash("sk_live_secret_1") {
		t.Errorf("limitd.key.hash = %v", v)
	}
	commit := childOf(t, rcv, tracing.SpanCommit, chk)
	if v := otlptest.Attr(commit, "limitd.batch.size"); v.GetIntValue() < 1 {
		t.Errorf("limitd.raft.commit: limitd.batch.size %v", v)
	}
	if v := otlptest.Attr(commit, "limitd.raft.index"); v.GetIntValue() < 1 {
		t.Errorf("limitd.raft.commit: limitd.raft.index %v", v)
	}
	if len(commit.Events) != 1 || commit.Events[0].Name != tracing.EventApplied {
		t.Errorf("limitd.raft.commit events %v, want %s", commit.Events, tracing.EventApplied)
	}

	// The follower's check: forwarded on the check stream, whose frames
	// carry no trace context: the unit's name joins the two sides.
	var fwd *tracepb.Span
	for _, s := range rcv.Named(tracing.SpanForward) {
		fwd = s
	}
	if fwd == nil {
		t.Fatalf("no %s span; spans: %v", tracing.SpanForward, rcv.Names())
	}
	unit := otlptest.Attr(fwd, "limitd.forward.unit").GetStringValue()
	if unit == "" {
		t.Fatalf("%s has no limitd.forward.unit: %v", tracing.SpanForward, fwd.Attributes)
	}
	found := false
	for _, s := range rcv.Named(tracing.SpanCommit) {
		for _, v := range otlptest.Attr(s, "limitd.forward.units").GetArrayValue().GetValues() {
			found = found || v.GetStringValue() == unit
		}
	}
	if !found {
		t.Errorf("no limitd.raft.commit names the forwarded unit %s", unit)
	}

	// No span carries a key.
	for _, s := range rcv.Spans() {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "sk_live") {
				t.Errorf("span %s attribute %s carries the key: %v", s.Name, kv.Key, kv.Value)
			}
		}
	}
}

// On the overflow path a follower's forwarded check stays in its caller's
// trace across the nodes: the batch's POST carries traceparent, so the
// leader's request span and its commit are under the follower's
// limitd.forward.batch.
func TestOverflowForwardKeepsTheTrace(t *testing.T) {
	clearOTEL(t)
	rcv := otlptest.New(t)
	c := apiClusterStream(t, 2, false)
	follower := (c.Leader() + 1) % 2
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	stop, on, _, err := setup.Start(context.Background(), setup.Options{NodeID: "n-test"})
	if err != nil || !on {
		t.Fatalf("setup.Start: on %v, err %v", on, err)
	}
	t.Cleanup(func() { stop(context.Background()) })
	const traceID, parentID = "6bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	check(t, c.URL(follower), "sk_live_overflow", "00-"+traceID+"-"+parentID+"-01")
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	var front *tracepb.Span
	for _, s := range rcv.Named("POST /v1/check") {
		if hex.EncodeToString(s.TraceId) == traceID {
			front = s
		}
	}
	if front == nil {
		t.Fatalf("no POST /v1/check in the caller's trace; spans: %v", rcv.Names())
	}
	chk := childOf(t, rcv, tracing.SpanCheck, front)
	if v := otlptest.Attr(chk, "limitd.role"); v.GetStringValue() != "follower" {
		t.Errorf("limitd.role %v on the follower", v)
	}
	fwd := childOf(t, rcv, tracing.SpanForward, chk)
	batch := childOf(t, rcv, tracing.SpanForwardBatch, fwd)
	if v := otlptest.Attr(batch, "limitd.batch.size"); v.GetIntValue() < 1 {
		t.Errorf("limitd.forward.batch: limitd.batch.size %v", v)
	}
	internal := childOf(t, rcv, "POST /internal/v1/check", batch)
	childOf(t, rcv, tracing.SpanCommit, internal)
}

func childOf(t *testing.T, r *otlptest.Receiver, name string, parent *tracepb.Span) *tracepb.Span {
	t.Helper()
	s := r.ChildOf(name, parent)
	if s == nil {
		t.Fatalf("no %s span under %s; spans: %v", name, parent.Name, r.Names())
	}
	return s
}
