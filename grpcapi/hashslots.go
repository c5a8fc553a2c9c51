package grpcapi

import (
	"context"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// GetClusterSlots is GET /v1/cluster/slots (api/hashslots.go): translation
// only, the map from service.Slots.
func (l *limitdServer) GetClusterSlots(ctx context.Context, _ *limitdv1.GetClusterSlotsRequest) (*limitdv1.ClusterSlots, error) {
	v, e := l.svc().Slots(ctx)
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.ClusterSlots{Epoch: v.Epoch, Groups: make([]*limitdv1.ClusterSlotGroup, len(v.Groups)),
		Nodes: make([]*limitdv1.ClusterSlotNode, len(v.Nodes))}
	for i, g := range v.Groups {
		pg := &limitdv1.ClusterSlotGroup{Id: g.ID, Leader: g.Leader, Replicas: g.Replicas, Slots: make([]*limitdv1.SlotRange, len(g.Slots))}
		for j, r := range g.Slots {
			pg.Slots[j] = &limitdv1.SlotRange{First: uint32(r[0]), Last: uint32(r[1])}
		}
		out.Groups[i] = pg
	}
	for i, n := range v.Nodes {
		out.Nodes[i] = &limitdv1.ClusterSlotNode{Id: n.ID, Http: n.HTTP}
	}
	return out, nil
}
