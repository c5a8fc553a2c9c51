package groups

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// applyStep is the balancer's one step on a model cluster (what
// balance.go does through Raft): per group at most one change — add a
// wanted replica that is missing, else drop one not wanted (its
// leadership handed to the preferred leader first) — and the leader moved
// to the preferred one when that is a replica. Dead replicas are dropped
// like unwanted ones.
func applyStep(cur, plan []GroupPlacement) (next []GroupPlacement, changes int) {
	next = make([]GroupPlacement, len(cur))
	for g := range cur {
		c := GroupPlacement{Replicas: slices.Clone(cur[g].Replicas), Leader: cur[g].Leader}
		var add, drop string
		for _, id := range plan[g].Replicas {
			if !c.has(id) {
				add = id
				break
			}
		}
		if add == "" {
			for _, id := range c.Replicas {
				if !plan[g].has(id) {
					drop = id
					break
				}
			}
		}
		switch {
		case add != "":
			c.Replicas = append(c.Replicas, add)
			sort.Strings(c.Replicas)
			changes++
		case drop != "":
			if c.Leader == drop {
				c.Leader = plan[g].Leader
			}
			c.Replicas = slices.DeleteFunc(c.Replicas, func(s string) bool { return s == drop })
			changes++
		}
		if plan[g].Leader != "" && c.has(plan[g].Leader) {
			c.Leader = plan[g].Leader
		}
		if !c.has(c.Leader) {
			c.Leader = ""
		}
		next[g] = c
	}
	return next, changes
}

// checkPlan is what every plan must hold, whatever state it is made from.
func checkPlan(t *rapid.T, nodes []string, cur, plan []GroupPlacement) {
	live := map[string]bool{}
	for _, n := range nodes {
		live[n] = true
	}
	r := min(ReplicationFactor, len(nodes))
	for g, p := range plan {
		if len(p.Replicas) != r || len(slices.Compact(slices.Clone(p.Replicas))) != r {
			t.Fatalf("group %d: replicas %v, want %d distinct (nodes %v)", g+1, p.Replicas, r, nodes)
		}
		for _, id := range p.Replicas {
			if !live[id] {
				t.Fatalf("group %d: replica %s is not live (%v)", g+1, id, nodes)
			}
		}
		if !p.has(p.Leader) {
			t.Fatalf("group %d: preferred leader %q not among %v", g+1, p.Leader, p.Replicas)
		}
		// No group gives up more than one live replica per plan, beyond
		// the extra one a move leaves behind.
		liveCur, lost := 0, 0
		for _, id := range cur[g].Replicas {
			if live[id] {
				liveCur++
				if !p.has(id) {
					lost++
				}
			}
		}
		if lost > max(1, liveCur-r) {
			t.Fatalf("group %d: %v → %v loses %d live replicas", g+1, cur[g].Replicas, p.Replicas, lost)
		}
	}
}

// converge runs plan and step until nothing changes, checking every plan,
// and returns the settled placement and the replicas dropped on the way
// (moves; dead replicas not counted).
func converge(t *rapid.T, nodes []string, cur []GroupPlacement) ([]GroupPlacement, int) {
	live := map[string]bool{}
	for _, n := range nodes {
		live[n] = true
	}
	var prev []GroupPlacement
	moves := 0
	for i := 0; ; i++ {
		if i > 200 {
			t.Fatalf("no fixpoint after 200 steps: %v", cur)
		}
		plan := Plan(PlanInput{Nodes: nodes, Groups: cur, Prev: prev})
		checkPlan(t, nodes, cur, plan)
		next, changes := applyStep(cur, plan)
		for g := range cur {
			for _, id := range cur[g].Replicas {
				if live[id] && !next[g].has(id) {
					moves++
				}
			}
		}
		if changes == 0 && reflect.DeepEqual(next, cur) {
			return cur, moves
		}
		cur, prev = next, plan
	}
}

func checkSettled(t *rapid.T, nodes []string, cur []GroupPlacement) {
	if rs, ls := Spread(nodes, cur); rs > 1 || ls > 1 {
		t.Fatalf("settled with replicas spread %d, leaders spread %d over %v: %v", rs, ls, nodes, cur)
	}
	// Stable: the plan of a settled placement is that placement.
	if again := Plan(PlanInput{Nodes: nodes, Groups: cur}); !reflect.DeepEqual(again, cur) {
		t.Fatalf("plan of a settled placement moves it:\n%v\n%v", cur, again)
	}
}

