package api

import (
	"log"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/limitd/limitd/buildinfo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// endpoint labels the decision latency histogram.
type endpoint int

const (
	endpointCheck endpoint = iota
	endpointCheckAll
	endpointBatch
	endpointAuth
	endpointPeek
	numEndpoints
)

var endpointNames = [numEndpoints]string{"check", "check_all", "check_batch", "auth", "key_peek"}

// Check results, the "result" label of limitd_checks_total.
const (
	resultAllowed       = 0
	resultRefused       = 1
	resultShadowRefused = 2
	resultError         = 3
	numResults          = 4
)

var resultNames = [numResults]string{"allowed", "refused", "shadow_refused", "error"}

// unknownPolicy labels errors for policies this node does not know, so that a
// client sending made-up names cannot create unbounded label values.
const unknownPolicy = "unknown"

// Metrics is the HTTP API's Prometheus metrics, on the registry the process
// builds once and serves on /metrics. It is also the service's Observer
// (limitd_checks_total), so it exists before the service it counts for:
// NewMetrics, then service.New with it, then New. Counters are resolved
// once per policy and cached: WithLabelValues on every check would hash and
// allocate.
type Metrics struct {
	reg      *prometheus.Registry
	logger   *log.Logger
	checks   *prometheus.CounterVec
	duration [numEndpoints]prometheus.Observer
	byPolicy sync.Map // policy label → *[numResults]prometheus.Counter
	replays  prometheus.Counter
	// byReason counts checks answered by a list or a ban, by Decision.Reason.
	byReason  [4]prometheus.Counter
	responses responseCounters
}

// NewMetrics registers the HTTP API's metrics (and the process's: Go
// runtime, process, build info) on reg, which /metrics serves whole:
// register the node's and the other front ends' collectors on it too
// (Register). requestTimeout is the service's (0: its default), the top
// latency bucket; logger (nil: slog.Default()) hears of collectors that
// fail to register.
func NewMetrics(reg *prometheus.Registry, requestTimeout time.Duration, logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.Default()
	}
	return newMetrics(reg, slog.NewLogLogger(logger.Handler(), slog.LevelError), requestTimeout)
}

func newMetrics(reg *prometheus.Registry, logger *log.Logger, deadline time.Duration) *Metrics {
	if deadline <= 0 {
		deadline = service.DefaultRequestTimeout
	}
	m := &Metrics{reg: reg, logger: logger}
	m.replays = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "limitd_request_id_replays_total",
		Help: "Check requests answered from the request_id table (a retry of a decided request: nothing consumed).",
	})
	reasons := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "limitd_checks_by_reason_total",
		Help: "Checks answered other than by their limit, by reason: allowed (an allow list; not counted), denied (a deny list; not counted), banned (the key is banned under its policy's on_exceed).",
	}, []string{"reason"})
	for r := nodeapi.ReasonAllowed; r <= nodeapi.ReasonBanned; r++ {
		m.byReason[r] = reasons.WithLabelValues(r.String())
	}
	m.responses.init()
	m.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "limitd_checks_total",
		Help: "Checks decided, by policy (name, or \"inline\") and result (allowed, refused, shadow_refused, error).",
	}, []string{"policy", "result"})
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "limitd_check_duration_seconds",
		Help: "Time from receiving a check request to having its decision, by endpoint.",
		// A decision is a Raft commit: from sub-millisecond on loopback up
		// to the request deadline, when the request is answered 503.
		Buckets: nodeapi.LatencyBuckets(deadline),
	}, []string{"endpoint"})
	for i := range m.duration {
		m.duration[i] = hist.WithLabelValues(endpointNames[i])
	}
	m.register(
		m.checks,
		hist,
		m.replays,
		reasons,
		m.responses.vec,
		httpStageVec,
		buildInfo(),
		collectors.NewGoCollector(),
		newSchedWaitCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Register adds collectors (the node's, the gRPC server's) to the registry
// /metrics serves; nil ones are skipped, and one that fails to register is
// logged rather than taking the node down.
func (m *Metrics) Register(cs ...prometheus.Collector) { m.register(cs...) }

func (m *Metrics) register(cs ...prometheus.Collector) {
	for _, c := range cs {
		if c == nil {
			continue
		}
		if err := m.reg.Register(c); err != nil {
			m.logger.Printf("api: register metrics collector: %v", err)
		}
	}
}

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observe times a decision that took from start to now: time.Since reads
// only the monotonic clock.
func (m *Metrics) observe(ep endpoint, start time.Time) {
	m.duration[ep].Observe(time.Since(start).Seconds())
}

func (m *Metrics) counters(policy string) *[numResults]prometheus.Counter {
	if c, ok := m.byPolicy.Load(policy); ok {
		return c.(*[numResults]prometheus.Counter)
	}
	var c [numResults]prometheus.Counter
	for i := range c {
		c[i] = m.checks.WithLabelValues(policy, resultNames[i])
	}
	actual, _ := m.byPolicy.LoadOrStore(policy, &c)
	return actual.(*[numResults]prometheus.Counter)
}

// Decided counts a decided check (service.Observer). Its policy exists (the
// state machine decided it), so the names are bounded by the policies ever
// created.
func (m *Metrics) Decided(l service.Limit, d nodeapi.Decision) {
	r := resultRefused
	switch {
	case d.ShadowRefused:
		r = resultShadowRefused
	case d.Allowed:
		r = resultAllowed
	}
	m.counters(l.Name)[r].Inc()
	if d.Reason != nodeapi.ReasonNone && int(d.Reason) < len(m.byReason) {
		m.byReason[d.Reason].Inc()
	}
}

// Failed counts a check that got no decision (service.Observer).
func (m *Metrics) Failed(l service.Limit) {
	name := l.Name
	if !l.Known {
		name = unknownPolicy
	}
	m.counters(name)[resultError].Inc()
}

// replayed counts a check answered from the request_id table.
func (m *Metrics) replayed(r bool) {
	if r {
		m.replays.Inc()
	}
}

// buildInfo is limitd_build_info{version,revision,go} = 1, from the build
// information the Go toolchain embeds (module version, VCS revision).
func buildInfo() prometheus.Collector {
	bi := buildinfo.Current()
	revision := bi.Revision
	switch {
	case revision == "":
		revision = "unknown"
	case bi.Modified:
		revision += "-dirty"
	}
	version := bi.Version
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "limitd_build_info",
		Help:        "Always 1; the labels say which build this node runs: module version, VCS revision (-dirty: uncommitted changes), Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go": runtime.Version()},
	}, func() float64 { return 1 })
}

