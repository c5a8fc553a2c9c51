package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/hashslot"
)

// twoGroups is the map of fc's nodes with data groups 1 (slots 0–2047, led
// by leader1) and 2 (2048–4095, led by leader2); group 0 owns none.
func twoGroups(fc *fakeCluster, epoch uint64, leader1, leader2 int) *ClusterSlots {
	v := &ClusterSlots{Epoch: epoch, Groups: []SlotGroup{
		{ID: 0, Leader: fc.nodes[0].id, Slots: [][2]uint16{}},
		{ID: 1, Leader: fc.nodes[leader1].id, Slots: [][2]uint16{{0, 2047}}},
		{ID: 2, Leader: fc.nodes[leader2].id, Slots: [][2]uint16{{2048, 4095}}}}}
	for _, n := range fc.nodes {
		v.Nodes = append(v.Nodes, SlotNode{ID: n.id, HTTP: n.addr()})
		for i := range v.Groups {
			v.Groups[i].Replicas = append(v.Groups[i].Replicas, n.id)
		}
	}
	return v
}

// keysOfGroups is n keys of each half of the slots (group 1, group 2).
func keysOfGroups(n int) (g1, g2 []string) {
	for i := 0; len(g1) < n || len(g2) < n; i++ {
		k := fmt.Sprintf("user:%d", i)
		if hashslot.Of(k) < 2048 {
			if len(g1) < n {
				g1 = append(g1, k)
			}
		} else if len(g2) < n {
			g2 = append(g2, k)
		}
	}
	return g1, g2
}

// arrivals records which node each key's checks reached.
type arrivals struct {
	mu sync.Mutex
	at map[string][]string // key → node ids, in order
}

func (a *arrivals) hook(refuse func(n *fakeNode, c fakeCheck) *wireError) func(n *fakeNode, c fakeCheck) *wireError {
	a.at = map[string][]string{}
	return func(n *fakeNode, c fakeCheck) *wireError {
		a.mu.Lock()
		a.at[c.Key] = append(a.at[c.Key], n.id)
		a.mu.Unlock()
		if refuse != nil {
			return refuse(n, c)
		}
		return nil
	}
}

func (a *arrivals) of(key string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.at[key]...)
}

