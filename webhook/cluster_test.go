package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/webhook"
)

// receiver is a webhook endpoint that verifies each delivery's signature
// and records the event ids it accepted; while failing it answers 503.
type receiver struct {
	t       *testing.T
	secret  string
	failing atomic.Bool
	badSig  atomic.Int64

	mu     sync.Mutex
	got    map[string]int // event id → deliveries accepted
	tuples map[string]string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if !webhook.Verify(r.secret, body, req.Header.Get(webhook.HeaderSignature)) {
		r.badSig.Add(1)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if r.failing.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	var ev struct {
		ID        string  `json:"id"`
		Key       string  `json:"key"`
		Threshold float64 `json:"threshold"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != req.Header.Get(webhook.HeaderEventID) {
		r.t.Errorf("delivery %s: %v: %s", req.Header.Get(webhook.HeaderEventID), err, body)
	}
	r.mu.Lock()
	r.got[ev.ID]++
	tuple := fmt.Sprintf("%s|%g", ev.Key, ev.Threshold)
	if prev, ok := r.tuples[ev.ID]; ok && prev != tuple {
		r.t.Errorf("event id %s names %s and %s", ev.ID, prev, tuple)
	}
	r.tuples[ev.ID] = tuple
	r.mu.Unlock()
}

// distinct is the (key, threshold) tuples received, each once.
func (r *receiver) distinct() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, tu := range r.tuples {
		out[tu]++
	}
	return out
}

// TestDeliveryAcrossALeaderKill: events decided in the replicated state
// reach a webhook at least once each, signed, with one stable id per (key,
// threshold) in the window, when the receiver is down while the events are
// produced and the leader that saw them is killed before it could deliver
// them: the next leader delivers the unacked outbox, then acks it.
func TestDeliveryAcrossALeaderKill(t *testing.T) {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, SkipShort: true})
	rcv := &receiver{t: t, secret: "0123456789abcdef-secret", got: map[string]int{}, tuples: map[string]string{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loops := make([]*webhook.Loop, c.Size())
	for i := range c.Size() {
		loops[i] = webhook.New(c.Node(i).Deliveries(), webhook.Config{Interval: 10 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxAttempts: 1000})
		go loops[i].Run(ctx)
	}
	l := c.Leader()
	n := c.Node(l)
	if err := n.Catalog().PutWebhook(ctx, nodeapi.Webhook{Name: "rcv", URL: srv.URL + "/hook", Secret: rcv.secret}); err != nil {
		t.Fatal(err)
	}
	spec, err := (algo.Config{Algorithm: "fixed_window", Limit: 4, Window: "1h"}).Spec()
	if err != nil {
		t.Fatal(err)
	}
	p := nodeapi.Policy{Name: "api", Spec: spec, Options: nodeapi.LimitOptions{Notify: [nodeapi.MaxNotify]uint16{5000, 10000}}}
	if err := n.Catalog().PutPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	const keys = 5
	check := func(n *cluster.Node) {
		t.Helper()
		for k := range keys {
			if _, err := n.Check(ctx, []nodeapi.Op{{Checks: []nodeapi.Check{{Key: fmt.Sprint("k", k), Policy: "api", Cost: 2}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; received %v", what, rcv.distinct())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	check(n) // every key crosses 0.5
	wait("the 0.5 events", func() bool { return len(rcv.distinct()) == keys })

	rcv.failing.Store(true)
	check(n) // every key crosses 1.0, and the receiver is down
	wait("the 1.0 events in every replica's outbox", func() bool {
		for i := range c.Size() {
			if len(c.Node(i).Catalog().Outbox(0, 100)) != keys {
				return false
			}
		}
		return true
	})
	c.Stop(l) // the leader that saw them dies, nothing delivered
	rcv.failing.Store(false)
	nl := c.WaitLeader(10 * time.Second)
	if nl == l {
		t.Fatalf("leader %d again", nl)
	}
	wait("every event", func() bool { return len(rcv.distinct()) == 2*keys })
	wait("the outbox acked", func() bool { return len(c.Node(nl).Catalog().Outbox(0, 100)) == 0 })
	for tuple, ids := range rcv.distinct() {
		if ids != 1 {
			t.Fatalf("%s arrived under %d ids, want one", tuple, ids)
		}
	}
	if b := rcv.badSig.Load(); b != 0 {
		t.Fatalf("%d deliveries failed their signature", b)
	}
	if got := loops[nl].Counts(); got.Delivered < keys || got.Retried != 0 && got.Acked == 0 {
		t.Fatalf("the new leader's counts: %+v", got)
	}
}
