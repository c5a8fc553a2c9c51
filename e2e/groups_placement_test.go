package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/internal/proccluster"
)

// placed is each data group as its own leader reports it (the node whose
// view names itself leader: its configuration is the group's latest), or
// nil when some group has no such view yet.
func placed(t *testing.T, ps []*proc) map[uint32]struct {
	leader   string
	replicas []string
} {
	out := map[uint32]struct {
		leader   string
		replicas []string
	}{}
	var groups int
	for _, p := range ps {
		if !p.Running() {
			continue
		}
		v := getSlots(t, p)
		groups = len(v.Groups) - 1
		for _, g := range v.Groups {
			if g.ID != 0 && g.Leader == p.ID {
				out[g.ID] = struct {
					leader   string
					replicas []string
				}{g.Leader, g.Replicas}
			}
		}
	}
	if groups < 1 || len(out) != groups {
		return nil
	}
	return out
}

// balanced says whether every data group has exactly three replicas, all on
// live nodes, with replicas and leaders per live node within ±1.
func balanced(t *testing.T, ps []*proc) (bool, string) {
	v := placed(t, ps)
	if v == nil {
		return false, "a group without a leader's view"
	}
	var live []string
	for _, p := range ps {
		if p.Running() {
			live = append(live, p.ID)
		}
	}
	rc, lc := map[string]int{}, map[string]int{}
	for g, s := range v {
		if len(s.replicas) != 3 {
			return false, fmt.Sprintf("group %d replicas %v", g, s.replicas)
		}
		for _, r := range s.replicas {
			if !slices.Contains(live, r) {
				return false, fmt.Sprintf("group %d replica %s is down", g, r)
			}
			rc[r]++
		}
		lc[s.leader]++
	}
	spreadOf := func(c map[string]int) int {
		lo, hi := 1<<30, -1
		for _, id := range live {
			lo, hi = min(lo, c[id]), max(hi, c[id])
		}
		return hi - lo
	}
	if spreadOf(rc) > 1 || spreadOf(lc) > 1 {
		return false, fmt.Sprintf("replicas %v leaders %v", rc, lc)
	}
	return true, fmt.Sprintf("replicas %v leaders %v", rc, lc)
}

// exactChecks sends tries checks of each of keys keys (policy api, limit
// 5) round robin through the nodes and fails unless exactly 5 of each are
// allowed; it returns the data groups (of groups) the keys fell in.
func exactChecks(t *testing.T, ps []*proc, prefix string, keys, tries, groups int) map[uint32]bool {
	t.Helper()
	var mu sync.Mutex
	allowed := map[string]int{}
	var wg sync.WaitGroup
	for k := 0; k < keys; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			key := fmt.Sprintf("%s:%d", prefix, k)
			for i := 0; i < tries; i++ {
				code, b := postJSON(t, ps[(k+i)%len(ps)].URL("/v1/check"), `{"key":"`+key+`","policy":"api"}`)
				var d decision
				if code == 200 && json.Unmarshal(b, &d) == nil && d.Allowed {
					mu.Lock()
					allowed[key]++
					mu.Unlock()
				} else if code != 200 && code != 429 {
					t.Errorf("check %s through %s: %d %s", key, ps[(k+i)%len(ps)].ID, code, b)
				}
			}
		}(k)
	}
	wg.Wait()
	ids := make([]uint32, groups)
	for i := range ids {
		ids[i] = uint32(i + 1)
	}
	m, err := hashslot.Even(ids)
	if err != nil {
		t.Fatal(err)
	}
	hit := map[uint32]bool{}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("%s:%d", prefix, k)
		if allowed[key] != 5 {
			t.Errorf("%s: %d allowed, want exactly 5", key, allowed[key])
		}
		hit[m.GroupOf(key)] = true
	}
	return hit
}

// Six processes with --data-groups 6: each data group settles on exactly
// three replicas, with replicas and leaders per node within ±1 (so each
// node holds three groups and is no replica of the other three); checks of
// keys of every group through every node — replica or not — are exact;
// a node killed has its replicas placed on the others (after
// --placement-dead-after) and checks go on, still exact; restarted, it
// takes its share back.
func TestProcessDataGroupsPlacement(t *testing.T) {
	t.Parallel()
	flags := []string{"--data-groups", "6", "--placement-dead-after", "3s"}
	n1 := newProc(t, "n1", "")
	n1.start(flags...)
	n1.waitReady()
	ps := []*proc{n1}
	for i := 2; i <= 6; i++ {
		p := newProc(t, fmt.Sprintf("n%d", i), n1.URL(""))
		p.start(flags...)
		ps = append(ps, p)
	}
	for _, p := range ps {
		deadline := time.Now().Add(30 * time.Second)
		for proccluster.GetReady(context.Background(), p.URL("")) != nil {
			if time.Now().After(deadline) || !p.Running() {
				var all strings.Builder
				for _, q := range ps {
					fmt.Fprintf(&all, "--- %s\n%s", q.ID, q.Logs())
				}
				t.Fatalf("%s not ready after 30s: %v\n%s", p.ID, proccluster.GetReady(context.Background(), p.URL("")), all.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	settle := func(what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			ok, why := balanced(t, ps)
			if ok {
				t.Logf("%s: %s", what, why)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not placed after 60s: %s\n%s", what, why, n1.Logs())
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	settle("six nodes")

	if code, body := putJSON(t, ps[1].URL("/v1/policies/api"), `{"algorithm":"fixed_window","limit":5,"window":"`+crashWindow(30*time.Minute)+`"}`); code != 200 {
		t.Fatalf("put policy: %d %s", code, body)
	}
	if hit := exactChecks(t, ps, "user", 60, 8, 6); len(hit) != 6 {
		t.Fatalf("the keys fell in groups %v: the test needs all six", hit)
	}

	// Kill a node: its three groups are each re-replicated on a live node.
	victim := ps[3]
	victim.Kill()
	settle("after killing " + victim.ID)
	live := slices.DeleteFunc(slices.Clone(ps), func(p *proc) bool { return p == victim })
	exactChecks(t, live, "fresh", 36, 8, 6)

	// It comes back on its old data directory (replicas it was dropped
	// from meanwhile): placement gives it its share again, and checks
	// through it are exact.
	if err := victim.Node.Start(flags...); err != nil {
		t.Fatal(err)
	}
	victim.waitReady()
	settle("after restarting " + victim.ID)
	exactChecks(t, ps, "back", 36, 8, 6)
}