// waitRouted waits until the client routes by a map of epoch.
func waitRouted(t *testing.T, c *Client, epoch uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if m := c.rt.m.Load(); m != nil && m.owner != nil && m.epoch == epoch {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client never routed by the map of epoch %d", epoch)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkAll checks each key once, concurrently (so they coalesce), and
// wants each allowed.
func checkAll(t *testing.T, c *Client, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.Check(ctxT(t), Request{Key: k, Policy: "p"})
			if err != nil || !d.Allowed {
				errs <- fmt.Errorf("%s: %+v %v", k, d, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// On a cluster with data groups the client learns the map from the first
// answer's epoch header and then sends each check to its group's leader
// (n2 for group 1's keys, n3 for group 2's), coalescing per leader: no
// check reaches group 0's leader n1 once routed.
func TestChecksGoToTheirGroupLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(0)
	fc.slots = twoGroups(fc, 1, 1, 2)
	var a arrivals
	fc.entry = a.hook(nil)
	c := mustNew(t, fc.addrs()[:1]) // only n1 configured: the map names the others
	g1, g2 := keysOfGroups(20)
	if d, err := c.Check(ctxT(t), Request{Key: "first", Policy: "p"}); err != nil || !d.Allowed {
		t.Fatalf("first check: %+v %v", d, err)
	}
	if got := a.of("first"); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("the first check (no map yet) reached %v, want n1", got)
	}
	waitRouted(t, c, 1)
	checkAll(t, c, append(append([]string(nil), g1...), g2...))
	for _, k := range g1 {
		if got := a.of(k); len(got) != 1 || got[0] != "n2" {
			t.Errorf("%s (group 1) reached %v, want [n2]", k, got)
		}
	}
	for _, k := range g2 {
		if got := a.of(k); len(got) != 1 || got[0] != "n3" {
			t.Errorf("%s (group 2) reached %v, want [n3]", k, got)
		}
	}
	if n := fc.nodes[0].hitCount("/v1/check/batch"); n != 1 {
		t.Errorf("n1 got %d batches, want only the first check's", n)
	}
	// The unrouted Check path (coalescing off) routes the same way.
	c2 := mustNew(t, fc.addrs()[:1], WithCoalescing(Coalescing{Disabled: true}))
	c2.Check(ctxT(t), Request{Key: "warm", Policy: "p"})
	waitRouted(t, c2, 1)
	before := fc.nodes[1].hitCount("/v1/check")
	if d, err := c2.Check(ctxT(t), Request{Key: g1[0], Policy: "p"}); err != nil || !d.Allowed {
		t.Fatalf("single check: %+v %v", d, err)
	}
	if fc.nodes[1].hitCount("/v1/check") != before+1 {
		t.Errorf("a single /v1/check of group 1 did not go to n2")
	}
}

// A one-group cluster (no epoch header) is served as before: the client
// never asks for the slot map, and every check goes to the leader.
func TestOneGroupClusterIsNotRouted(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	c := mustNew(t, fc.addrs())
	c.Check(ctxT(t), Request{Key: "first", Policy: "p"}) // learns the leader, in the background
	for deadline := time.Now().Add(5 * time.Second); c.Target() != fc.nodes[1].addr(); {
		if time.Now().After(deadline) {
			t.Fatalf("the leader was not learned: target %s", c.Target())
		}
		time.Sleep(5 * time.Millisecond)
	}
	base := fc.nodes[0].hitCount("/v1/check/batch") + fc.nodes[2].hitCount("/v1/check/batch")
	g1, g2 := keysOfGroups(10)
	for range 3 {
		checkAll(t, c, append(append([]string(nil), g1...), g2...))
	}
	for _, n := range fc.nodes {
		if h := n.hitCount("/v1/cluster/slots"); h != 0 {
			t.Errorf("%s asked for the slot map %d times", n.id, h)
		}
	}
	if c.rt.m.Load() != nil {
		t.Error("a map was cached")
	}
	if n := fc.nodes[0].hitCount("/v1/check/batch") + fc.nodes[2].hitCount("/v1/check/batch") - base; n > 0 {
		t.Errorf("%d batches went to followers", n)
	}
	// WithoutSlotRouting: not even an epoch header makes it route.
	fc.slots = twoGroups(fc, 1, 1, 2)
	c2 := mustNew(t, fc.addrs(), WithoutSlotRouting())
	checkAll(t, c2, g2)
	for _, n := range fc.nodes {
		if h := n.hitCount("/v1/cluster/slots"); h != 0 {
			t.Errorf("WithoutSlotRouting: %s asked for the slot map %d times", n.id, h)
		}
	}
}

// A check that a group refuses as not its own (wrong_group: a stale map)
// or a node refuses as not leading (not_leader) is sent again the unrouted
// way with the same request id and decided once; the map is asked for
// again. A newer epoch in an answer's header refreshes the map too, and
// checks follow the new leaders.
func TestStaleMapCostsARetryNeverAWrongDecision(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(0)
	fc.slots = twoGroups(fc, 1, 1, 2)
	g1, g2 := keysOfGroups(6)
	var refusedMu sync.Mutex
	refused := map[string]bool{}
	var a arrivals
	fc.entry = a.hook(func(n *fakeNode, ch fakeCheck) *wireError {
		refusedMu.Lock()
		defer refusedMu.Unlock()
		if n.id == "n1" || refused[ch.Key] {
			return nil
		}
		refused[ch.Key] = true
		code := CodeWrongGroup
		if hashslot.Of(ch.Key) >= 2048 {
			code = CodeNotLeader
		}
		return &wireError{Code: code, Message: "injected"}
	})
	c := mustNew(t, fc.addrs()[:1])
	c.Check(ctxT(t), Request{Key: "first", Policy: "p"})
	waitRouted(t, c, 1)
	refreshes := c.rt.refreshes.Load()
	keys := append(append([]string(nil), g1...), g2...)
	checkAll(t, c, keys)
	for _, k := range keys {
		want := "n2"
		if hashslot.Of(k) >= 2048 {
			want = "n3"
		}
		if got := a.of(k); len(got) != 2 || got[0] != want || got[1] != "n1" {
			t.Errorf("%s reached %v, want [%s n1] (refused, then sent the unrouted way)", k, got, want)
		}
	}
	fc.mu.Lock()
	counted := map[string]int{}
	for _, ap := range fc.applied {
		counted[ap.Key]++
	}
	fc.mu.Unlock()
	for _, k := range keys {
		if counted[k] != 1 {
			t.Errorf("%s counted %d times", k, counted[k])
		}
	}
	for deadline := time.Now().Add(5 * time.Second); c.rt.refreshes.Load() == refreshes; {
		if time.Now().After(deadline) {
			t.Fatal("the map was not asked for again after wrong_group")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Epoch 2 moves group 1's leadership to n3: the next answer names it,
	// and group 1's keys follow. (Once nothing else would refresh the map.)
	for deadline := time.Now().Add(5 * time.Second); c.rt.stale.Load() || c.rt.timed.Load() || c.rt.learning.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the map's refresh never settled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fc.mu.Lock()
	fc.slots = twoGroups(fc, 2, 2, 2)
	fc.mu.Unlock()
	fc.entry = a.hook(nil)
	c.Check(ctxT(t), Request{Key: g2[0], Policy: "p"})
	waitRouted(t, c, 2)
	checkAll(t, c, []string{"moved:" + g1[1]}) // warm: any key
	k := g1[2]
	if d, err := c.Check(ctxT(t), Request{Key: k, Policy: "p", Cost: 2}); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if got := a.of(k); len(got) != 1 || got[0] != "n3" {
		t.Errorf("after epoch 2, %s reached %v, want [n3]", k, got)
	}
}

// A group leader the client cannot reach costs a fail-over, not the
// check: it goes the unrouted way and the map is asked for again.
func TestUnreachableGroupLeaderFailsOver(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(0)
	fc.slots = twoGroups(fc, 1, 1, 2)
	var a arrivals
	fc.entry = a.hook(nil)
	c := mustNew(t, fc.addrs()[:1])
	c.Check(ctxT(t), Request{Key: "first", Policy: "p"})
	waitRouted(t, c, 1)
	fc.nodes[2].srv.Close() // n3, group 2's leader
	_, g2 := keysOfGroups(5)
	checkAll(t, c, g2)
	for _, k := range g2 {
		if got := a.of(k); len(got) != 1 || got[0] == "n3" {
			t.Errorf("%s reached %v", k, got)
		}
	}
	if !c.rt.stale.Load() && c.rt.refreshes.Load() < 2 {
		t.Error("the map was not marked stale after its leader failed")
	}
}

// Slots is GET /v1/cluster/slots, decoded.
func TestSlots(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(0)
	fc.slots = twoGroups(fc, 3, 1, 2)
	c := mustNew(t, fc.addrs())
	v, err := c.Slots(context.Background())
	if err != nil || v.Epoch != 3 || len(v.Groups) != 3 || v.Groups[1].Leader != "n2" || v.Groups[2].SlotCount() != 2048 ||
		v.Groups[0].SlotCount() != 0 || len(v.Nodes) != 3 || v.Nodes[2].HTTP != fc.nodes[2].addr() {
		t.Fatalf("%+v %v", v, err)
	}
}
