package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/service"
)

// leaseCollectors are the node's quota-lease counters (service.LeaseStats),
// read when /metrics is scraped.
func leaseCollectors(svc *service.Service) []prometheus.Collector {
	counter := func(name, help string, v func(service.LeaseStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(svc.LeaseStats())) })
	}
	return []prometheus.Collector{
		counter("limitd_leases_taken_total", "Quota leases this node was granted (with units).",
			func(s service.LeaseStats) uint64 { return s.Taken }),
		counter("limitd_leases_returned_total", "Quota leases this node gave back with units unspent.",
			func(s service.LeaseStats) uint64 { return s.Returned }),
		counter("limitd_leases_lost_total", "Quota leases whose unspent units were not given back (a failed grant or return): under-admission until they expire.",
			func(s service.LeaseStats) uint64 { return s.Lost }),
		counter("limitd_leases_revoked_total", "Quota leases dropped because their policy changed.",
			func(s service.LeaseStats) uint64 { return s.Revoked }),
		counter("limitd_leases_recalled_total", "Quota leases this node gave back early because a strict refusal recalled them.",
			func(s service.LeaseStats) uint64 { return s.Recalled }),
		counter("limitd_lease_checks_total", "Checks this node answered from a quota lease, without a Raft round.",
			func(s service.LeaseStats) uint64 { return s.Answered }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitd_leased_keys", Help: "Keys this node holds quota leases for."},
			func() float64 { return float64(svc.LeaseStats().Held) }),
	}
}
