package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/service/nodetest"
)

// fsmStore is a node over a real state machine without Raft
// (nodetest.Node): each call is applied as the next log entry. It checks the
// API against the real command encodings and responses (policies, resets,
// request ids, shadow, not_found).
type fsmStore struct {
	*nodetest.Node
}

func newFSMStore(t *testing.T) *fsmStore {
	t.Helper()
	log := nodetest.NewLog(t, time.Unix(0, testEpoch))
	log.RequestIDRetention = 10 * time.Minute
	return &fsmStore{Node: log.Node("n1")}
}

func (*fsmStore) Health() error                      { return nil }
func (*fsmStore) Internal() http.Handler             { return http.NotFoundHandler() }
func (*fsmStore) Collectors() []prometheus.Collector { return nil }

// TestWithStateMachine drives the API over the real state machine: a policy
// written through the API is enforced, listed, reset and deleted.
func TestWithStateMachine(t *testing.T) {
	store := newFSMStore(t)
	ts := &testServer{t: t, h: newAPI(store, Config{Logger: discardLogger()}).Handler()}

	r := ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":2,"window":"1m"}`)
	if r.code != 200 {
		t.Fatalf("put: %d %s", r.code, r.body)
	}
	if r := ts.do("GET", "/v1/policies/api", ""); r.code != 200 || num(t, r.json(t), "limit") != 2 {
		t.Fatalf("get: %d %s", r.code, r.body)
	}
	for i, want := range []bool{true, true, false} {
		r := ts.do("POST", "/v1/check", `{"key":"user/1","policy":"api"}`)
		if m := r.json(t); r.code != 200 || m["allowed"] != want {
			t.Fatalf("check %d: %d %s", i, r.code, r.body)
		}
	}
	if r := ts.do("DELETE", "/v1/keys/user%2F1?policy=api", ""); r.code != 200 {
		t.Fatalf("reset: %d %s", r.code, r.body)
	}
	if m := ts.do("POST", "/v1/check", `{"key":"user/1","policy":"api"}`).json(t); m["allowed"] != true {
		t.Fatalf("after reset: %v", m)
	}

	// Idempotency: replayed, counted once; reuse with another shape is a conflict.
	ts.do("POST", "/v1/check", `{"key":"r","policy":"api","request_id":"once"}`)
	r = ts.do("POST", "/v1/check", `{"key":"r","policy":"api","request_id":"once"}`)
	if m := r.json(t); m["replayed"] != true || num(t, m, "remaining") != 1 {
		t.Fatalf("replay: %s", r.body)
	}
	if m := ts.do("GET", "/v1/keys/r?policy=api", "").json(t); num(t, m["decision"].(map[string]any), "remaining") != 1 {
		t.Fatalf("a replay was counted: %v", m)
	}
	ts.do("POST", "/v1/check/all", `{"request_id":"pair","checks":[{"key":"x","policy":"api"},{"key":"y","policy":"api"}]}`)
	if r := ts.do("POST", "/v1/check", `{"key":"x","policy":"api","request_id":"pair"}`); r.code != http.StatusConflict {
		t.Fatalf("id reused for another shape: %d %s", r.code, r.body)
	}

	// check/all atomicity and locating an unknown policy, as the real state machine reports them.
	ts.do("PUT", "/v1/policies/one", `{"algorithm":"fixed_window","limit":1,"window":"1h"}`)
	ts.do("POST", "/v1/check", `{"key":"g","policy":"one"}`)
	r = ts.do("POST", "/v1/check/all", `{"checks":[{"key":"z","policy":"api"},{"key":"g","policy":"one"}]}`)
	if m := r.json(t); m["allowed"] != false {
		t.Fatalf("check/all: %s", r.body)
	}
	if m := ts.do("GET", "/v1/keys/z?policy=api", "").json(t); num(t, m["decision"].(map[string]any), "remaining") != 2 {
		t.Fatalf("refused check/all consumed: %v", m)
	}
	r = ts.do("POST", "/v1/check/all", `{"checks":[{"key":"z","policy":"api"},{"key":"z","policy":"gone"}]}`)
	if code, field, _ := r.errorBody(t); r.code != 404 || code != CodeNotFound || field != "checks[1].policy" {
		t.Fatalf("unknown policy in check/all: %d %s", r.code, r.body)
	}

	// Shadow: allowed, reported, nothing consumed.
	ts.do("PUT", "/v1/policies/dry", `{"algorithm":"fixed_window","limit":1,"window":"1m","shadow":true}`)
	ts.do("POST", "/v1/check", `{"key":"s","policy":"dry"}`)
	if m := ts.do("POST", "/v1/check", `{"key":"s","policy":"dry"}`).json(t); m["allowed"] != true || m["shadow_refused"] != true {
		t.Fatalf("shadow: %v", m)
	}

	// Delete: then checks and a second delete are not_found.
	if r := ts.do("DELETE", "/v1/policies/api", ""); r.code != 200 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	r = ts.do("POST", "/v1/check", `{"key":"user/1","policy":"api"}`)
	if code, field, _ := r.errorBody(t); r.code != 404 || code != CodeNotFound || field != "policy" {
		t.Fatalf("check of a deleted policy: %d %s", r.code, r.body)
	}
	if r := ts.do("DELETE", "/v1/policies/api", ""); r.code != 404 {
		t.Fatalf("second delete: %d %s", r.code, r.body)
	}
	r = ts.do("GET", "/v1/policies", "")
	if list := r.json(t)["policies"].([]any); len(list) != 2 {
		t.Fatalf("list after delete: %s", r.body)
	}
}
