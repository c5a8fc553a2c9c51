package cluster

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// OwnHashSlots gives a data group its hash slot table (fsm: CmdHashSlotsOwn):
// the slots listed are owned, every other one absent, so a check routed here
// from a stale slot map is refused with wrong_group and counted nowhere.
// Proposed once, by the node that bootstraps the data groups and leads each
// then, before any check can reach the group (package groups), on the leader
// only (raft.ErrNotLeader elsewhere), like the groups record: a client may
// not propose it. A repeat with the same slots is a no-op, a different table
// a conflict.
func (c *Catalog) OwnHashSlots(ctx context.Context, slots []uint16) error {
	_, err := c.leaderApply(ctx, fsm.EncodeHashSlotsOwn(max(c.clock.wallNow(), c.fsm.LastTime()), slots))
	return err
}

// HashSlotOwnership is this replica's hash slot table, by state and in runs.
func (c *Catalog) HashSlotOwnership() nodeapi.HashSlotOwnership { return c.fsm.HashSlotOwnership() }

// hashSlotCollectors count the ops this replica's state machine refused
// because their key's hash slot is not owned here (wrong_group) or is moving
// out (slot_moving): decided in apply, the same on every replica.
func hashSlotCollectors(f *fsm.FSM) []prometheus.Collector {
	c := func(code string, pick func(wrong, moving uint64) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_hashslot_refusals_total",
			Help:        "Ops refused because their key's hash slot is not owned by this Raft group (wrong_group: a stale slot map) or is moving out (slot_moving).",
			ConstLabels: prometheus.Labels{"code": code}},
			func() float64 { return float64(pick(f.HashSlotRefusals())) })
	}
	return []prometheus.Collector{
		c("wrong_group", func(w, _ uint64) uint64 { return w }),
		c("slot_moving", func(_, m uint64) uint64 { return m }),
	}
}
