package e2e

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

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/internal/proccluster"
)

// TestAlertsDocSnippet runs docs/API.md's alerts snippet as written (only
// the address is replaced) against one limitd process with an admin token,
// and compares each command's output with the "# …" line under it.
func TestAlertsDocSnippet(t *testing.T) {
	runDocSnippet(t, "alerts", 5, nil)
}

// TestWebhookDeliveryAcrossALeaderKillOfProcesses: three limitd processes,
// a webhook receiver in the test that verifies every signature. Each key
// crosses 0.5 while the receiver takes deliveries, then 1.0 while it
// refuses them; the leader is killed (SIGKILL) and the receiver comes
// back: exactly one event id per (key, threshold) reaches it, at least
// once, none is missed, and every signature verifies.
func TestWebhookDeliveryAcrossALeaderKillOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	old := proccluster.Serve
	proccluster.Serve = func() (string, []string, error) { return limitdBin, []string{"serve"}, nil }
	defer func() { proccluster.Serve = old }()
	c, err := proccluster.Start(context.Background(), t.TempDir(), []string{"n1", "n2", "n3"}, []string{"--admin-token", "tok"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	const secret = "process-test-secret-0123"
	var down atomic.Bool
	var badSig atomic.Int64
	var mu sync.Mutex
	ids := map[string]string{} // event id → key|threshold
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !client.VerifyWebhook(secret, body, r.Header.Get(client.WebhookSignatureHeader)) {
			badSig.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var ev struct {
			ID        string  `json:"id"`
			Key       string  `json:"key"`
			Threshold float64 `json:"threshold"`
		}
		json.Unmarshal(body, &ev)
		mu.Lock()
		ids[r.Header.Get(client.WebhookEventIDHeader)] = fmt.Sprintf("%s|%g", ev.Key, ev.Threshold)
		mu.Unlock()
	}))
	defer rcv.Close()
	cl, err := client.New(c.Addrs(), client.WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := cl.PutWebhook(ctx, client.Webhook{Name: "rcv", URL: rcv.URL, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutPolicy(ctx, client.Policy{Name: "q", Limit: client.Limit{Algorithm: "fixed_window", Limit: 4, Window: "1h"}, Notify: []float64{0.5, 1}}); err != nil {
		t.Fatal(err)
	}
	const keys = 4
	spend := func() {
		for k := range keys {
			if _, err := cl.Check(ctx, client.Request{Key: fmt.Sprint("k", k), Policy: "q", Cost: 2}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tuples := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		m := map[string]int{}
		for _, tu := range ids {
			m[tu]++
		}
		return m
	}
	wait := func(what string, n int) {
		t.Helper()
		for len(tuples()) < n {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s: %v", what, tuples())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	spend()
	wait("the 0.5 events", keys)
	down.Store(true)
	spend()
	time.Sleep(300 * time.Millisecond) // the 1.0 events are applied and their deliveries refused
	leader := -1
	for i, nd := range c.Nodes {
		if st, err := cl.NodeStatus(ctx, nd.HTTPAddr); err == nil && st.State == "Leader" {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no leader found")
	}
	c.Nodes[leader].Kill()
	down.Store(false)
	wait("every event after the leader's kill", 2*keys)
	for tu, n := range tuples() {
		if n != 1 {
			t.Fatalf("%s arrived under %d ids", tu, n)
		}
	}
	if b := badSig.Load(); b != 0 {
		t.Fatalf("%d deliveries failed their signature", b)
	}
}
