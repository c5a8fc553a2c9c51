package cluster

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// Degraded mode (service/degraded.go decides alone; fsm/degraded.go
// charges): the node's part is proposing a charge through the leader, and
// telling the service how many voters share a limit.

// A charge travels in one admin command: this fails to compile if the
// charges' bound outgrows the command bound.
var _ [MaxCommandBytes - (nodeapi.MaxDegradedChargeBytes + nodeapi.MaxDegradedChargeID + 32)]struct{}

// ChargeDegraded proposes what this node admitted alone, under a stable id
// (a retry with the same id charges nothing twice). The entry carries no
// time of its own: apply charges at the last applied leader time (clamp),
// which every replica agrees on.
func (n *Node) ChargeDegraded(ctx context.Context, id string, charges []nodeapi.DegradedCharge) error {
	return applyAdmin(ctx, n.Apply, fsm.EncodeChargeDegraded(0, id, charges))
}

// Voters is the number of voters in this node's latest configuration (0
// when it cannot tell): a degraded node's share is the limit divided by it.
func (n *Node) Voters() int { return countVoters(n.raft) }

func degradedCollectors(f *fsm.FSM) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_degraded_charged_units_total",
			Help: "Units nodes admitted in degraded mode that this replica's applies charged to the replicated state."},
			func() float64 { c, _, _ := f.DegradedCharges(); return float64(c) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_degraded_skipped_units_total",
			Help: "Units admitted in degraded mode that could not be charged (the policy was deleted or no longer has a count to overdraw)."},
			func() float64 { _, s, _ := f.DegradedCharges(); return float64(s) }),
	}
}