// Routes, the "endpoint" label of limitd_http_responses_total: a fixed set,
// so that clients' paths (keys, policy names) never become label values.
const (
	routeCheck = iota
	routeCheckAll
	routeCheckBatch
	routeAuth
	routePolicies
	routeKeys
	routeCluster
	routeClusterDigest
	routeClusterSnapshot
	routeClusterJoin
	routeClusterNodes
	routeHealthz
	routeReadyz
	routeMetrics
	routeInternal
	routeRLS
	routeUI
	routeSimulate
	routePlans     // /v1/plans, /v1/prefix-rules (plans.go)
	routePairBatch // /v1/release/batch, /v1/renew/batch, /v1/settle/batch (costbatch.go)
	routeClusterSlots
	routeOther
	numRoutes
)

var routeNames = [numRoutes]string{"check", "check_all", "check_batch", "auth", "policies", "keys",
	"cluster", "cluster_digest", "cluster_snapshot", "cluster_join", "cluster_nodes", "healthz", "readyz", "metrics", "internal", "rls_domains", "ui", "simulate", "plans", "pair_batch", "cluster_slots", "other"}

// routeOf classifies a request path.
func routeOf(path string) int {
	switch {
	case path == "/v1/check":
		return routeCheck
	case path == "/v1/check/all":
		return routeCheckAll
	case path == "/v1/check/batch":
		return routeCheckBatch
	case path == "/v1/auth" || strings.HasPrefix(path, "/v1/auth/"):
		return routeAuth
	case path == "/v1/policies" || strings.HasPrefix(path, "/v1/policies/"):
		return routePolicies
	case path == "/v1/keys" || strings.HasPrefix(path, "/v1/keys/"):
		return routeKeys
	case path == "/v1/cluster":
		return routeCluster
	case path == "/v1/cluster/digest":
		return routeClusterDigest
	case path == "/v1/cluster/slots":
		return routeClusterSlots
	case path == "/v1/cluster/snapshot":
		return routeClusterSnapshot
	case path == "/v1/cluster/join":
		return routeClusterJoin
	case strings.HasPrefix(path, "/v1/cluster/nodes/"):
		return routeClusterNodes
	case path == "/healthz":
		return routeHealthz
	case path == "/readyz":
		return routeReadyz
	case path == "/metrics":
		return routeMetrics
	case strings.HasPrefix(path, "/internal/"):
		return routeInternal
	case path == "/v1/rls/domains" || strings.HasPrefix(path, "/v1/rls/domains/"):
		return routeRLS
	case path == "/ui" || strings.HasPrefix(path, "/ui/"):
		return routeUI
	case path == "/v1/simulate":
		return routeSimulate
	case path == "/v1/plans" || strings.HasPrefix(path, "/v1/plans/") || path == "/v1/prefix-rules" || strings.HasPrefix(path, "/v1/prefix-rules/"):
		return routePlans
	case path == "/v1/release/batch" || path == "/v1/renew/batch" || path == "/v1/settle/batch":
		return routePairBatch
	}
	return routeOther
}

