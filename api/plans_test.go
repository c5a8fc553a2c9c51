package api

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/limitd/limitd/nodeapi"
)

// KeyPlan reads key's plan from the replica at the leader's time.
func (s *fsmStore) KeyPlan(key string) (nodeapi.KeyPlan, error) {
	return s.Log.FSM().KeyPlan(key, s.Log.Now())
}

const (
	proBody  = `{"limits":{"per_second":{"algorithm":"token_bucket","limit":10,"window":"1s"},"daily":{"algorithm":"fixed_window","limit":10000,"calendar":"day","timezone":"UTC"}}}`
	freeBody = `{"limits":{"per_second":{"algorithm":"token_bucket","limit":2,"window":"1s"},"daily":{"algorithm":"fixed_window","limit":100,"calendar":"day","timezone":"UTC"}}}`
	admin    = "Authorization: Bearer tok"
)

func newPlanServer(t *testing.T) (*testServer, *fsmStore) {
	store := newFSMStore(t)
	return &testServer{t: t, h: newAPI(store, Config{Logger: discardLogger(), AdminToken: "tok"}).Handler()}, store
}

func (ts *testServer) want(r response, status int, code, field string) {
	ts.t.Helper()
	if r.code != status {
		ts.t.Fatalf("status %d, want %d: %s", r.code, status, r.body)
	}
	if code != "" {
		if c, f, _ := r.errorBody(ts.t); c != code || f != field {
			ts.t.Fatalf("error %q on %q, want %q on %q: %s", c, f, code, field, r.body)
		}
	}
}

