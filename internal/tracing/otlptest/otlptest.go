// Package otlptest is an in-process OTLP/HTTP trace receiver for tests: it
// decodes the protobuf export requests POSTed to /v1/traces with the
// collector's own types and keeps their spans and resource attributes.
package otlptest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is a running receiver; its URL is what OTEL_EXPORTER_OTLP_ENDPOINT
// takes. It is closed when the test ends.
type Receiver struct {
	*httptest.Server
	mu       sync.Mutex
	posts    int
	spans    []*tracepb.Span
	resource map[string]string
}

// New starts a receiver.
func New(t testing.TB) *Receiver {
	r := &Receiver{resource: map[string]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
			http.NotFound(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		var ex coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &ex)
		}
		if err != nil {
			t.Errorf("otlptest: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.posts++
		for _, rs := range ex.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				r.resource[kv.Key] = kv.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// Posts is the number of export requests received.
func (r *Receiver) Posts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// Resource is the string value of a resource attribute of the exports.
func (r *Receiver) Resource(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resource[key]
}

// Spans are every span received.
func (r *Receiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Named are the spans received with that name.
func (r *Receiver) Named(name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Names are the received spans' names, for a failure's message.
func (r *Receiver) Names() []string {
	var out []string
	for _, s := range r.Spans() {
		out = append(out, s.Name)
	}
	return out
}

// ChildOf is the span named name whose parent is parent, or nil.
func (r *Receiver) ChildOf(name string, parent *tracepb.Span) *tracepb.Span {
	for _, s := range r.Named(name) {
		if slices.Equal(s.TraceId, parent.TraceId) && slices.Equal(s.ParentSpanId, parent.SpanId) {
			return s
		}
	}
	return nil
}

// Attr is span s's attribute key, or nil.
func Attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}
