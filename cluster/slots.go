package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
)

// slotCollectors counts the concurrency slots the applied log acquired and
// released (fsm/slots.go). A gauge of the slots held cluster-wide would
// need every key's state; acquired − released − held is what ended with its
// hold (a holder that never released).
func slotCollectors(f *fsm.FSM) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_slots_acquired_total",
			Help: "Concurrency slots acquired by the entries this node applied (every replica counts the same log)."},
			func() float64 { a, _ := f.SlotCounts(); return float64(a) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_slots_released_total",
			Help: "Concurrency slots released (POST /v1/release of a held slot) by the entries this node applied."},
			func() float64 { _, r := f.SlotCounts(); return float64(r) }),
	}
}
