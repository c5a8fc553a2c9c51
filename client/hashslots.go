package client

import (
	"context"
	"net/http"
)

// ClusterSlots is the cluster's hash-slot map (GET /v1/cluster/slots):
// which Raft group decides each key, each group's leader and replicas (node
// ids), and the nodes' HTTP addresses. A key's slot is hashslot.Of(key)
// (the Redis {tag} rule); a node without data groups is one group 0 owning
// every slot, epoch 0.
type ClusterSlots struct {
	// Epoch grows with every change of the map: of two, the newer is right.
	Epoch  uint64      `json:"epoch"`
	Groups []SlotGroup `json:"groups"`
	Nodes  []SlotNode  `json:"nodes"`
}

// SlotGroup is one Raft group of the map: its leader's node id ("" while
// it has none), its replicas' ids and the runs of slots it owns, each
// [first, last] inclusive.
type SlotGroup struct {
	ID       uint32      `json:"id"`
	Leader   string      `json:"leader"`
	Replicas []string    `json:"replicas"`
	Slots    [][2]uint16 `json:"slots"`
}

// SlotNode is a node of the map and its HTTP address (host:port).
type SlotNode struct {
	ID   string `json:"id"`
	HTTP string `json:"http"`
}

// SlotCount is the number of slots a group owns.
func (g SlotGroup) SlotCount() int {
	n := 0
	for _, r := range g.Slots {
		n += int(r[1]) - int(r[0]) + 1
	}
	return n
}

// Slots returns the cluster's hash-slot map, as the node the client sends
// to sees it (retried like every read).
func (c *Client) Slots(ctx context.Context) (ClusterSlots, error) {
	var v ClusterSlots
	err := c.call(ctx, http.MethodGet, "/v1/cluster/slots", nil, false, true, &v)
	return v, err
}