// joinLowerBound is the fewest replica moves that bring a settled
// placement of total replicas onto nodes (one of them new, holding none)
// within ±1: every node must end with at least ⌊total/N⌋, and none above ⌈total/N⌉.
func joinLowerBound(nodes []string, cur []GroupPlacement) int {
	c := map[string]int{}
	total := 0
	for _, p := range cur {
		for _, id := range p.Replicas {
			c[id]++
			total++
		}
	}
	lo, hi := total/len(nodes), (total+len(nodes)-1)/len(nodes)
	up, down := 0, 0
	for _, n := range nodes {
		up += max(0, lo-c[n])
		down += max(0, c[n]-hi)
	}
	return max(up, down)
}

// leaveLowerBound is the fewest moves of live replicas that rebalance
// after dead's replicas are replaced: replacements land on the least
// loaded nodes, so only nodes already above ⌈total/N⌉ give any up.
func leaveLowerBound(nodes []string, dead string, cur []GroupPlacement) int {
	c := map[string]int{}
	for _, p := range cur {
		for _, id := range p.Replicas {
			if id != dead {
				c[id]++
			}
		}
	}
	r := min(ReplicationFactor, len(nodes))
	total := r * len(cur)
	hi := (total + len(nodes) - 1) / len(nodes)
	down := 0
	for _, n := range nodes {
		down += max(0, c[n]-hi)
	}
	return down
}

// The planner over clusters of 1..9 nodes and 1..24 data groups,
// bootstrapped on one node, then nodes joining and leaving (dead): every
// plan gives each group min(3, N) distinct live replicas and a preferred
// leader among them and takes at most one live replica from a group; the
// balancer's steps settle with replicas and leaders per node within ±1, a
// settled placement is its own plan, and a join onto a settled cluster of
// three or more moves no more replicas than the fewest that balance needs.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n0 := rapid.IntRange(1, 9).Draw(t, "nodes")
		g := rapid.IntRange(1, 24).Draw(t, "groups")
		next := 0
		newID := func() string { next++; return fmt.Sprintf("n%d", next) }
		nodes := []string{newID()}
		cur := make([]GroupPlacement, g)
		for i := range cur {
			cur[i] = GroupPlacement{Replicas: []string{nodes[0]}, Leader: nodes[0]}
		}
		for len(nodes) < n0 {
			nodes = append(nodes, newID())
		}
		cur, _ = converge(t, nodes, cur)
		checkSettled(t, nodes, cur)
		events := rapid.IntRange(1, 6).Draw(t, "events")
		for e := 0; e < events; e++ {
			switch kind := rapid.IntRange(0, 2).Draw(t, "event"); {
			case len(nodes) < 9 && (kind == 0 || len(nodes) == 1):
				nodes = append(nodes, newID())
				lb := joinLowerBound(nodes, cur)
				var moves int
				cur, moves = converge(t, nodes, cur)
				if len(nodes) > ReplicationFactor && moves != lb {
					t.Fatalf("join of %s: %d moves, the fewest that balance is %d", nodes[len(nodes)-1], moves, lb)
				}
			case len(nodes) < 7 && kind == 1:
				// Several join at once: a group may have to give up two of
				// its replicas, one plan at a time.
				for k := rapid.IntRange(2, 3).Draw(t, "joins"); k > 0; k-- {
					nodes = append(nodes, newID())
				}
				cur, _ = converge(t, nodes, cur)
			case len(nodes) > 1:
				i := rapid.IntRange(0, len(nodes)-1).Draw(t, "dead")
				dead := nodes[i]
				nodes = slices.Delete(nodes, i, i+1)
				lb := leaveLowerBound(nodes, dead, cur)
				var moves int
				cur, moves = converge(t, nodes, cur)
				if moves > lb+1 {
					t.Fatalf("loss of %s: %d moves, the fewest that balance is %d", dead, moves, lb)
				}
			}
			checkSettled(t, nodes, cur)
		}
	})
}

