package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
)

// costCollectors count what the applied log did with costs known later
// (fsm/reserve.go): reservations made, settled, and ended open (settled at
// their estimate, or returned), refunds, overdrafts, and the units given back or charged
// past the limit. Every replica counts the same log; the counters restart
// with the process.
func costCollectors(f *fsm.FSM) []prometheus.Collector {
	counter := func(name, help string, v func(c *fsm.CostCounts) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			c := f.CostCounts()
			return float64(v(&c))
		})
	}
	return []prometheus.Collector{
		counter("limitd_reservations_total", "Reservations made (an allowed check with reserve) by the entries this node applied.",
			func(c *fsm.CostCounts) uint64 { return c.Reserved }),
		counter("limitd_reservations_settled_total", "Reservations settled (POST /v1/settle) by the entries this node applied.",
			func(c *fsm.CostCounts) uint64 { return c.Settled }),
		counter("limitd_reservations_expired_total", "Reservations whose hold ended before a settle: settled at their estimate.",
			func(c *fsm.CostCounts) uint64 { return c.Expired }),
		counter("limitd_reservations_returned_total", "Reservations whose hold ended before a settle under reservation_expiry \"return\": their estimate given back.",
			func(c *fsm.CostCounts) uint64 { return c.Returned }),
		counter("limitd_reservations_returned_units_total", "Units given back by reservations returned at their hold's end (none once their window had rolled).",
			func(c *fsm.CostCounts) uint64 { return c.ReturnedUnits }),
		counter("limitd_refunds_total", "Refunds (POST /v1/refund) applied, including those that found the window rolled.",
			func(c *fsm.CostCounts) uint64 { return c.Refunds }),
		counter("limitd_overdrafts_total", "Overdraft checks charged past their limit.",
			func(c *fsm.CostCounts) uint64 { return c.Overdrafts }),
		counter("limitd_cost_refunded_units_total", "Units given back to keys by settles and refunds.",
			func(c *fsm.CostCounts) uint64 { return c.Refunded }),
		counter("limitd_cost_debited_units_total", "Units charged by overdraft checks that passed their limit (the whole charge, not only the part past the limit) and by settles' extra.",
			func(c *fsm.CostCounts) uint64 { return c.Debited }),
	}
}
