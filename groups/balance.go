package groups

import (
	"context"
	"reflect"
	"sort"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/nodeapi"
)

// Balance: every node records the data groups it leads in group 0 (their
// leader, term and replicas: the group-state records), and hands a group
// it leads to the placement's preferred leader; group 0's leader plans
// (placement.go) from those records and the voters it has heard from
// lately, records the plan, and moves each group's membership toward it
// one change at a time.

const (
	// DefaultDeadAfter: a voter group 0's leader has not heard from for this
	// long has its data group replicas replaced on the others. Longer than a
	// restart, so that a rolling restart moves nothing.
	DefaultDeadAfter = 30 * time.Second
	// DefaultMoveEvery is the least time between two membership changes of
	// one data group: its leader records the first before the next is planned.
	DefaultMoveEvery = 5 * time.Second
	// DefaultMovesPerTick bounds the membership changes cluster-wide per
	// reconcile round, so that a join or a loss moves a few groups at a time.
	DefaultMovesPerTick = 2
	// handOverEvery bounds a leader's hand-over when it is not to stay a
	// replica (its removal waits for it): sooner than TransferEvery's spread.
	handOverEvery = 2 * time.Second
	// hintFresh: a non-replica re-reads a group's recorded leader at most this
	// often (a check per read otherwise), so a stale one is retried with the
	// new record within the check's deadline.
	hintFresh = 50 * time.Millisecond
)

// balancer is the Host loop's own state (one goroutine: no lock).
type balancer struct {
	// seen is, on group 0's leader, when each voter was last healthy;
	// nil elsewhere (a new leader gives every voter DeadAfter afresh).
	seen     map[string]time.Time
	lastMove map[uint32]time.Time
	round    int
}

type hint struct {
	id, addr string
	at       time.Time
}

// leaderHint is data group g's cluster.Config.LeaderHint: the leader
// group 0 records for g and the HTTP address it registered.
func (h *Host) leaderHint(g uint32) func() (string, string) {
	return func() (string, string) {
		p := &h.hints[g-1]
		if c := p.Load(); c != nil && time.Since(c.at) < hintFresh {
			return c.id, c.addr
		}
		c := &hint{at: time.Now()}
		if st, ok := h.groupState(g); ok {
			c.id = st.Leader
			c.addr, _ = h.zero.Catalog().NodeHTTPAddr(st.Leader)
		}
		p.Store(c)
		return c.id, c.addr
	}
}

// groupState is data group g's record in this node's copy of group 0
// (parsed once per record written: the check path asks).
func (h *Host) groupState(g uint32) (groupState, bool) {
	v, ok := h.zero.Catalog().ClusterRecord(groupKey(g))
	if !ok {
		return groupState{}, false
	}
	p := &h.states[g-1]
	if c := p.Load(); c != nil && c.raw == v {
		return c.st, c.ok
	}
	st, err := parseGroupState(v)
	p.Store(&parsedState{raw: v, st: st, ok: err == nil})
	return st, err == nil
}

type parsedState struct {
	raw string
	st  groupState
	ok  bool
}

// placement is the recorded plan (nil before group 0's leader made one).
func (h *Host) placement(groups int) []GroupPlacement {
	v, ok := h.zero.Catalog().ClusterRecord(placementKey)
	if !ok {
		return nil
	}
	p, err := parsePlacement(v, groups)
	if err != nil {
		h.log.Warn("the placement record is unreadable; placing as if none", "err", err)
		return nil
	}
	return p
}

// holds is whether this node holds a replica of data group g by group 0's
// record (true while g has none: every replica starts on the bootstrapper).
func (h *Host) holds(g uint32) bool {
	st, ok := h.groupState(g)
	if !ok {
		return true
	}
	for _, id := range st.Replicas {
		if id == h.zero.ID() {
			return true
		}
	}
	return false
}

// reconcile records and hands over the data groups this node leads and,
// on group 0's leader, plans and applies placement.
func (h *Host) reconcile() {
	d := h.data.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st0, err := h.zero.Status(ctx)
	if err != nil || st0.LeaderID == "" {
		return
	}
	plan := h.placement(len(d.nodes))
	for i, n := range d.nodes {
		if n.IsLeader() {
			g := uint32(i + 1)
			h.recordGroup(ctx, g, n)
			h.handOver(ctx, g, n, plan)
		}
	}
	if h.zero.IsLeader() {
		h.balance(ctx, d, st0.Members, plan)
	} else {
		h.bal.seen = nil
	}
}

