package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/webhook"
)

// budgetReceiver records the key_budget_exhausted deliveries it accepts
// (signed, the id header matching the body); while failing it answers 503.
type budgetReceiver struct {
	t       *testing.T
	secret  string
	mu      sync.Mutex
	failing bool
	got     map[string]int // event id → deliveries accepted
	bodies  map[string]string
}

func (r *budgetReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if !webhook.Verify(r.secret, body, req.Header.Get(webhook.HeaderSignature)) {
		r.t.Errorf("a delivery failed its signature: %s", body)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	var ev struct {
		ID, Type, Reason string
		Budget           uint64
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != req.Header.Get(webhook.HeaderEventID) {
		r.t.Errorf("delivery %s: %v: %s", req.Header.Get(webhook.HeaderEventID), err, body)
	}
	if ev.Type != "key_budget_exhausted" || ev.Reason != fsm.ReasonMaxKeys || ev.Budget != budgetKeys {
		r.t.Errorf("delivery %s, want a max_keys exhaustion of %d keys", body, budgetKeys)
	}
	r.got[ev.ID]++
	r.bodies[ev.ID] = string(body)
}

func (r *budgetReceiver) ids() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for id, n := range r.got {
		out[id] = n
	}
	return out
}

const budgetKeys = 4

// A flood of new keys past the cluster's key budget is one
// key_budget_exhausted event, delivered to the webhook: produced in apply
// when the first check is refused, in every replica's outbox, delivered by
// a new leader when the leader that decided it died before it could (the
// receiver was down), and not produced again by the refusals the new
// leader decides in the same episode. Fails if the event is decided outside
// the replicated state (lost with the leader, or repeated by the next one).
func TestBudgetExhaustionDeliveredOnceAcrossALeaderKill(t *testing.T) {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, Config: func(_ int, cfg *cluster.Config) {
		cfg.CheckBounds = func() fsm.Bounds { return fsm.Bounds{MaxKeys: budgetKeys} }
	}})
	rcv := &budgetReceiver{t: t, secret: "0123456789abcdef-secret", failing: true, got: map[string]int{}, bodies: map[string]string{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range c.Size() {
		go webhook.New(c.Node(i).Deliveries(), webhook.Config{Interval: 10 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxAttempts: 1000}).Run(ctx)
	}
	l := c.Leader()
	if err := c.Node(l).Catalog().PutWebhook(ctx, nodeapi.Webhook{Name: "rcv", URL: srv.URL + "/hook", Secret: rcv.secret}); err != nil {
		t.Fatal(err)
	}
	spec, err := (algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1h"}).Spec()
	if err != nil {
		t.Fatal(err)
	}
	flood := func(n *cluster.Node, from, count int) (refused int) {
		t.Helper()
		for k := from; k < from+count; k++ {
			rs, err := n.Check(ctx, []nodeapi.Op{{Checks: []nodeapi.Check{{Key: fmt.Sprint("k", k), Spec: &spec, Cost: 1}}}})
			if err != nil {
				t.Fatal(err)
			}
			if e := rs[0].Err; e != nil {
				if e.Code != fsm.CodeKeyBudgetExhausted {
					t.Fatalf("key k%d: %v", k, e)
				}
				refused++
			}
		}
		return refused
	}
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; received %v", what, rcv.ids())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if r := flood(c.Node(l), 0, budgetKeys+20); r != 20 {
		t.Fatalf("%d of 20 keys past a budget of %d refused", r, budgetKeys)
	}
	wait("the event in every replica's outbox", func() bool {
		for i := range c.Size() {
			if len(c.Node(i).Catalog().Outbox(0, 100)) != 1 {
				return false
			}
		}
		return true
	})
	c.Stop(l) // the leader that decided it dies, nothing delivered
	rcv.mu.Lock()
	rcv.failing = false
	rcv.mu.Unlock()
	nl := c.WaitLeader(10 * time.Second)
	wait("the event", func() bool { return len(rcv.ids()) == 1 })
	wait("the outbox acked", func() bool { return len(c.Node(nl).Catalog().Outbox(0, 100)) == 0 })
	// The same episode under the new leader: refusals, no new event.
	if r := flood(c.Node(nl), 100, 20); r != 20 {
		t.Fatalf("%d of 20 keys refused under the new leader", r)
	}
	c.WaitConverged() // every running replica has applied them
	for i := range c.Size() {
		if c.Up(i) {
			if eps := c.Node(i).FSM().BudgetEpisodes(); len(eps) != 1 {
				t.Fatalf("node %d's open episodes: %v, want the one", i, eps)
			}
			if n := len(c.Node(i).Catalog().Outbox(0, 100)); n != 0 {
				t.Fatalf("node %d: the refusals of an open episode put %d events in the outbox", i, n)
			}
		}
	}
	ids := rcv.ids()
	if len(ids) != 1 {
		t.Fatalf("deliveries %v, want one event", ids)
	}
}
