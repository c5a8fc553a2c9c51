package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/service"
)

// DegradedCollectors are the service's degraded-mode figures on /metrics
// (service/degraded.go): what this node admitted and refused alone, what
// it has charged to the replicated state since, and what is still to be
// charged. The overshoot a window may see is bounded in docs/CLUSTER.md.
func DegradedCollectors(s *service.Service) []prometheus.Collector {
	f := func(get func(service.DegradedStats) int64) func() float64 {
		return func() float64 { return float64(get(s.DegradedStats())) }
	}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_degraded_admitted_units_total",
			Help: "Units this node admitted alone in degraded mode (no quorum within the deadline; the policy's degraded option)."},
			f(func(d service.DegradedStats) int64 { return d.Admitted })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_degraded_refused_total",
			Help: "Checks this node refused alone in degraded mode (its share of the window was spent)."},
			f(func(d service.DegradedStats) int64 { return d.Refused })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_degraded_charged_by_node_units_total",
			Help: "Units this node admitted alone and has since charged to the replicated state."},
			f(func(d service.DegradedStats) int64 { return d.Charged })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitd_degraded_pending_units",
			Help: "Units this node admitted alone not yet charged to the replicated state (the quorum is still away)."},
			f(func(d service.DegradedStats) int64 { return d.Pending })),
	}
}