// votersOf is the voters of a configuration, sorted by id.
func votersOf(ms []nodeapi.Member) []nodeapi.Member {
	var vs []nodeapi.Member
	for _, m := range ms {
		if m.Suffrage == "Voter" {
			vs = append(vs, m)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	return vs
}

// recordGroup writes data group g's state (this node leading it) to group
// 0 when the record is not that already, unless the record is of a newer
// term (this node's leadership is over, whatever Raft here says yet).
func (h *Host) recordGroup(ctx context.Context, g uint32, n *cluster.Node) {
	st, err := n.Status(ctx)
	if err != nil || st.LeaderID != n.ID() {
		return
	}
	mine := groupState{Leader: n.ID(), Term: st.Term, Replicas: []string{}}
	for _, m := range st.Members {
		mine.Replicas = append(mine.Replicas, m.ID)
	}
	sort.Strings(mine.Replicas)
	if cur, ok := h.groupState(g); ok && (cur.Term > mine.Term || reflect.DeepEqual(cur, mine)) {
		return
	}
	if err := h.zero.Catalog().PutClusterRecord(ctx, groupKey(g), mine.String()); err != nil {
		h.log.Info("recording a data group's leader and replicas in group 0", "group", g, "err", err)
	}
}

// handOver moves data group g's leadership, led here, to the plan's
// preferred leader when that is a healthy voter of g: at most once per
// TransferEvery while this node stays a replica (leaders spread), sooner
// when the plan drops it (its removal waits for the hand-over).
func (h *Host) handOver(ctx context.Context, g uint32, n *cluster.Node, plan []GroupPlacement) {
	if plan == nil {
		return
	}
	p := plan[g-1]
	if p.Leader == "" || p.Leader == n.ID() {
		return
	}
	every := h.cfg.TransferEvery
	if !p.has(n.ID()) {
		every = handOverEvery
	}
	if last, ok := h.lastTransfer[g]; ok && time.Since(last) < every {
		return
	}
	st, err := n.Status(ctx)
	if err != nil {
		return
	}
	for _, m := range st.Members {
		if m.ID == p.Leader && m.Suffrage == "Voter" && m.Health == nodeapi.HealthHealthy {
			h.lastTransfer[g] = time.Now()
			h.transfers.Add(1)
			if err := n.TransferLeadershipTo(m.ID, m.RaftAddr); err != nil {
				h.log.Info("leadership transfer toward the preferred leader", "group", g, "to", m.ID, "err", err)
			} else {
				h.log.Info("moved a data group's leadership to its preferred leader", "group", g, "to", m.ID)
			}
			return
		}
	}
}

// balance (group 0's leader) plans from the group-state records and the
// live voters, records the plan when it changed, and makes at most one
// membership change per group and MovesPerTick in all.
func (h *Host) balance(ctx context.Context, d *dataGroups, members []nodeapi.Member, prev []GroupPlacement) {
	now := time.Now()
	voters := votersOf(members)
	if h.bal.seen == nil {
		h.bal.seen = map[string]time.Time{}
		for _, m := range voters {
			h.bal.seen[m.ID] = now
		}
	}
	if h.bal.lastMove == nil {
		h.bal.lastMove = map[uint32]time.Time{}
	}
	byID := map[string]nodeapi.Member{}
	var live []string
	for _, m := range voters {
		if _, ok := h.bal.seen[m.ID]; !ok || m.Health == nodeapi.HealthHealthy || m.ID == h.zero.ID() {
			h.bal.seen[m.ID] = now
		}
		if now.Sub(h.bal.seen[m.ID]) <= h.cfg.DeadAfter && m.HTTPAddr != "" {
			live = append(live, m.ID)
			byID[m.ID] = m
		}
	}
	cur := make([]GroupPlacement, len(d.nodes))
	for i := range cur {
		st, ok := h.groupState(uint32(i + 1))
		if !ok {
			return // a group's leader has not recorded it yet
		}
		cur[i] = GroupPlacement{Replicas: st.Replicas, Leader: st.Leader}
	}
	plan := Plan(PlanInput{Nodes: live, Groups: cur, Prev: prev})
	if !reflect.DeepEqual(plan, prev) {
		if err := h.zero.Catalog().PutClusterRecord(ctx, placementKey, encodePlacement(plan)); err != nil {
			h.log.Info("recording the data groups' placement", "err", err)
			return
		}
		h.log.Info("placement", "plan", encodePlacement(plan), "live", live)
	}
	isLive := map[string]bool{}
	for _, id := range live {
		isLive[id] = true
	}
	moves := 0
	h.bal.round++
	for k := range cur {
		if moves >= h.cfg.MovesPerTick {
			return
		}
		i := (k + h.bal.round) % len(cur) // no group starved by the bound
		g := uint32(i + 1)
		if last, ok := h.bal.lastMove[g]; ok && now.Sub(last) < h.cfg.MoveEvery {
			continue
		}
		kind, id := nextChange(cur[i], plan[i], isLive)
		if kind == changeNone {
			continue
		}
		n := d.nodes[i]
		var err error
		switch kind {
		case changeAdd:
			m := byID[id]
			err = n.Join(ctx, m.ID, m.RaftAddr, m.HTTPAddr)
		case changeRemove:
			err = n.Remove(ctx, id)
		}
		h.bal.lastMove[g] = now
		moves++
		if err != nil {
			h.log.Info("placement: a data group's membership change", "group", g, "change", kind, "member", id, "err", err)
		} else {
			h.log.Info("placement: changed a data group's membership", "group", g, "change", kind, "member", id)
		}
	}
}

type change string

const (
	changeNone   change = ""
	changeAdd    change = "add"
	changeRemove change = "remove"
)

// nextChange is data group cur's one membership change toward want: a
// dead replica removed first (adding a fourth voter to a group with a
// dead one would need the newcomer caught up for a quorum), then a wanted
// replica added, then an unwanted one removed once it no longer leads (its
// leader hands over first: handOver).
func nextChange(cur, want GroupPlacement, live map[string]bool) (change, string) {
	for _, id := range cur.Replicas {
		if !live[id] && !want.has(id) {
			return changeRemove, id
		}
	}
	for _, id := range want.Replicas {
		if !cur.has(id) {
			return changeAdd, id
		}
	}
	for _, id := range cur.Replicas {
		if !want.has(id) && id != cur.Leader {
			return changeRemove, id
		}
	}
	return changeNone, ""
}
