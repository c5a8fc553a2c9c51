package api

import (
	"log"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/limitd/limitd/fsm"
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

// metrics is the API's Prometheus registry. Counters are resolved once per
// policy and cached: WithLabelValues on every check would hash and allocate.
type metrics struct {
	reg      *prometheus.Registry
	checks   *prometheus.CounterVec
	duration [numEndpoints]prometheus.Observer
	byPolicy sync.Map // policy label → *[numResults]prometheus.Counter
}

func newMetrics(extra []prometheus.Collector, logger *log.Logger) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "limitd_checks_total",
		Help: "Checks decided, by policy (name, or \"inline\") and result (allowed, refused, shadow_refused, error).",
	}, []string{"policy", "result"})
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "limitd_check_duration_seconds",
		Help: "Time from receiving a check request to having its decision, by endpoint.",
		// 100µs to ~1.6s: a decision is a Raft commit, from sub-millisecond on
		// loopback to the request timeout.
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 15),
	}, []string{"endpoint"})
	for i := range m.duration {
		m.duration[i] = hist.WithLabelValues(endpointNames[i])
	}
	cs := append([]prometheus.Collector{
		m.checks,
		hist,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, extra...)
	for _, c := range cs {
		if c == nil {
			continue
		}
		if err := m.reg.Register(c); err != nil {
			logger.Printf("api: register metrics collector: %v", err)
		}
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) observe(ep endpoint, start time.Time) {
	m.duration[ep].Observe(time.Since(start).Seconds())
}

func (m *metrics) counters(policy string) *[numResults]prometheus.Counter {
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
func (m *metrics) Decided(l service.Limit, d fsm.Decision) {
	r := resultRefused
	switch {
	case d.ShadowRefused:
		r = resultShadowRefused
	case d.Allowed:
		r = resultAllowed
	}
	m.counters(l.Name)[r].Inc()
}

// Failed counts a check that got no decision (service.Observer).
func (m *metrics) Failed(l service.Limit) {
	name := l.Name
	if !l.Known {
		name = unknownPolicy
	}
	m.counters(name)[resultError].Inc()
}
