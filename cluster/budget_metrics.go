package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
)

// budgetCollectors count the ops this node's state machine refused for the
// bounds the leader stamped in check entries (fsm.Bounds): the same counts on
// every replica, since they are decided in apply.
func budgetCollectors(f *fsm.FSM) []prometheus.Collector {
	c := func(reason string, count func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_key_budget_refusals_total",
			Help:        "Ops refused with key_budget_exhausted, by reason: max_keys (--max-keys), disk (the leader's --min-free-disk-mib guard), max_request_ids (--max-request-ids), max_inline_keys (--max-inline-keys-percent).",
			ConstLabels: prometheus.Labels{"reason": reason}},
			func() float64 { return float64(count()) })
	}
	pick := func(i int) func() uint64 {
		return func() uint64 {
			k, d, r := f.BudgetRefusals()
			return [...]uint64{k, d, r}[i]
		}
	}
	return []prometheus.Collector{
		c(fsm.ReasonMaxKeys, pick(0)),
		c(fsm.ReasonDisk, pick(1)),
		c(fsm.ReasonMaxRequestIDs, pick(2)),
		c(fsm.ReasonMaxInlineKeys, f.InlineBudgetRefusals),
	}
}
