package tracing

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// checkRoutes are the HTTP routes a span is started for: the checks, the
// path whose latency a trace explains. Other routes (admin, metrics,
// health) are not traced. The route, not the URL, names the span: no key
// travels in these paths, but a span name must stay low-cardinality anyway.
var checkRoutes = map[string]string{
	"/v1/check":       "POST /v1/check",
	"/v1/check/all":   "POST /v1/check/all",
	"/v1/check/batch": "POST /v1/check/batch",
	"/json":           "POST /json", // envoy ratelimit's HTTP JSON
	// A follower's overflow batch (cluster/forward): its traceparent is
	// the follower's batch span's.
	"/internal/v1/check": "POST /internal/v1/check",
}

// HTTP wraps the listener's handler: a server span for each POST to a
// check route, under the caller's traceparent when the request has one.
// Install it only when Enabled: off, the handler is not wrapped at all.
func HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := checkRoutes[r.URL.Path]
		if !ok || r.Method != http.MethodPost || !Enabled() {
			next.ServeHTTP(w, r)
			return
		}
		ctx := Extract(r.Context(), r.Header)
		ctx, span := StartSpan(ctx, name, trace.SpanKindServer,
			attribute.String("http.request.method", r.Method),
			attribute.String("http.route", r.URL.Path))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
		span.End()
	})
}

// statusWriter records the status code. It keeps http.Flusher (the check
// routes answer in one write; Unwrap gives ResponseController the rest).
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
