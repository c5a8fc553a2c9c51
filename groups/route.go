package groups

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/service"
)

// errNotOpen: the data groups are not open yet (the groups record is not
// known here yet); nothing was proposed.
var errNotOpen = fmt.Errorf("%w: this node's data groups are not open yet", nodeapi.ErrUnavailable)

// groupOfOp is the data group every check of op lives in, or ok false when
// its keys span several groups (cross_slot for an atomic op: one group's
// log cannot decide another's keys).
func groupOfOp(m *hashslot.Map, op *nodeapi.Op) (uint32, bool) {
	if len(op.Checks) == 0 {
		return m.Owners[0], true
	}
	g := m.GroupOf(op.Checks[0].Key)
	for i := 1; i < len(op.Checks); i++ {
		if m.GroupOf(op.Checks[i].Key) != g {
			return 0, false
		}
	}
	return g, true
}

// crossSlot is the refusal of an op whose keys live in several groups.
func crossSlot(op *nodeapi.Op) *nodeapi.Error {
	return service.CrossSlotError(op.Checks, func(c nodeapi.Check) string { return c.Key })
}

// Check decides ops in the groups owning their keys' slots: one call per
// group (concurrently), results merged in the ops' order. When every op is
// one group's (the common case) it is that group's call, errors and all;
// when several groups answer, a group's failure becomes its ops' Err so
// that the other groups' decisions are not lost.
func (h *Host) Check(ctx context.Context, ops []nodeapi.Op) ([]nodeapi.Result, error) {
	d := h.data.Load()
	if d == nil {
		return nil, errNotOpen
	}
	m := d.rec.slots
	first, single := uint32(0), true
	var groups []uint32 // per op, allocated only when the ops span groups
	for i := range ops {
		g, ok := groupOfOp(m, &ops[i])
		if !ok {
			g = 0 // refused below
		}
		if i == 0 {
			first = g
		}
		if g != first || g == 0 {
			if groups == nil {
				groups = make([]uint32, len(ops))
				for j := 0; j < i; j++ {
					groups[j] = first
				}
			}
			single = false
		}
		if groups != nil {
			groups[i] = g
		}
	}
	if single {
		return d.nodes[first-1].Check(ctx, ops)
	}
	out := make([]nodeapi.Result, len(ops))
	byGroup := map[uint32][]int{}
	for i, g := range groups {
		if g == 0 {
			out[i].Err = crossSlot(&ops[i])
			continue
		}
		byGroup[g] = append(byGroup[g], i)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g, idx := range byGroup {
		wg.Add(1)
		go func(g uint32, idx []int) {
			defer wg.Done()
			sub := make([]nodeapi.Op, len(idx))
			for j, i := range idx {
				sub[j] = ops[i]
			}
			rs, err := d.nodes[g-1].Check(ctx, sub)
			if err == nil && len(rs) != len(sub) {
				err = fmt.Errorf("group %d returned %d results for %d ops", g, len(rs), len(sub))
			}
			mu.Lock()
			defer mu.Unlock()
			for j, i := range idx {
				if err != nil {
					out[i].Err = asError(err)
					continue
				}
				out[i] = rs[j]
			}
		}(g, idx)
	}
	wg.Wait()
	return out, nil
}

// asError is a group's failed call as one op's refusal, by the node's
// contract: nothing proposed (unavailable) or maybe applied (outcome_unknown).
func asError(err error) *nodeapi.Error {
	var e *nodeapi.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, nodeapi.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &nodeapi.Error{Code: nodeapi.CodeOutcomeUnknown, Message: err.Error()}
	case errors.Is(err, nodeapi.ErrNoLeader), errors.Is(err, nodeapi.ErrUnavailable):
		return &nodeapi.Error{Code: nodeapi.CodeUnavailable, Message: err.Error()}
	case errors.Is(err, nodeapi.ErrTooLarge):
		return &nodeapi.Error{Code: nodeapi.CodePayloadTooLarge, Message: err.Error()}
	}
	return &nodeapi.Error{Code: nodeapi.CodeInternal, Message: err.Error()}
}

// keyNode is the data group node owning key's slot (nil before the data
// groups are open).
func (h *Host) keyNode(key string) *cluster.Node {
	d := h.data.Load()
	if d == nil {
		return nil
	}
	return d.nodes[d.rec.slots.GroupOf(key)-1]
}

// ResetKey forgets c.Key's state in the group owning its slot.
func (h *Host) ResetKey(ctx context.Context, c nodeapi.Check) error {
	n := h.keyNode(c.Key)
	if n == nil {
		return errNotOpen
	}
	return n.ResetKey(ctx, c)
}

// Join and Remove change group 0's voters; the data groups follow them
// (balance.go).
func (h *Host) Join(ctx context.Context, id, raftAddr, httpAddr string) error {
	return h.zero.Join(ctx, id, raftAddr, httpAddr)
}

func (h *Host) Remove(ctx context.Context, id string) error { return h.zero.Remove(ctx, id) }

// Status is group 0's view (the node table, the membership); per data
// group, GET /v1/cluster/slots.
func (h *Host) Status(ctx context.Context) (nodeapi.Status, error) { return h.zero.Status(ctx) }

// Ready is nil when group 0 and every data group have a leader this node
// caught up with: a node that could decide only some keys is not ready.
func (h *Host) Ready() error {
	if err := h.zero.Ready(); err != nil {
		return err
	}
	if err := h.Err(); err != nil {
		return fmt.Errorf("%w: %v", nodeapi.ErrUnavailable, err)
	}
	d := h.data.Load()
	if d == nil {
		return errNotOpen
	}
	for i, n := range d.nodes {
		g := uint32(i + 1)
		if err := n.Ready(); err != nil {
			// A node holding no replica of g forwards g's checks to the
			// leader group 0 records (Config.LeaderHint): ready once one is.
			if h.holds(g) {
				return fmt.Errorf("data group %d: %w", g, err)
			}
			if _, addr := h.leaderHint(g)(); addr == "" {
				return fmt.Errorf("data group %d: this node holds no replica and group 0 records no leader for it yet", g)
			}
		}
	}
	return nil
}

// Refused answers from the over-limit cache of the group owning key: each
// group's cache holds the refusals its own state machine decided.
func (h *Host) Refused(id overlimit.LimitID, key string, cost int64) (algo.Decision, bool) {
	n := h.keyNode(key)
	if n == nil {
		return algo.Decision{}, false
	}
	// A node that holds no replica of the key's group any more stopped
	// applying its log: what its cache holds may since have been reset.
	if g := h.data.Load().rec.slots.GroupOf(key); !h.holds(g) {
		return algo.Decision{}, false
	}
	return n.OverLimit().Refused(id, key, cost)
}

// LeaderID and LeaderHTTPAddr are group 0's leader: no data group's leader
// is the leader of every key, so the Limitd-Leader hint names group 0's
// (clients route by GET /v1/cluster/slots).
func (h *Host) LeaderID() (string, bool)         { return h.zero.LeaderID() }
func (h *Host) LeaderHTTPAddr() (string, string) { return h.zero.LeaderHTTPAddr() }
