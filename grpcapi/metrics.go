package grpcapi

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/rls"
)

// Envoy RLS metrics, per domain and rule: envoy ratelimit's statistics
// (total_hits, over_limit, near_limit, within_limit, shadow_mode) as
// Prometheus counters, whose names end in _total.
const (
	// NearLimitRatio is the share of a limit above which allowed hits count
	// as near_limit (envoy ratelimit's NEAR_LIMIT_RATIO default).
	NearLimitRatio = 0.8
	// MaxMetricKeys bounds the (domain, key) label pairs: detailed_metric,
	// value_to_metric and limit overrides put request values into keys.
	// Past the bound, new pairs are counted under key OverflowKey.
	MaxMetricKeys = 10000
	// OverflowKey is the key label of hits past MaxMetricKeys.
	OverflowKey = "_overflow"
)

// rlsMetrics counts RLS hits per domain and rule key.
type rlsMetrics struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec

	mu      sync.Mutex
	seen    map[[2]string]bool
	maxKeys int // MaxMetricKeys
}

func newRLSMetrics() *rlsMetrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "limitd", Subsystem: "rls", Name: name, Help: help},
			[]string{"domain", "key"})
	}
	return &rlsMetrics{
		totalHits:   vec("hits_total", "Hits (hits_addend) on descriptors that matched a rule (envoy ratelimit's total_hits)."),
		overLimit:   vec("over_limit_total", "Hits refused by a rule, shadow rules included (envoy ratelimit's over_limit)."),
		nearLimit:   vec("near_limit_total", "Allowed hits above NearLimitRatio of the limit (envoy ratelimit's near_limit)."),
		withinLimit: vec("within_limit_total", "Hits allowed and counted (envoy ratelimit's within_limit)."),
		shadowMode:  vec("shadow_mode_total", "Hits a shadow_mode rule would have refused (envoy ratelimit's shadow_mode)."),
		seen:        map[[2]string]bool{},
		maxKeys:     MaxMetricKeys,
	}
}

func (m *rlsMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode}
}

// label bounds the label pairs.
func (m *rlsMetrics) label(domain, key string) (string, string) {
	k := [2]string{domain, key}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[k] {
		return domain, key
	}
	if len(m.seen) >= m.maxKeys {
		return domain, OverflowKey
	}
	m.seen[k] = true
	return domain, key
}

// observe counts one answered request.
func (m *rlsMetrics) observe(d *rls.Domain, req *rls.Request, plan *rls.Plan, results []rls.Result, resp *rls.Response) {
	if d == nil {
		return
	}
	for i := range plan.Items {
		it, st := &plan.Items[i], &resp.Statuses[i]
		if it.Kind != rls.Checked && it.Kind != rls.Blocked {
			continue
		}
		key := it.Rule.FullKey
		if req.Descriptors[i].Limit == nil {
			key = d.MetricKey(req.Descriptors[i].Entries, it.Rule)
		}
		dl, kl := m.label(d.Name(), key)
		hits := float64(it.Cost)
		m.totalHits.WithLabelValues(dl, kl).Add(hits)
		switch {
		case st.ShadowOverLimit:
			m.overLimit.WithLabelValues(dl, kl).Add(hits)
			m.shadowMode.WithLabelValues(dl, kl).Add(hits)
		case st.OverLimit:
			m.overLimit.WithLabelValues(dl, kl).Add(hits)
		case it.Kind == rls.Checked && results[i].Consumed:
			m.withinLimit.WithLabelValues(dl, kl).Add(hits)
			limit := int64(it.Rule.RequestsPerUnit)
			after := limit - int64(st.Remaining)
			before := after - it.Cost
			near := int64(math.Floor(float64(limit) * NearLimitRatio))
			if after > near {
				m.nearLimit.WithLabelValues(dl, kl).Add(float64(after - max(near, before)))
			}
		}
	}
}

// Collectors returns the RLS metrics (limitd_rls_hits_total,
// _over_limit_total, _near_limit_total, _within_limit_total,
// _shadow_mode_total, labelled domain and key) to
// register where /metrics is served.
func (s *Server) Collectors() []prometheus.Collector { return s.metrics.collectors() }
