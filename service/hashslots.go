package service

import (
	"context"
	"sort"
	"strconv"

	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/nodeapi"
)

// An all-or-nothing request is one op in one log entry, so with data
// groups (a key's hash slot decides its Raft group) its keys must share a
// slot: the group owning the slot decides them together, and no group can
// decide another's keys. Redis Cluster's {tag} rule (package hashslot) lets
// a client put keys that must be counted together in one slot.

// crossSlotAll refuses checks across hash slots when the node routes by
// slot (Config.RefuseCrossSlot), and counts them either way, so that an
// operator can see what a switch to data groups would refuse.
func (s *Service) crossSlotAll(checks []nodeapi.Check) *Error {
	e := CrossSlotError(checks, func(c nodeapi.Check) string { return c.Key })
	if e == nil {
		return nil
	}
	s.crossSlot.Add(1)
	if !s.cfg.RefuseCrossSlot {
		return nil
	}
	return e
}

// CrossSlotChecks counts the check/all requests whose keys spanned several
// hash slots (limitd_cross_slot_checks_total): refused with data groups,
// decided as before without.
func (s *Service) CrossSlotChecks() uint64 { return s.crossSlot.Load() }

// CrossSlotError is the cross_slot refusal of items whose keys (key(item))
// span several hash slots, naming the first item outside the first one's
// slot; nil when they share one.
func CrossSlotError[T any](items []T, key func(T) string) *Error {
	if len(items) < 2 {
		return nil
	}
	k0 := key(items[0])
	s0 := hashslot.Of(k0)
	for i := 1; i < len(items); i++ {
		k := key(items[i])
		if si := hashslot.Of(k); si != s0 {
			return &Error{Code: CodeCrossSlot, Field: EntryField(i) + ".key",
				Message: "the keys of an all-or-nothing request must share a hash slot on a cluster with data groups: " +
					strconv.Quote(k) + " is in slot " + strconv.Itoa(int(si)) + ", checks[0].key " + strconv.Quote(k0) +
					" in slot " + strconv.Itoa(int(s0)) + "; put the part that must be counted together in a {tag} " +
					"(\"{user42}:api\" and \"{user42}:db\" share the slot of \"user42\")"}
		}
	}
	return nil
}

// SlotGroup is one Raft group of GET /v1/cluster/slots: its id, its
// leader's node id ("" when it has none), its replicas' node ids and the
// runs of slots it owns, each [first, last] inclusive.
type SlotGroup struct {
	ID       uint32      `json:"id"`
	Leader   string      `json:"leader"`
	Replicas []string    `json:"replicas"`
	Slots    [][2]uint16 `json:"slots"`
	// Owned is how many hash slots the group's own state owns, as this
	// node's replica reads it (the table that refuses a misrouted check
	// with wrong_group): a data group's equals its slots' count; absent
	// for group 0, which takes no check in a multi-group cluster.
	Owned int `json:"owned,omitempty"`
}

// SlotNode is a node of the slot map: its id and HTTP address, so that a
// client can send each key to its group leader's HTTP port (a group names
// its leader by id).
type SlotNode struct {
	ID   string `json:"id"`
	HTTP string `json:"http"`
}

// Slots is the cluster's slot map with its epoch (a holder of two keeps
// the newer), its groups, in id order, and the nodes they name, by id.
type Slots struct {
	Epoch  uint64      `json:"epoch"`
	Groups []SlotGroup `json:"groups"`
	Nodes  []SlotNode  `json:"nodes"`
}

// SlotNodesOf is the nodes of a membership, sorted by id.
func SlotNodesOf(ms []nodeapi.Member) []SlotNode {
	out := make([]SlotNode, 0, len(ms))
	for _, m := range ms {
		out = append(out, SlotNode{ID: m.ID, HTTP: m.HTTPAddr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SlotsSource is the slot map of a node with data groups (groups.Host).
type SlotsSource interface {
	Slots(ctx context.Context) (Slots, error)
}

// SlotEpochSource is a SlotsSource that reads its map's epoch cheaply
// (once per answer): ok false while it has no map.
type SlotEpochSource interface {
	SlotEpoch() (uint64, bool)
}

type epochHeader struct {
	epoch uint64
	v     []string
}

// SlotEpochHeader is the value of the Limitd-Slot-Epoch answer header: the
// slot map's epoch on a node with data groups, nil without (a one-group
// node's answers stay as they were). A client that sees it routes by the
// map, and asks for the map again when the epoch is newer than its own.
// It allocates only when the epoch changes.
func (s *Service) SlotEpochHeader() []string {
	src, ok := s.cfg.Slots.(SlotEpochSource)
	if !ok {
		return nil
	}
	e, ok := src.SlotEpoch()
	if !ok {
		return nil
	}
	if h := s.slotEpoch.Load(); h != nil && h.epoch == e {
		return h.v
	}
	h := &epochHeader{epoch: e, v: []string{strconv.FormatUint(e, 10)}}
	s.slotEpoch.Store(h)
	return h.v
}

// Slots is the cluster's slot map: Config.Slots's, or for a node of one
// group, group 0 owning every slot, epoch 0 (no map was ever stored).
func (s *Service) Slots(ctx context.Context) (Slots, *Error) {
	ctx, cancel := s.context(ctx)
	defer cancel()
	if s.cfg.Slots != nil {
		v, err := s.cfg.Slots.Slots(ctx)
		if err != nil {
			return Slots{}, s.nodeError(err)
		}
		return v, nil
	}
	st, err := s.node.Status(ctx)
	if err != nil {
		return Slots{}, s.nodeError(err)
	}
	g := SlotGroup{ID: 0, Leader: st.LeaderID, Replicas: []string{}, Slots: [][2]uint16{{0, hashslot.Count - 1}}}
	for _, m := range st.Members {
		g.Replicas = append(g.Replicas, m.ID)
	}
	return Slots{Epoch: 0, Groups: []SlotGroup{g}, Nodes: SlotNodesOf(st.Members)}, nil
}