func TestPlanRoutes(t *testing.T) {
	ts, _ := newPlanServer(t)
	// Admin routes need the token.
	ts.want(ts.do("PUT", "/v1/plans/pro", proBody), 401, CodeUnauthenticated, "")
	ts.want(ts.do("PUT", "/v1/plans/pro", proBody, admin), 200, "", "")
	ts.want(ts.do("PUT", "/v1/plans/free", freeBody, admin), 200, "", "")
	if m := ts.do("GET", "/v1/plans/pro", "").json(t); num(t, m["limits"].(map[string]any)["daily"].(map[string]any), "limit") != 10000 {
		t.Fatalf("get: %v", m)
	}
	if m := ts.do("GET", "/v1/plans", "").json(t); len(m["plans"].([]any)) != 2 {
		t.Fatalf("list: %v", m)
	}
	// Each limit is validated as an inline limit, named under limits.<name>.
	ts.want(ts.do("PUT", "/v1/plans/bad", `{"limits":{"daily":{"algorithm":"fixed_window","limit":10,"window":"banana"}}}`, admin), 400, CodeInvalidArgument, "limits.daily.window")
	ts.want(ts.do("PUT", "/v1/plans/bad", `{"limits":{"daily":{"algorithm":"nope","limit":10,"window":"1s"}}}`, admin), 400, CodeInvalidArgument, "limits.daily.algorithm")
	ts.want(ts.do("PUT", "/v1/plans/bad", `{"limits":{"daily":{"algorithm":"fixed_window","limit":10,"window":"1s","x":1}}}`, admin), 400, CodeInvalidArgument, "limits.daily.x")
	ts.want(ts.do("PUT", "/v1/plans/bad", `{"limits":{}}`, admin), 400, CodeInvalidArgument, "limits")
	ts.want(ts.do("PUT", "/v1/plans/bad", `{"name":"other","limits":{}}`, admin), 400, CodeInvalidArgument, "name")
	ts.want(ts.do("GET", "/v1/plans/nope", ""), 404, CodeNotFound, "name")
	ts.want(ts.do("DELETE", "/v1/plans/nope", "", admin), 404, CodeNotFound, "plan")

	// No plan: a key-only check names policy.
	ts.want(ts.do("POST", "/v1/check", `{"key":"tenant:acme"}`), 404, CodeNotFound, "policy")
	// The default plan.
	ts.want(ts.do("GET", "/v1/plans/default", ""), 404, CodeNotFound, "plan")
	ts.want(ts.do("PUT", "/v1/plans/default", `{"plan":"nope"}`, admin), 404, CodeNotFound, "plan")
	ts.want(ts.do("PUT", "/v1/plans/default", `{"plan":"free"}`, admin), 200, "", "")
	r := ts.do("POST", "/v1/check", `{"key":"tenant:acme"}`)
	m := r.json(t)
	if r.code != 200 || m["plan"] != "free" || m["plan_limit"] != "per_second" || len(m["limits"].([]any)) != 2 {
		t.Fatalf("default plan check: %s", r.body)
	}
	ts.want(ts.do("DELETE", "/v1/plans/free", "", admin), 409, CodeConflict, "plan")

	// Prefix rules.
	ts.want(ts.do("PUT", "/v1/prefix-rules/tenant:", `{"plan":"pro"}`, admin), 200, "", "")
	ts.want(ts.do("PUT", "/v1/prefix-rules/tenant:a", `{"plan":"pro"}`, admin), 400, CodeInvalidArgument, "prefix")
	ts.want(ts.do("PUT", "/v1/prefix-rules/x", `{"plan":"nope"}`, admin), 404, CodeNotFound, "plan")
	ts.want(ts.do("PUT", "/v1/prefix-rules/x", `{}`, admin), 400, CodeInvalidArgument, "plan")
	if m := ts.do("GET", "/v1/prefix-rules/tenant:", "").json(t); m["plan"] != "pro" {
		t.Fatalf("get rule: %v", m)
	}
	if m := ts.do("POST", "/v1/check", `{"key":"tenant:acme"}`).json(t); m["plan"] != "pro" {
		t.Fatalf("rule check: %v", m)
	}
	if m := ts.do("GET", "/v1/keys/tenant:acme/plan", "").json(t); m["plan"] != "pro" || m["source"] != "prefix_rule" {
		t.Fatalf("key plan by rule: %v", m)
	}

	// Assignment beats the rule; consumption in shared limits carries over.
	ts.want(ts.do("PUT", "/v1/keys/tenant:acme/plan", `{"plan":"nope"}`, admin), 404, CodeNotFound, "plan")
	ts.want(ts.do("PUT", "/v1/keys/tenant:acme/plan", `{"plan":"free"}`), 401, CodeUnauthenticated, "")
	ts.want(ts.do("PUT", "/v1/keys/tenant:acme/plan", `{"plan":"free"}`, admin), 200, "", "")
	m = ts.do("POST", "/v1/check", `{"key":"tenant:acme","cost":0}`).json(t)
	if m["plan"] != "free" || num(t, m["limits"].([]any)[0].(map[string]any), "remaining") != 100-2 {
		t.Fatalf("assigned check: %v", m)
	}
	if m := ts.do("GET", "/v1/keys/tenant:acme/plan", "").json(t); m["source"] != "assignment" || m["assigned"] != "free" {
		t.Fatalf("key plan by assignment: %v", m)
	}
	// A key with a '/' reaches its sub-resources, encoded or not.
	ts.want(ts.do("PUT", "/v1/keys/org%2Fone/plan", `{"plan":"pro"}`, admin), 200, "", "")
	if m := ts.do("GET", "/v1/keys/org/one/plan", "").json(t); m["key"] != "org/one" || m["plan"] != "pro" {
		t.Fatalf("slash key: %v", m)
	}
	// Forward-auth without a policy uses the plan.
	r = ts.do("GET", "/v1/auth?key_source=header:X-Api-Key&cost=0", "", "X-Api-Key: tenant:acme")
	if m := r.json(t); (r.code != 200 && r.code != 429) || m["plan"] != "free" {
		t.Fatalf("auth: %d %s", r.code, r.body)
	}
	// check/all keeps its per-check limits.
	ts.want(ts.do("POST", "/v1/check/all", `{"checks":[{"key":"tenant:acme"}]}`), 400, CodeInvalidArgument, "checks[0].policy")

	ts.want(ts.do("DELETE", "/v1/keys/tenant:acme/plan", "", admin), 200, "", "")
	if m := ts.do("GET", "/v1/keys/tenant:acme/plan", "").json(t); m["source"] != "prefix_rule" {
		t.Fatalf("unassigned: %v", m)
	}
	ts.want(ts.do("DELETE", "/v1/prefix-rules/tenant:", "", admin), 200, "", "")
	ts.want(ts.do("DELETE", "/v1/prefix-rules/tenant:", "", admin), 404, CodeNotFound, "prefix")
	ts.want(ts.do("DELETE", "/v1/plans/default", "", admin), 200, "", "")
	ts.want(ts.do("POST", "/v1/check", `{"key":"tenant:acme"}`), 404, CodeNotFound, "policy")
	ts.want(ts.do("DELETE", "/v1/plans/free", "", admin), 200, "", "")
	// A dangling assignment answers not_found naming policy.
	ts.want(ts.do("PUT", "/v1/keys/k/plan", `{"plan":"pro"}`, admin), 200, "", "")
	ts.want(ts.do("DELETE", "/v1/plans/pro", "", admin), 200, "", "")
	ts.want(ts.do("POST", "/v1/check", `{"key":"k"}`), 404, CodeNotFound, "policy")
	// The reset and peek routes under /v1/keys still work.
	ts.want(ts.do("GET", "/v1/keys/k?policy=nope", ""), 404, CodeNotFound, "policy")
}

