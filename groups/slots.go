package groups

import (
	"context"
	"sort"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// Slots is the slot map with every group's leader and replicas as this
// node sees them (GET /v1/cluster/slots): group 0 owns no slot of its own.
// Its nodes are group 0's members, which every data group's replicas
// follow (balance.go), with their HTTP addresses.
func (h *Host) Slots(ctx context.Context) (service.Slots, error) {
	d := h.data.Load()
	if d == nil {
		return service.Slots{}, errNotOpen
	}
	out := service.Slots{Epoch: d.rec.slots.Epoch}
	st0, err := h.zero.Status(ctx)
	if err != nil {
		return service.Slots{}, err
	}
	g0 := groupView(0, st0)
	g0.Slots = [][2]uint16{}
	out.Groups = append(out.Groups, g0)
	out.Nodes = service.SlotNodesOf(st0.Members)
	runs := d.rec.slots.Runs()
	for i, n := range d.nodes {
		g := uint32(i + 1)
		var v service.SlotGroup
		if gs, ok := h.groupState(g); ok && !h.holds(g) {
			// Not a replica here: this node's copy of g is not kept up to
			// date, so the group is as its leader last recorded it in
			// group 0 (and its own table is not read).
			v = service.SlotGroup{ID: g, Leader: gs.Leader, Replicas: append([]string{}, gs.Replicas...)}
			sort.Strings(v.Replicas)
		} else {
			st, err := n.Status(ctx)
			if err != nil {
				return service.Slots{}, err
			}
			v = groupView(g, st)
			v.Owned = n.Catalog().HashSlotOwnership().Owned
		}
		v.Slots = [][2]uint16{}
		for _, r := range runs {
			if r.Group == g {
				v.Slots = append(v.Slots, [2]uint16{uint16(r.First), uint16(r.Last)})
			}
		}
		out.Groups = append(out.Groups, v)
	}
	return out, nil
}

// SlotEpoch is the slot map's epoch (service.SlotEpochSource: the
// Limitd-Slot-Epoch header), ok false before the data groups are open.
func (h *Host) SlotEpoch() (uint64, bool) {
	if d := h.data.Load(); d != nil {
		return d.rec.slots.Epoch, true
	}
	return 0, false
}

func groupView(g uint32, st nodeapi.Status) service.SlotGroup {
	v := service.SlotGroup{ID: g, Leader: st.LeaderID, Replicas: []string{}}
	for _, m := range st.Members {
		v.Replicas = append(v.Replicas, m.ID)
	}
	sort.Strings(v.Replicas)
	return v
}
