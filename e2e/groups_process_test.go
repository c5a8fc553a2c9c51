package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/hashslot"
)

// slotsView is GET /v1/cluster/slots.
type slotsView struct {
	Epoch  uint64 `json:"epoch"`
	Groups []struct {
		ID       uint32      `json:"id"`
		Leader   string      `json:"leader"`
		Replicas []string    `json:"replicas"`
		Slots    [][2]uint16 `json:"slots"`
		Owned    int         `json:"owned"`
	} `json:"groups"`
}

func getSlots(t *testing.T, p *proc) slotsView {
	t.Helper()
	resp, err := http.Get(p.URL("/v1/cluster/slots"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v slotsView
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/cluster/slots on %s: %d", p.ID, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// spread is whether every data group has a leader and each node leads
// within ±1 of the others (nodes leading none count as 0).
func spread(v slotsView, ids []string) (bool, map[string]int) {
	led := map[string]int{}
	for _, id := range ids {
		led[id] = 0
	}
	for _, g := range v.Groups {
		if g.ID == 0 {
			continue
		}
		if g.Leader == "" || len(g.Replicas) != len(ids) {
			return false, led
		}
		led[g.Leader]++
	}
	lo, hi := 1<<30, -1
	for _, n := range led {
		lo, hi = min(lo, n), max(hi, n)
	}
	return hi-lo <= 1, led
}

// Three processes with --data-groups 3 on one Raft port each: every data
// group replicated on all three with its leader on its own node, checks of
// many keys through every node decided exactly (never more allowed than the
// limit per key), check/all across slots refused 409 cross_slot and with a
// {tag} decided, the slot map served, and checks go on after a node is
// killed.
func TestProcessDataGroups(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	// Leaders spread: one data group led by each node, every group on all three.
	ps := startDataGroups(t)
	n1, n2, n3 := ps[0], ps[1], ps[2]
	v := getSlots(t, n1)
	// The map: epoch 1, group 0 owns nothing, groups 1..3 one run each covering 0..4095 in order.
	if v.Epoch != 1 || v.Groups[0].ID != 0 || len(v.Groups[0].Slots) != 0 {
		t.Fatalf("slot map %+v", v)
	}
	next := uint16(0)
	for _, g := range v.Groups[1:] {
		if len(g.Slots) != 1 || g.Slots[0][0] != next {
			t.Fatalf("group %d slots %v, want one run from %d", g.ID, g.Slots, next)
		}
		next = g.Slots[0][1] + 1
	}
	if next != hashslot.Count {
		t.Fatalf("the runs end at %d, want %d", next, hashslot.Count)
	}
	// Each data group's own state owns exactly its run, on every replica:
	// a check a stale map sends to another group is refused there
	// (wrong_group), not decided.
	for _, p := range ps {
		deadline := time.Now().Add(20 * time.Second)
		for {
			owned := ""
			ok := true
			for _, g := range getSlots(t, p).Groups[1:] {
				size := int(g.Slots[0][1]-g.Slots[0][0]) + 1
				owned += fmt.Sprintf(" group %d owns %d of %d;", g.ID, g.Owned, size)
				ok = ok && g.Owned == size
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the data groups' own hash slot tables do not match the map:%s", p.ID, owned)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// A policy written once is every group's: keys of every group decide by it.
	if code, body := putJSON(t, n2.URL("/v1/policies/api"), `{"algorithm":"fixed_window","limit":5,"window":"`+crashWindow(30*time.Minute)+`"}`); code != 200 {
		t.Fatalf("put policy: %d %s", code, body)
	}
	// 8 tries of a limit of 5 per key, spread over the three nodes.
	const keys = 30
	if hit := exactChecks(t, ps, "user", keys, 8, 3); len(hit) != 3 {
		t.Fatalf("the keys fell in groups %v: the test needs all three", hit)
	}

	// check/all: across slots 409 cross_slot naming the check; under one {tag} decided.
	across := `{"checks":[{"key":"a:1","policy":"api"},{"key":"b:2","policy":"api"}]}`
	if hashslot.Of("a:1") == hashslot.Of("b:2") {
		t.Fatal("the test's keys share a slot")
	}
	code, b := postJSON(t, n3.URL("/v1/check/all"), across)
	if code != http.StatusConflict || !strings.Contains(string(b), `"cross_slot"`) || !strings.Contains(string(b), "checks[1].key") {
		t.Fatalf("check/all across slots: %d %s", code, b)
	}
	code, b = postJSON(t, n3.URL("/v1/check/all"), `{"checks":[{"key":"{u7}:a","policy":"api"},{"key":"{u7}:b","policy":"api"}]}`)
	if code != 200 || !strings.Contains(string(b), `"allowed":true`) {
		t.Fatalf("check/all under one tag: %d %s", code, b)
	}

	// Kill one node: every group keeps a quorum and checks go on through the others.
	n3.Kill()
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("fresh:%d", k)
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, b := postJSON(t, ps[k%2].URL("/v1/check"), `{"key":"`+key+`","policy":"api"}`)
			if code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("check %s after a kill: %d %s", key, code, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// A node started with another --data-groups than the cluster's refuses to
// serve, saying so; one started without the flag on a data directory with
// data groups refuses to start.
func TestProcessDataGroupsMismatchRefused(t *testing.T) {
	t.Parallel()
	n1 := newProc(t, "n1", "")
	n1.start("--data-groups", "2")
	n1.waitReady()
	n2 := newProc(t, "n2", n1.URL(""))
	n2.start("--data-groups", "3")
	deadline := time.Now().Add(30 * time.Second)
	for n2.Running() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n2.Running() {
		t.Fatalf("n2 with --data-groups 3 still runs in a cluster of 2 data groups:\n%s", n2.Logs())
	}
	if !strings.Contains(n2.Logs(), "the cluster was bootstrapped with 2 data groups") {
		t.Fatalf("n2's logs do not say why:\n%s", n2.Logs())
	}
	if err := n1.term(); err != nil {
		t.Fatal(err)
	}
	if err := n1.Node.Start(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for n1.Running() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n1.Running() || !strings.Contains(n1.Logs(), "holds data groups") {
		t.Fatalf("n1 restarted without --data-groups: running %v\n%s", n1.Running(), n1.Logs())
	}
}
