package api

import (
	"testing"
	"time"
)

// TestSlotRoutes runs a concurrency policy through the HTTP API: two
// acquires against limit 1, a release, a repeated release, an unknown slot,
// a renewal, a hold that ends without one, and the bad inputs, each error
// naming its field.
func TestSlotRoutes(t *testing.T) {
	ts, store := newPlanServer(t)
	ts.want(ts.do("PUT", "/v1/policies/workers", `{"algorithm":"concurrency","limit":1,"hold":"30s"}`, admin), 200, "", "")
	if m := ts.do("GET", "/v1/policies/workers", "").json(t); m["hold"] != "30s" || m["max_hold"] != "5m" {
		t.Fatalf("policy: %v", m)
	}
	first := ts.do("POST", "/v1/check", `{"key":"job","policy":"workers"}`)
	ts.want(first, 200, "", "")
	m := first.json(t)
	slot, _ := m["slot"].(string)
	if m["allowed"] != true || slot == "" || num(t, m, "slot_expires_ms") != 30000 {
		t.Fatalf("first acquire: %s", first.body)
	}
	second := ts.do("POST", "/v1/check", `{"key":"job","policy":"workers"}`).json(t)
	if second["allowed"] != false || second["slot"] != nil || num(t, second, "retry_after_ms") != 30000 {
		t.Fatalf("second acquire while the slot is held: %v", second)
	}
	body := `{"key":"job","policy":"workers","slot":"` + slot + `"}`
	if r := ts.do("POST", "/v1/renew", body).json(t); r["renewed"] != true || num(t, r, "slot_expires_ms") != 30000 {
		t.Fatalf("renew: %v", r)
	}
	if r := ts.do("POST", "/v1/release", body).json(t); r["released"] != true || num(t, r, "remaining") != 1 {
		t.Fatalf("release: %v", r)
	}
	if r := ts.do("POST", "/v1/release", body).json(t); r["released"] != false {
		t.Fatalf("repeated release: %v", r)
	}
	if r := ts.do("POST", "/v1/renew", body).json(t); r["renewed"] != false {
		t.Fatalf("renewal of a freed slot: %v", r)
	}
	ts.want(ts.do("POST", "/v1/release", `{"key":"job","policy":"workers","slot":"never"}`), 404, "not_found", "slot")
	// Someone else's slot: held on another key, not this one.
	other := ts.do("POST", "/v1/check", `{"key":"other","policy":"workers","request_id":"mine"}`).json(t)
	if other["slot"] != "mine" {
		t.Fatalf("a request id names the slot: %v", other)
	}
	ts.want(ts.do("POST", "/v1/release", `{"key":"job","policy":"workers","slot":"mine"}`), 404, "not_found", "slot")
	// A slot whose holder went away comes back when its hold ends.
	store.Log.Advance(30 * time.Second)
	if r := ts.do("POST", "/v1/check", `{"key":"other","policy":"workers"}`).json(t); r["allowed"] != true {
		t.Fatalf("after the hold ended: %v", r)
	}
	if r := ts.do("POST", "/v1/release", `{"key":"other","policy":"workers","slot":"mine"}`).json(t); r["released"] != false {
		t.Fatalf("release of an expired slot: %v", r)
	}
	// Inline limits, and check/all with a rate limit: acquire only if all allow.
	inline := `{"algorithm":"concurrency","limit":1,"hold":"10s"}`
	all := `{"checks":[{"key":"a","limit":` + inline + `},{"key":"a","limit":{"algorithm":"fixed_window","limit":1,"window":"1h"}}]}`
	if r := ts.do("POST", "/v1/check/all", all).json(t); r["allowed"] != true {
		t.Fatalf("check/all: %v", r)
	}
	if r := ts.do("POST", "/v1/check/all", `{"checks":[{"key":"b","limit":`+inline+`},{"key":"a","limit":{"algorithm":"fixed_window","limit":1,"window":"1h"}}]}`).json(t); r["allowed"] != false || r["results"].([]any)[0].(map[string]any)["slot"] != nil {
		t.Fatalf("a refused check/all holds no slot: %v", r)
	}
	if r := ts.do("POST", "/v1/check", `{"key":"b","limit":`+inline+`}`).json(t); r["allowed"] != true {
		t.Fatalf("b's slot was not taken by the refused group: %v", r)
	}
	// Bad input.
	ts.want(ts.do("POST", "/v1/check", `{"key":"job","policy":"workers","cost":2}`), 400, "invalid_argument", "cost")
	ts.want(ts.do("POST", "/v1/check", `{"key":"job","policy":"workers","cost":-1}`), 400, "invalid_argument", "cost")
	ts.want(ts.do("POST", "/v1/check", `{"key":"x","limit":{"algorithm":"concurrency","limit":1,"hold":"0s"}}`), 400, "invalid_argument", "limit.hold")
	ts.want(ts.do("POST", "/v1/check", `{"key":"x","limit":{"algorithm":"concurrency","limit":1,"hold":"-1s"}}`), 400, "invalid_argument", "limit.hold")
	ts.want(ts.do("POST", "/v1/check", `{"key":"x","limit":{"algorithm":"concurrency","limit":1,"hold":"10s","max_hold":"5s"}}`), 400, "invalid_argument", "limit.max_hold")
	ts.want(ts.do("PUT", "/v1/policies/w2", `{"algorithm":"concurrency","limit":1,"hold":"10s","max_hold":"1s"}`, admin), 400, "invalid_argument", "max_hold")
	ts.want(ts.do("PUT", "/v1/policies/w3", `{"algorithm":"concurrency","limit":1,"hold":"10s","lease":{"share":0.5,"max_ttl":"1s"}}`, admin), 400, "invalid_argument", "lease")
	ts.want(ts.do("POST", "/v1/release", `{"key":"job","policy":"workers"}`), 400, "invalid_argument", "slot")
	ts.want(ts.do("POST", "/v1/release", `{"policy":"workers","slot":"x"}`), 400, "invalid_argument", "key")
	ts.want(ts.do("POST", "/v1/release", `{"key":"job","slot":"x"}`), 400, "invalid_argument", "policy")
	ts.want(ts.do("POST", "/v1/release", `{"key":"job","policy":"workers","slot":"x","extra":1}`), 400, "invalid_argument", "extra")
	ts.want(ts.do("PUT", "/v1/policies/fw", `{"algorithm":"fixed_window","limit":1,"window":"1s"}`, admin), 200, "", "")
	ts.want(ts.do("POST", "/v1/release", `{"key":"job","policy":"fw","slot":"x"}`), 400, "invalid_argument", "policy")
	ts.want(ts.do("POST", "/v1/renew", `{"key":"job","policy":"nope","slot":"x"}`), 404, "not_found", "policy")
}

// A plan's limits are rate limits: a concurrency limit in one is refused
// (its slots would have no route to be released by).
func TestSlotsNotInPlans(t *testing.T) {
	ts, _ := newPlanServer(t)
	r := ts.do("PUT", "/v1/plans/p", `{"limits":{"c":{"algorithm":"concurrency","limit":1,"hold":"10s"}}}`, admin)
	if r.code != 400 {
		t.Fatalf("a concurrency limit in a plan: %d %s", r.code, r.body)
	}
}