func TestBulkAssignRoute(t *testing.T) {
	ts, store := newPlanServer(t)
	ts.do("PUT", "/v1/plans/pro", proBody, admin)
	ts.do("PUT", "/v1/plans/free", freeBody, admin)
	ts.want(ts.do("POST", "/v1/plans/assignments", `{"key":"a","plan":"pro"}`), 401, CodeUnauthenticated, "")
	// A bad line is named, and nothing is partly applied.
	ts.want(ts.do("POST", "/v1/plans/assignments", "{\"key\":\"a\",\"plan\":\"pro\"}\n\n{\"key\":\"b\",\"plan\":\"nope\"}\n", admin), 400, CodeInvalidArgument, "lines[3].plan")
	ts.want(ts.do("POST", "/v1/plans/assignments", "{\"key\":\"a\",\"plan\":\"pro\"}\n{\"key\":\"b\"}\n", admin), 400, CodeInvalidArgument, "lines[2].plan")
	ts.want(ts.do("POST", "/v1/plans/assignments", "{\"key\":\"a\",\"plan\":\"pro\"}\n{\"key\":\"b\",\"plan\":\"pro\",\"x\":1}\n", admin), 400, CodeInvalidArgument, "lines[2].x")
	ts.want(ts.do("POST", "/v1/plans/assignments", "{\"key\":\"a\",\"plan\":\"pro\"}\nnot json\n", admin), 400, CodeInvalidArgument, "lines[2]")
	ts.want(ts.do("POST", "/v1/plans/assignments", "key,plan\na,pro\nb\n", admin, "Content-Type: text/csv"), 400, CodeInvalidArgument, "lines[3]")
	ts.want(ts.do("POST", "/v1/plans/assignments", "a,pro\n,free\n", admin, "Content-Type: text/csv"), 400, CodeInvalidArgument, "lines[2].key")
	ts.want(ts.do("POST", "/v1/plans/assignments", "", admin), 400, CodeInvalidArgument, "lines")
	if kp, _ := store.KeyPlan("a"); kp.Plan != "" {
		t.Fatalf("a bad bulk body assigned %+v", kp)
	}
	// Bounded: lines and bytes.
	ts.want(ts.do("POST", "/v1/plans/assignments", strings.Repeat("k,pro\n", nodeapi.MaxAssignLines+1), admin, "Content-Type: text/csv"), 400, CodeInvalidArgument, "lines")
	ts.want(ts.do("POST", "/v1/plans/assignments", strings.Repeat("x", nodeapi.MaxAssignBodySize+1), admin), 413, CodePayloadTooLarge, "")
	// JSON lines and CSV (a quoted key holds a comma).
	r := ts.do("POST", "/v1/plans/assignments", "{\"key\":\"a\",\"plan\":\"pro\"}\n{\"key\":\"b\",\"plan\":\"free\"}\n", admin)
	if m := r.json(t); r.code != 200 || num(t, m, "assigned") != 2 {
		t.Fatalf("json lines: %d %s", r.code, r.body)
	}
	ts.want(ts.do("POST", "/v1/plans/assignments", "key,plan\n\"c,1\",pro\nb,pro\n", admin, "Content-Type: text/csv"), 200, "", "")
	ts.want(ts.do("POST", "/v1/plans/assignments?format=csv", "d,free\n", admin), 200, "", "")
	ts.want(ts.do("POST", "/v1/plans/assignments?format=xml", "d,free\n", admin), 400, CodeInvalidArgument, "format")
	ts.want(ts.do("POST", "/v1/plans/assignments?dry_run=1", "d,free\n", admin), 400, CodeInvalidArgument, "dry_run")
	for key, want := range map[string]string{"a": "pro", "b": "pro", "c,1": "pro", "d": "free"} {
		if kp, _ := store.KeyPlan(key); kp.Plan != want {
			t.Fatalf("%s: %+v, want %s", key, kp, want)
		}
	}
}

