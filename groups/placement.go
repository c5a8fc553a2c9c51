package groups

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Placement: which nodes hold each data group's replicas and which of them
// leads it. Plan is pure and deterministic, so that the plan group 0's
// leader publishes (the placement record) follows from what group 0 holds
// and which nodes it has seen lately, and a test can run it step by step.

// ReplicationFactor is a data group's replicas: three, or every node of a
// smaller cluster.
const ReplicationFactor = 3

// GroupPlacement is one data group's replicas (sorted by id) and leader.
type GroupPlacement struct {
	Replicas []string
	Leader   string
}

func (p GroupPlacement) has(id string) bool { return slices.Contains(p.Replicas, id) }

// PlanInput is what the planner sees.
type PlanInput struct {
	// Nodes are the live nodes (group 0's voters seen lately), any order.
	Nodes []string
	// Groups[g-1] is data group g as it is now: its replicas (dead ones
	// included: they are replaced) and its leader ("" when unknown).
	Groups []GroupPlacement
	// Prev is the previous plan (optional, same length as Groups): a group
	// half-way through a move holds one replica too many, and the one
	// dropped is the one the previous plan dropped, so a move finishes as
	// planned instead of starting another.
	Prev []GroupPlacement
}

// Plan is, for each data group, its wanted replicas and preferred leader:
//
//   - R = min(ReplicationFactor, live nodes) distinct live replicas;
//   - replicas per live node within ±1 of each other, placed on the nodes
//     with the fewest (ties by id);
//   - stable: a group keeps the live replicas it has unless balance needs
//     one of them elsewhere, and a plan of a placement that already meets
//     the rules is that placement;
//   - at most one live replica taken from a group per plan (beyond an extra
//     replica left by a move), so that applying a plan never takes two of a
//     group's copies away at once; balance that needs more is the next
//     plan's (Plan of Plan converges);
//   - preferred leaders among the replicas, leaders per node within ±1
//     where the replicas allow it, a group's current leader kept when it can be.
func Plan(in PlanInput) []GroupPlacement {
	nodes := slices.Clone(in.Nodes)
	sort.Strings(nodes)
	nodes = slices.Compact(nodes)
	out := make([]GroupPlacement, len(in.Groups))
	if len(nodes) == 0 {
		for g := range out {
			out[g] = GroupPlacement{Replicas: []string{}}
		}
		return out
	}
	r := min(ReplicationFactor, len(nodes))
	live := map[string]bool{}
	for _, n := range nodes {
		live[n] = true
	}
	load := map[string]int{}
	repl := make([][]string, len(in.Groups))
	for g, cur := range in.Groups {
		seen := map[string]bool{}
		for _, id := range cur.Replicas {
			if live[id] && !seen[id] {
				seen[id] = true
				repl[g] = append(repl[g], id)
				load[id]++
			}
		}
	}
	// taken marks a group that gave up a live replica in this plan.
	taken := make([]bool, len(in.Groups))
	for g := range repl {
		if len(repl[g]) <= r {
			continue
		}
		var prev map[string]bool
		if g < len(in.Prev) {
			prev = map[string]bool{}
			for _, id := range in.Prev[g].Replicas {
				prev[id] = true
			}
		}
		leader := in.Groups[g].Leader
		// Keep first: the previous plan's, then the leader, then the least
		// loaded, then by id.
		sort.SliceStable(repl[g], func(i, j int) bool {
			a, b := repl[g][i], repl[g][j]
			if prev[a] != prev[b] {
				return prev[a]
			}
			if (a == leader) != (b == leader) {
				return a == leader
			}
			if load[a] != load[b] {
				return load[a] < load[b]
			}
			return a < b
		})
		for _, id := range repl[g][r:] {
			load[id]--
		}
		repl[g] = repl[g][:r]
		taken[g] = true
	}
	// Fill each group short of R on the least loaded nodes.
	for g := range repl {
		for len(repl[g]) < r {
			best := ""
			for _, n := range nodes {
				if !slices.Contains(repl[g], n) && (best == "" || load[n] < load[best]) {
					best = n
				}
			}
			repl[g] = append(repl[g], best)
			load[best]++
		}
	}
	// Balance: move a replica from a most loaded node to a node at least
	// two below it, in a group that has given none up yet, preferring one
	// the source does not lead (no leadership transfer needed).
	for {
		a, b, g := "", "", -1
	search:
		for _, x := range byLoad(nodes, load, true) {
			for _, y := range byLoad(nodes, load, false) {
				if load[x]-load[y] < 2 {
					break
				}
				if g = pickMove(repl, in.Groups, taken, x, y); g >= 0 {
					a, b = x, y
					break search
				}
			}
		}
		if g < 0 {
			break
		}
		i := slices.Index(repl[g], a)
		repl[g][i] = b
		load[a]--
		load[b]++
		taken[g] = true
	}
	for g := range repl {
		sort.Strings(repl[g])
		out[g].Replicas = repl[g]
	}
	placeLeaders(nodes, in.Groups, out)
	return out
}

// byLoad is nodes by load, most loaded first (desc) or least (asc), ties by id.
func byLoad(nodes []string, load map[string]int, desc bool) []string {
	s := slices.Clone(nodes)
	sort.SliceStable(s, func(i, j int) bool {
		if load[s[i]] != load[s[j]] {
			return (load[s[i]] > load[s[j]]) == desc
		}
		return s[i] < s[j]
	})
	return s
}

// pickMove is a group holding a and not b that has given up no replica in
// this plan, one a does not lead first; -1 if none.
func pickMove(repl [][]string, cur []GroupPlacement, taken []bool, a, b string) int {
	found := -1
	for g := range repl {
		if taken[g] || !slices.Contains(repl[g], a) || slices.Contains(repl[g], b) {
			continue
		}
		if cur[g].Leader != a {
			return g
		}
		if found < 0 {
			found = g
		}
	}
	return found
}

