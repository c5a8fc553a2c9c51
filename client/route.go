package client

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/hashslot"
)

// Routing by hash slot. On a cluster with data groups a key's checks are
// decided by the leader of the group owning its slot; any node forwards
// them there, one hop. The client saves that hop: it caches the slot map
// (GET /v1/cluster/slots, which names each group's leader and each node's
// HTTP address), sends each check to its group leader, and coalesces per
// leader. The map is only ever a hint: whichever node a check reaches
// routes it by its own map, and the group that decides it checks that it
// owns the slot, so a stale map costs a hop, never a wrong decision. A
// one-group cluster (or a node without the route) leaves every check on
// the one coalescer, as before.

// WithoutSlotRouting sends every check to the configuration group's leader
// (or round robin), as to a one-group cluster: the nodes forward each key
// to its group.
func WithoutSlotRouting() Option { return func(o *options) { o.noSlotRouting = true } }

// Codes of a check that reached a node not deciding its key, before
// anything was counted: the client asks for the map again and sends it
// the unrouted way (the node there routes it by its own map).
const (
	CodeWrongGroup = "wrong_group" // the group that got it does not own the key's slot
	CodeNotLeader  = "not_leader"  // the node that got it does not lead the key's group
	// CodeCrossSlot: a CheckAll whose keys span hash slots on a cluster
	// with data groups (409; put them under one {tag}).
	CodeCrossSlot = "cross_slot"
)

// HeaderSlotEpoch is the answer header naming the slot map's epoch on a
// cluster with data groups: a newer epoch than the client's makes it
// refresh its map.
const HeaderSlotEpoch = "Limitd-Slot-Epoch"

// routeMap is the slot map as the client routes by it.
type routeMap struct {
	epoch uint64
	// owner is each slot's group; nil when one group owns every slot (no
	// routing: the one coalescer).
	owner []uint32
	// leader is each group's leader's HTTP address ("" when unknown: the
	// check goes the unrouted way).
	leader map[uint32]string
}

// router holds the cached map and the per-leader coalescers.
type router struct {
	c        *Client
	m        atomic.Pointer[routeMap]
	learning atomic.Bool
	// learnedAt is when the map was last asked for (unix nanos), answered
	// or not: a node without the route is asked again only after a
	// refresh interval. stale forces the next pick to ask now.
	learnedAt atomic.Int64
	stale     atomic.Bool
	timed     atomic.Bool // a refresh after invalidate is scheduled
	refreshes atomic.Uint64

	mu  sync.Mutex
	cos atomic.Pointer[map[string]*coalescer] // copy on write: read per check
}

func newRouter(c *Client) *router {
	r := &router{c: c}
	empty := map[string]*coalescer{}
	r.cos.Store(&empty)
	return r
}

// minRefreshGap bounds the map's refreshes however often answers ask for
// one (a node that cannot give the map must not get a GET per answer).
const minRefreshGap = 250 * time.Millisecond

// hostFor is the HTTP address of key's group leader, "" when the check
// goes the unrouted way (routing off, one group, map or leader unknown).
// The map is asked for only once an answer named an epoch (a node with
// data groups: a one-group cluster sees no extra request), then again
// every refresh interval (leaders move) and whenever it went stale.
func (r *router) hostFor(key string) string {
	if r == nil {
		return ""
	}
	m := r.m.Load()
	since := time.Now().UnixNano() - r.learnedAt.Load()
	if (r.stale.Load() && since > int64(minRefreshGap)) || (m != nil && m.owner != nil && since > int64(r.c.opts.refresh)) {
		r.refreshAsync()
	}
	if m == nil || m.owner == nil {
		return ""
	}
	return m.leader[m.owner[hashslot.Of(key)]]
}

// coalescerFor is the coalescer of key's group leader (the client's one
// coalescer when unrouted).
func (c *Client) coalescerFor(key string) *coalescer {
	h := c.rt.hostFor(key)
	if h == "" {
		return c.co
	}
	if co := (*c.rt.cos.Load())[h]; co != nil {
		return co
	}
	r := c.rt
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := *r.cos.Load()
	if co := cur[h]; co != nil {
		return co
	}
	next := make(map[string]*coalescer, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	co := newCoalescer(c, c.opts.coalesce)
	co.host = h
	next[h] = co
	r.cos.Store(&next)
	return co
}

// invalidate makes the next check ask for the map again: a group leader's
// address failed, or an answer named a newer epoch.
func (r *router) invalidate() {
	if r == nil {
		return
	}
	r.stale.Store(true)
	if !r.timed.CompareAndSwap(false, true) {
		return // a refresh is due already
	}
	wait := time.Duration(int64(minRefreshGap) - (time.Now().UnixNano() - r.learnedAt.Load()))
	time.AfterFunc(max(wait, 0), func() {
		r.timed.Store(false)
		r.refreshAsync()
	})
}

// sawEpoch takes an answer's Limitd-Slot-Epoch: newer than the map's, the
// map is stale.
func (r *router) sawEpoch(v string) {
	if r == nil {
		return
	}
	e, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return
	}
	if m := r.m.Load(); m == nil || e > m.epoch {
		r.invalidate()
	}
}

func (r *router) refreshAsync() {
	if !r.learning.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.learning.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = r.refresh(ctx)
	}()
}

// refresh asks the node the client sends to for the slot map. A map of an
// older epoch than the one held is ignored (a node that has not applied
// the newer one yet).
func (r *router) refresh(ctx context.Context) error {
	r.learnedAt.Store(time.Now().UnixNano())
	r.stale.Store(false)
	r.refreshes.Add(1)
	var v ClusterSlots
	if err := r.c.getJSON(ctx, r.c.pick(), "/v1/cluster/slots", false, &v); err != nil {
		return err
	}
	m := routeMapOf(v)
	for {
		cur := r.m.Load()
		if cur != nil && cur.epoch > m.epoch {
			return nil
		}
		if r.m.CompareAndSwap(cur, m) {
			return nil
		}
	}
}

// routeMapOf is v as the client routes by it: owner nil when one group
// owns every slot (or the map is not whole), leaders by HTTP address.
func routeMapOf(v ClusterSlots) *routeMap {
	m := &routeMap{epoch: v.Epoch, leader: map[uint32]string{}}
	http := make(map[string]string, len(v.Nodes))
	for _, n := range v.Nodes {
		http[n.ID] = n.HTTP
	}
	owner := make([]uint32, hashslot.Count)
	seen := make([]bool, hashslot.Count)
	owning, covered := 0, 0
	for _, g := range v.Groups {
		if len(g.Slots) > 0 {
			owning++
		}
		if g.Leader != "" {
			m.leader[g.ID] = http[g.Leader]
		}
		for _, run := range g.Slots {
			for s := int(run[0]); s <= int(run[1]) && s < hashslot.Count; s++ {
				if !seen[s] {
					seen[s] = true
					covered++
				}
				owner[s] = g.ID
			}
		}
	}
	if owning > 1 && covered == hashslot.Count {
		m.owner = owner
	}
	return m
}