// A concrete join, for reading: 6 groups over three nodes, a fourth joins:
// it takes 18/4 → 4 or 5 replicas, each from a different group, and leads
// one or two groups.
func TestPlanJoinExample(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	cur := make([]GroupPlacement, 6)
	for g := range cur {
		cur[g] = GroupPlacement{Replicas: []string{"a", "b", "c"}, Leader: nodes[g%3]}
	}
	plan := Plan(PlanInput{Nodes: append(nodes, "d"), Groups: cur})
	got := 0
	for g, p := range plan {
		if p.has("d") {
			got++
			if p.Leader != "d" && p.Leader != cur[g].Leader {
				t.Errorf("group %d: leader %s moved although neither d nor kept", g+1, p.Leader)
			}
		}
	}
	if got != 4 {
		t.Fatalf("d holds %d replicas, want 4: %v", got, plan)
	}
	if rs, ls := Spread([]string{"a", "b", "c", "d"}, plan); rs > 1 || ls > 1 {
		t.Fatalf("spread %d %d: %v", rs, ls, plan)
	}
}

// A balanced placement keeps its leaders, whichever node leads what: a
// plan never moves a leadership that balance does not need moved.
func TestPlanKeepsBalancedLeaders(t *testing.T) {
	all := []string{"a", "b", "c"}
	cur := []GroupPlacement{{Replicas: all, Leader: "c"}, {Replicas: all, Leader: "a"}, {Replicas: all, Leader: "b"}}
	if plan := Plan(PlanInput{Nodes: all, Groups: cur}); !reflect.DeepEqual(plan, cur) {
		t.Fatalf("plan %v of the balanced %v", plan, cur)
	}
}

// The records round-trip and refuse what they are not.
func TestPlacementRecords(t *testing.T) {
	plan := []GroupPlacement{{Replicas: []string{"a", "b", "c"}, Leader: "b"}, {Replicas: []string{"a"}, Leader: "a"}}
	got, err := parsePlacement(encodePlacement(plan), 2)
	if err != nil || !reflect.DeepEqual(got, plan) {
		t.Fatalf("placement read back %v %v", got, err)
	}
	if _, err := parsePlacement(encodePlacement(plan), 3); err == nil {
		t.Fatal("a placement of 2 groups read as 3")
	}
	s := groupState{Leader: "b", Term: 7, Replicas: []string{"a", "b", "c"}}
	back, err := parseGroupState(s.String())
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("group state read back %+v %v", back, err)
	}
	for _, bad := range []string{"", "leader= term=1 replicas=a", "leader=a term=x replicas=a", "leader=a replicas=a"} {
		if _, err := parseGroupState(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

// A group's one change toward its plan: a dead replica out first (a fourth
// voter beside a dead one would need the newcomer caught up for a
// quorum), then a wanted replica in, then an unwanted one out — never its
// leader, which hands over first.
func TestNextChange(t *testing.T) {
	live := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	for _, c := range []struct {
		cur, want GroupPlacement
		kind      change
		id        string
	}{
		{GroupPlacement{Replicas: []string{"a", "b", "x"}, Leader: "a"}, GroupPlacement{Replicas: []string{"a", "b", "c"}}, changeRemove, "x"},
		{GroupPlacement{Replicas: []string{"a", "b", "c"}, Leader: "c"}, GroupPlacement{Replicas: []string{"a", "b", "d"}}, changeAdd, "d"},
		{GroupPlacement{Replicas: []string{"a", "b", "c", "d"}, Leader: "c"}, GroupPlacement{Replicas: []string{"a", "b", "d"}}, changeNone, ""},
		{GroupPlacement{Replicas: []string{"a", "b", "c", "d"}, Leader: "a"}, GroupPlacement{Replicas: []string{"a", "b", "d"}}, changeRemove, "c"},
		{GroupPlacement{Replicas: []string{"a", "b", "d"}, Leader: "a"}, GroupPlacement{Replicas: []string{"a", "b", "d"}}, changeNone, ""},
	} {
		if kind, id := nextChange(c.cur, c.want, live); kind != c.kind || id != c.id {
			t.Errorf("%v → %v: %q %q, want %q %q", c.cur, c.want.Replicas, kind, id, c.kind, c.id)
		}
	}
}