// placeLeaders sets each group's preferred leader: its current leader when
// still a replica, else its replica leading fewest; then leaderships are
// shifted along chains (x leads a group y also holds, y one z holds, …)
// from the nodes leading most to nodes leading at least two fewer, until
// every node leads within ±1 of the others or no chain is left.
func placeLeaders(nodes []string, cur []GroupPlacement, out []GroupPlacement) {
	led := map[string]int{}
	for g := range out {
		if l := cur[g].Leader; l != "" && out[g].has(l) {
			out[g].Leader = l
			led[l]++
		}
	}
	for g := range out {
		if out[g].Leader != "" || len(out[g].Replicas) == 0 {
			continue
		}
		best := out[g].Replicas[0]
		for _, id := range out[g].Replicas[1:] {
			if led[id] < led[best] {
				best = id
			}
		}
		out[g].Leader = best
		led[best]++
	}
	for {
		hi := 0
		for _, n := range nodes {
			hi = max(hi, led[n])
		}
		// Breadth-first from every node leading hi; via[y] is the group whose
		// leadership moves to y, from its current leader.
		via := map[string]int{}
		var queue []string
		for _, n := range nodes {
			if led[n] == hi {
				via[n] = -1
				queue = append(queue, n)
			}
		}
		end := ""
		for len(queue) > 0 && end == "" {
			x := queue[0]
			queue = queue[1:]
			for g := range out {
				if out[g].Leader != x {
					continue
				}
				for _, y := range out[g].Replicas {
					if _, seen := via[y]; seen {
						continue
					}
					via[y] = g
					if led[y] <= hi-2 {
						end = y
						break
					}
					queue = append(queue, y)
				}
				if end != "" {
					break
				}
			}
		}
		if end == "" {
			return
		}
		led[end]++
		for y := end; via[y] >= 0; {
			g := via[y]
			x := out[g].Leader
			out[g].Leader = y
			y = x
			if via[y] < 0 {
				led[y]--
			}
		}
	}
}

// Spread is max − min of replicas and of preferred leaders per node over
// nodes (nodes holding none count as 0).
func Spread(nodes []string, plan []GroupPlacement) (replicas, leaders int) {
	rc, lc := map[string]int{}, map[string]int{}
	for _, p := range plan {
		for _, id := range p.Replicas {
			rc[id]++
		}
		lc[p.Leader]++
	}
	return spreadOf(nodes, rc), spreadOf(nodes, lc)
}

func spreadOf(nodes []string, c map[string]int) int {
	if len(nodes) == 0 {
		return 0
	}
	lo, hi := c[nodes[0]], c[nodes[0]]
	for _, n := range nodes {
		lo, hi = min(lo, c[n]), max(hi, c[n])
	}
	return hi - lo
}

// The placement record (group 0's node table, placementKey): the plan group
// 0's leader drives toward, read by every node (a data group's leader
// hands leadership to the preferred one). One line:
// "limitd-placement/1 1=a,b,c:a 2=b,c,d:c …".
const placementKey = "cluster/placement"

func encodePlacement(plan []GroupPlacement) string {
	var b strings.Builder
	b.WriteString("limitd-placement/1")
	for g, p := range plan {
		fmt.Fprintf(&b, " %d=%s:%s", g+1, strings.Join(p.Replicas, ","), p.Leader)
	}
	return b.String()
}

func parsePlacement(s string, groups int) ([]GroupPlacement, error) {
	f := strings.Fields(s)
	if len(f) != groups+1 || f[0] != "limitd-placement/1" {
		return nil, fmt.Errorf("placement record %q: not of this build's form for %d groups", s, groups)
	}
	out := make([]GroupPlacement, groups)
	for i, p := range f[1:] {
		gs, rest, ok := strings.Cut(p, "=")
		rs, leader, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 || gs != strconv.Itoa(i+1) {
			return nil, fmt.Errorf("placement record %q: %q", s, p)
		}
		out[i] = GroupPlacement{Replicas: splitIDs(rs), Leader: leader}
	}
	return out, nil
}

// The group-state record (groupKey(g) in group 0's node table): data group
// g's leader, its term and its replicas, written by the group's leader when
// it takes office and when its configuration changes, so that every node —
// replica or not — knows where to send the group's checks, and group 0's
// leader plans from every group's membership. A record from an older term
// is overwritten by the newer leader (it rewrites whenever the record is not
// its own), so a deposed leader's late write lasts one reconcile round.
func groupKey(g uint32) string { return "cluster/group/" + groupName(g) }

type groupState struct {
	Leader   string
	Term     uint64
	Replicas []string // voters, sorted
}

func (s groupState) String() string {
	return "leader=" + s.Leader + " term=" + strconv.FormatUint(s.Term, 10) + " replicas=" + strings.Join(s.Replicas, ",")
}

func parseGroupState(v string) (groupState, error) {
	var s groupState
	f := strings.Fields(v)
	if len(f) != 3 {
		return s, fmt.Errorf("group record %q: want leader= term= replicas=", v)
	}
	l, ok1 := strings.CutPrefix(f[0], "leader=")
	t, ok2 := strings.CutPrefix(f[1], "term=")
	r, ok3 := strings.CutPrefix(f[2], "replicas=")
	term, err := strconv.ParseUint(t, 10, 64)
	if !ok1 || !ok2 || !ok3 || err != nil || l == "" {
		return s, fmt.Errorf("group record %q: malformed", v)
	}
	return groupState{Leader: l, Term: term, Replicas: splitIDs(r)}, nil
}

func splitIDs(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}
