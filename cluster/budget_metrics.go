package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
)

// budgetCollectors count the ops this node's state machine refused for the
// bounds the leader stamped in check entries (fsm.Bounds): the same counts on
// every replica, since they are decided in apply.
func budgetCollectors(f *fsm.FSM) []prometheus.Collector {
	c := func(reason string, pick func(keys, disk, ids uint64) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_key_budget_refusals_total",
			Help:        "Ops refused with key_budget_exhausted, by reason: max_keys (--max-keys), disk (the leader's --min-free-disk-mib guard), max_request_ids (--max-request-ids).",
			ConstLabels: prometheus.Labels{"reason": reason}},
			func() float64 { return float64(pick(f.BudgetRefusals())) })
	}
	return []prometheus.Collector{
		c("max_keys", func(k, _, _ uint64) uint64 { return k }),
		c("disk", func(_, d, _ uint64) uint64 { return d }),
		c("max_request_ids", func(_, _, r uint64) uint64 { return r }),
	}
}
