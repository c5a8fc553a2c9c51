package groups

import (
	"context"
	"sort"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/nodeapi"
)

// reconcile keeps the data groups' voters those of group 0 (on group 0's
// leader) and hands each data group this node leads to its preferred
// leader (on every node).
func (h *Host) reconcile() {
	d := h.data.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st0, err := h.zero.Status(ctx)
	if err != nil || st0.LeaderID == "" {
		return
	}
	voters := votersOf(st0.Members)
	if h.zero.IsLeader() {
		for _, n := range d.nodes {
			h.syncMembers(ctx, n, st0.Members)
		}
	}
	for i, n := range d.nodes {
		h.spread(ctx, uint32(i+1), n, voters)
	}
}

// votersOf is the voters of a configuration, sorted by id: the order the
// preferred leaders are taken from, the same on every node.
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

// Preferred is data group g's preferred leader among voters sorted by id:
// the (g mod N)-th, so G groups over N nodes put ⌈G/N⌉ or ⌊G/N⌋ on each.
func Preferred(g uint32, voters []string) string {
	if len(voters) == 0 {
		return ""
	}
	return voters[int(g)%len(voters)]
}

// syncMembers joins group 0's members missing from data group n and
// removes those group 0 no longer has (through n's leader; a data group
// without a leader is left for the next round).
func (h *Host) syncMembers(ctx context.Context, n *cluster.Node, want []nodeapi.Member) {
	st, err := n.Status(ctx)
	if err != nil || st.LeaderID == "" {
		return
	}
	have := map[string]bool{}
	for _, m := range st.Members {
		have[m.ID] = true
	}
	keep := map[string]bool{}
	for _, m := range want {
		keep[m.ID] = true
		if !have[m.ID] && m.HTTPAddr != "" {
			if err := n.Join(ctx, m.ID, m.RaftAddr, m.HTTPAddr); err != nil {
				h.log.Info("adding a member to a data group", "member", m.ID, "err", err)
			}
		}
	}
	for _, m := range st.Members {
		if !keep[m.ID] {
			if err := n.Remove(ctx, m.ID); err != nil {
				h.log.Info("removing a member from a data group", "member", m.ID, "err", err)
			}
		}
	}
}

// spread hands data group g, when this node leads it and is not its
// preferred leader, to the preferred one if that is a healthy voter of g,
// at most once per TransferEvery.
func (h *Host) spread(ctx context.Context, g uint32, n *cluster.Node, voters0 []nodeapi.Member) {
	if !n.IsLeader() {
		return
	}
	ids := make([]string, len(voters0))
	for i, m := range voters0 {
		ids[i] = m.ID
	}
	pref := Preferred(g, ids)
	if pref == "" || pref == n.ID() {
		return
	}
	if last, ok := h.lastTransfer[g]; ok && time.Since(last) < h.cfg.TransferEvery {
		return
	}
	st, err := n.Status(ctx)
	if err != nil {
		return
	}
	for _, m := range st.Members {
		if m.ID == pref && m.Suffrage == "Voter" && m.Health == nodeapi.HealthHealthy {
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