func TestOverrideRoutes(t *testing.T) {
	ts, store := newPlanServer(t)
	ts.do("PUT", "/v1/plans/free", freeBody, admin)
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"limit":200000}}}`, admin), 404, CodeNotFound, "policy") // no plan yet
	ts.do("PUT", "/v1/keys/k/plan", `{"plan":"free"}`, admin)
	future := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"limit":200000}}}`), 401, CodeUnauthenticated, "")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"algorithm":"token_bucket"}}}`, admin), 400, CodeInvalidArgument, "limits.daily.algorithm")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"window":"1h"}}}`, admin), 400, CodeInvalidArgument, "limits.daily.window")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"limt":5}}}`, admin), 400, CodeInvalidArgument, "limits.daily.limt")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"limit":-5}}}`, admin), 400, CodeInvalidArgument, "limits.daily.limit")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"burst":5}}}`, admin), 400, CodeInvalidArgument, "limits.daily.burst")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"monthly":{"limit":5}}}`, admin), 400, CodeInvalidArgument, "limits.monthly")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"limit":5}},"expires":"2001-01-01T00:00:00Z"}`, admin), 400, CodeInvalidArgument, "expires")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"limit":5}},"expires":"soon"}`, admin), 400, CodeInvalidArgument, "expires")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{}}`, admin), 400, CodeInvalidArgument, "limits")
	ts.want(ts.do("GET", "/v1/keys/k/override", ""), 404, CodeNotFound, "key")

	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"limit":200000},"per_second":{"burst":7}},"expires":"`+future+`"}`, admin), 200, "", "")
	m := ts.do("POST", "/v1/check", `{"key":"k"}`).json(t)
	if m["overridden"] != true || num(t, m["limits"].([]any)[0].(map[string]any), "limit") != 200000 {
		t.Fatalf("overridden check: %v", m)
	}
	if m := ts.do("GET", "/v1/keys/k/override", "").json(t); m["expires"] != future {
		t.Fatalf("get override: %v", m)
	}
	// Expiry is decided by the leader's time in apply.
	store.Log.SetNow(time.Now().Add(48 * time.Hour).UnixNano())
	if m := ts.do("POST", "/v1/check", `{"key":"k"}`).json(t); m["overridden"] == true {
		t.Fatalf("expired override applied: %v", m)
	}
	ts.want(ts.do("DELETE", "/v1/keys/k/override", "", admin), 404, CodeNotFound, "key")
	ts.want(ts.do("PUT", "/v1/keys/k/override", `{"limits":{"daily":{"limit":9}}}`, admin), 200, "", "")
	ts.want(ts.do("DELETE", "/v1/keys/k/override", "", admin), 200, "", "")
}

func TestAdjustRoute(t *testing.T) {
	ts, _ := newPlanServer(t)
	ts.do("PUT", "/v1/plans/free", freeBody, admin)
	ts.do("PUT", "/v1/plans/logged", `{"limits":{"log":{"algorithm":"sliding_log","limit":5,"window":"1m"}}}`, admin)
	ts.do("PUT", "/v1/keys/k/plan", `{"plan":"free"}`, admin)
	ts.do("PUT", "/v1/keys/l/plan", `{"plan":"logged"}`, admin)
	ts.do("POST", "/v1/check", `{"key":"k","cost":2}`)
	ts.want(ts.do("POST", "/v1/keys/k/adjust", `{"limit":"daily","add":1,"request_id":"r1"}`), 401, CodeUnauthenticated, "")
	ts.want(ts.do("POST", "/v1/keys/k/adjust", `{"limit":"daily","add":1}`, admin), 400, CodeInvalidArgument, "request_id")
	ts.want(ts.do("POST", "/v1/keys/k/adjust", `{"limit":"daily","add":0,"request_id":"r0"}`, admin), 400, CodeInvalidArgument, "add")
	ts.want(ts.do("POST", "/v1/keys/k/adjust", `{"limit":"monthly","add":1,"request_id":"r0"}`, admin), 400, CodeInvalidArgument, "limit")
	ts.want(ts.do("POST", "/v1/keys/l/adjust", `{"limit":"log","add":1,"request_id":"r0"}`, admin), 400, CodeInvalidArgument, "limit")
	ts.want(ts.do("POST", "/v1/keys/nobody/adjust", `{"limit":"daily","add":1,"request_id":"r0"}`, admin), 404, CodeNotFound, "policy")
	ts.want(ts.do("POST", "/v1/keys/k/adjust", `{"limit":"daily","add":1,"request_id":"r0","x":1}`, admin), 400, CodeInvalidArgument, "x")
	for i, replayed := range []bool{false, true} {
		r := ts.do("POST", "/v1/keys/k/adjust", `{"limit":"daily","add":1,"request_id":"r1","by":"alice"}`, admin)
		m := r.json(t)
		if r.code != 200 || num(t, m, "adjusted") != 1 || num(t, m, "remaining") != 99 || (m["replayed"] == true) != replayed {
			t.Fatalf("adjust %d: %d %s", i, r.code, r.body)
		}
	}
	if m := ts.do("POST", "/v1/check", `{"key":"k","cost":0}`).json(t); num(t, m["limits"].([]any)[0].(map[string]any), "remaining") != 99 {
		t.Fatalf("after a credit applied once: %v", m)
	}
	r := ts.do("POST", "/v1/keys/k/adjust", `{"limit":"daily","add":-50,"request_id":"r2"}`, admin)
	if m := r.json(t); r.code != 200 || num(t, m, "adjusted") != -50 || num(t, m, "remaining") != 49 {
		t.Fatalf("debit: %d %s", r.code, r.body)
	}
	if n := testutilCount(t, "credited"); n < 1 {
		t.Fatalf("adjustments counted %v", n)
	}
}

func testutilCount(t *testing.T, result string) float64 {
	t.Helper()
	var m dto.Metric
	if err := adjustments.WithLabelValues(result).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
