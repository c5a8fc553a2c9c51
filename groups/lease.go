package groups

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/nodeapi"
)

// Leases is the lease runtime's node (service.Leaser) with data groups: a
// quota lease on a key is granted, returned and accounted by the group
// owning the key's slot, the state machine that counts the key's checks,
// so a lease spends units of exactly the state it was carved from. The
// runtime's one table holds this node's leases of every group; each
// group's state machine tells it of its own keys' recalls and returns.
type Leases struct {
	h    *Host
	hook atomic.Pointer[nodeapi.LeaseHook]
	once sync.Once
}

// Leases is the node's Leaser.
func (h *Host) Leases() *Leases { return &Leases{h: h} }

// byGroup is the indexes of items per data group of their keys.
func byGroup[T any](m *hashslot.Map, items []T, key func(*T) string) map[uint32][]int {
	out := map[uint32][]int{}
	for i := range items {
		g := m.GroupOf(key(&items[i]))
		out[g] = append(out[g], i)
	}
	return out
}

// perGroup runs call once per group of items (concurrently), each with its
// items in order, and merges the answers in items' order. Any group's
// error fails the whole call: the runtime then knows of no grant, and a
// repeat with the same ids is answered by each group without taking more
// (a group that did grant keeps its grants until their validity ends:
// units held, never spent twice).
func perGroup[T, R any](h *Host, items []T, key func(*T) string, call func(n *cluster.Node, sub []T) ([]R, error)) ([]R, error) {
	if len(items) == 0 {
		return nil, nil
	}
	d := h.data.Load()
	if d == nil {
		return nil, errNotOpen
	}
	groups := byGroup(d.rec.slots, items, key)
	out := make([]R, len(items))
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for g, idx := range groups {
		wg.Add(1)
		go func(g uint32, idx []int) {
			defer wg.Done()
			sub := make([]T, len(idx))
			for j, i := range idx {
				sub[j] = items[i]
			}
			rs, err := call(d.nodes[g-1], sub)
			if err == nil && len(rs) != len(sub) {
				err = fmt.Errorf("%w: group %d answered %d of %d lease ops", nodeapi.ErrOutcomeUnknown, g, len(rs), len(sub))
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("data group %d: %w", g, err))
				return
			}
			for j, i := range idx {
				out[i] = rs[j]
			}
		}(g, idx)
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// GrantLeases asks each key's group for its leases.
func (l *Leases) GrantLeases(ctx context.Context, reqs []nodeapi.LeaseRequest) ([]nodeapi.LeaseGrant, error) {
	return perGroup(l.h, reqs, func(r *nodeapi.LeaseRequest) string { return r.Check.Key },
		func(n *cluster.Node, sub []nodeapi.LeaseRequest) ([]nodeapi.LeaseGrant, error) {
			return n.GrantLeases(ctx, sub)
		})
}

// ReturnLeases gives each lease back to its key's group.
func (l *Leases) ReturnLeases(ctx context.Context, rets []nodeapi.LeaseReturn) ([]int64, error) {
	return perGroup(l.h, rets, func(r *nodeapi.LeaseReturn) string { return r.Check.Key },
		func(n *cluster.Node, sub []nodeapi.LeaseReturn) ([]int64, error) { return n.ReturnLeases(ctx, sub) })
}

// LastTime is the latest leader time any data group's replica here has
// applied. The runtime ends a held lease once this reaches the end of the
// window its units were counted in: the most advanced group's time is
// never behind the key's own group's, so a lease ends no later than its
// group would say (a few ms early across groups led on different clocks).
func (l *Leases) LastTime() int64 {
	d := l.h.data.Load()
	if d == nil {
		return 0
	}
	var t int64
	for _, n := range d.nodes {
		t = max(t, n.LastTime())
	}
	return t
}

// SetLeaseHook makes h hear of every data group's recalls and returns (on
// each group's apply goroutine), set on the groups once they are open.
func (l *Leases) SetLeaseHook(h nodeapi.LeaseHook) {
	l.hook.Store(&h)
	l.once.Do(func() {
		l.h.onOpen(func(nodes []*cluster.Node) {
			for _, n := range nodes {
				n.SetLeaseHook(hookOf{l})
			}
		})
	})
}

// hookOf forwards to the hook set last.
type hookOf struct{ l *Leases }

func (f hookOf) Recall(policy, key string) {
	if h := f.l.hook.Load(); h != nil {
		(*h).Recall(policy, key)
	}
}

func (f hookOf) Returned(policy, key string) {
	if h := f.l.hook.Load(); h != nil {
		(*h).Returned(policy, key)
	}
}