// codeOK labels a response without an error body.
const codeOK = "ok"

// statusCodes names the error code of an error answer written without
// writeError (health and readiness probes), by status.
var statusCodes = map[int]string{
	http.StatusBadRequest: CodeInvalidArgument, http.StatusUnauthorized: CodeUnauthenticated,
	http.StatusNotFound: CodeNotFound, http.StatusMethodNotAllowed: CodeMethodNotAllowed,
	http.StatusConflict: CodeConflict, http.StatusRequestEntityTooLarge: CodePayloadTooLarge,
	http.StatusServiceUnavailable: CodeUnavailable, http.StatusInternalServerError: CodeInternal,
}

// responseCounters is limitd_http_responses_total{endpoint,status,code}.
// The 200 counters are resolved once per route: the hot path does no
// label lookup.
type responseCounters struct {
	vec  *prometheus.CounterVec
	ok   [numRoutes]prometheus.Counter
	mu   sync.Mutex
	rest map[responseKey]prometheus.Counter
}

type responseKey struct {
	route, status int
	code          string
}

func (rc *responseCounters) init() {
	rc.vec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "limitd_http_responses_total",
		Help: "HTTP responses, by endpoint (a fixed set of routes), status and error code (\"ok\" without an error body; a check refused with 200 is \"ok\").",
	}, []string{"endpoint", "status", "code"})
	for r := range rc.ok {
		rc.ok[r] = rc.vec.WithLabelValues(routeNames[r], "200", codeOK)
	}
	rc.rest = map[responseKey]prometheus.Counter{}
}

func (rc *responseCounters) count(route, status int, code string) {
	if status == http.StatusOK && code == "" {
		rc.ok[route].Inc()
		return
	}
	if code == "" {
		code = codeOK
		if status >= 400 {
			if code = statusCodes[status]; code == "" {
				code = "http_" + strconv.Itoa(status)
			}
		}
	}
	k := responseKey{route, status, code}
	rc.mu.Lock()
	c, ok := rc.rest[k]
	if !ok {
		c = rc.vec.WithLabelValues(routeNames[route], strconv.Itoa(status), code)
		rc.rest[k] = c
	}
	rc.mu.Unlock()
	c.Inc()
}

// Instrument counts every response of h by route, status and error code
// in limitd_http_responses_total, as the API's own: for the handlers
// served beside it on the same listener (the cluster's /internal/
// endpoints, route "internal").
func (m *Metrics) Instrument(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := m.record(w)
		h.ServeHTTP(rec, req)
		m.recorded(rec, routeOf(req.URL.Path))
	})
}

// record wraps w for one response; recorded counts it under route and
// releases the wrapper. A handler that panics past them leaves the wrapper
// to the garbage collector and the response uncounted.
func (m *Metrics) record(w http.ResponseWriter) *recorder {
	rec := recorderPool.Get().(*recorder)
	rec.ResponseWriter, rec.status, rec.code = w, 0, ""
	return rec
}

func (m *Metrics) recorded(rec *recorder, route int) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK // nothing written: net/http sends 200
	}
	m.responses.count(route, status, rec.code)
	rec.ResponseWriter = nil
	recorderPool.Put(rec)
}

var recorderPool = sync.Pool{New: func() any { return new(recorder) }}

// recorder notes the status and the error code (errorCode) of a response.
type recorder struct {
	http.ResponseWriter
	status int
	code   string
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (deadlines, flush).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush passes through for handlers that stream.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// errorCode tells the response counter which error code w answers with.
func errorCode(w http.ResponseWriter, code string) {
	if r, ok := w.(*recorder); ok {
		r.code = code
	}
}
