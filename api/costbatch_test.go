package api

import (
	"strconv"
	"strings"
	"testing"
)

func results(t *testing.T, r response) []map[string]any {
	t.Helper()
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	raw, ok := r.json(t)["results"].([]any)
	if !ok {
		t.Fatalf("no results: %s", r.body)
	}
	out := make([]map[string]any, len(raw))
	for i := range raw {
		out[i] = raw[i].(map[string]any)
	}
	return out
}

func itemError(t *testing.T, m map[string]any) (code, field string) {
	t.Helper()
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("not an error: %v", m)
	}
	code, _ = e["code"].(string)
	field, _ = e["field"].(string)
	return code, field
}

// A release batch answers each item as POST /v1/release would, in order,
// from one log entry: freed slots, an invalid item naming its field, an
// unknown slot, a slot released twice in the batch (the second changes
// nothing). Sent again, it frees nothing more (exactly once on retries).
func TestReleaseBatchAnswersEachItemFromOneEntry(t *testing.T) {
	ts, store := newPlanServer(t)
	ts.want(ts.do("PUT", "/v1/policies/workers", `{"algorithm":"concurrency","limit":3,"hold":"30s"}`, admin), 200, "", "")
	var slots []string
	for i := 0; i < 3; i++ {
		m := ts.do("POST", "/v1/check", `{"key":"job","policy":"workers"}`).json(t)
		slots = append(slots, m["slot"].(string))
	}
	item := func(slot string) string { return `{"key":"job","policy":"workers","slot":"` + slot + `"}` }
	body := `{"releases":[` + strings.Join([]string{item(slots[0]), item(slots[1]), `{"key":"job","policy":"workers"}`,
		item("never"), item(slots[0])}, ",") + `]}`
	before := store.Log.Entries()
	rs := results(t, ts.do("POST", "/v1/release/batch", body))
	if got := store.Log.Entries() - before; got != 1 {
		t.Fatalf("%d log entries for one batch, want 1", got)
	}
	if len(rs) != 5 || rs[0]["released"] != true || rs[1]["released"] != true || rs[4]["released"] != false {
		t.Fatalf("results: %v", rs)
	}
	if num(t, rs[1], "remaining") != 2 || rs[0]["slot"] != slots[0] {
		t.Fatalf("item answers: %v", rs)
	}
	if c, f := itemError(t, rs[2]); c != "invalid_argument" || f != "releases[2].slot" {
		t.Fatalf("invalid item: %q on %q", c, f)
	}
	if c, f := itemError(t, rs[3]); c != "not_found" || f != "releases[3].slot" {
		t.Fatalf("unknown slot: %q on %q", c, f)
	}
	// The retry of the whole batch frees nothing more: the third slot is
	// still held.
	rs = results(t, ts.do("POST", "/v1/release/batch", body))
	if rs[0]["released"] != false || rs[1]["released"] != false {
		t.Fatalf("retried batch: %v", rs)
	}
	if m := ts.do("POST", "/v1/check", `{"key":"job","policy":"workers","cost":0}`).json(t); num(t, m, "remaining") != 2 {
		t.Fatalf("after the retry: %v", m)
	}
	// Renewals batch the same way.
	rs = results(t, ts.do("POST", "/v1/renew/batch", `{"renewals":[`+item(slots[2])+`,`+item(slots[0])+`]}`))
	if rs[0]["renewed"] != true || num(t, rs[0], "slot_expires_ms") != 30000 || rs[1]["renewed"] != false {
		t.Fatalf("renewals: %v", rs)
	}
}

// A settle batch settles each reservation exactly once, from one log entry;
// a retry replays every answer, a settle at another cost is a conflict
// naming the item's cost, and invalid items name their field.
func TestSettleBatchSettlesEachOnceFromOneEntry(t *testing.T) {
	ts, store := newPlanServer(t)
	ts.want(ts.do("PUT", "/v1/policies/tokens", `{"algorithm":"fixed_window","limit":100,"window":"1h"}`, admin), 200, "", "")
	reserve := func() string {
		m := ts.do("POST", "/v1/check", `{"key":"u","policy":"tokens","cost":30,"reserve":{"hold":"60s"}}`).json(t)
		return m["reservation"].(string)
	}
	r1, r2 := reserve(), reserve()
	item := func(rsv string, cost int) string {
		return `{"reservation":"` + rsv + `","cost":` + strconv.Itoa(cost) + `}`
	}
	body := `{"settles":[` + item(r1, 10) + `,` + item(r2, 40) + `,` + item("r1.nope", 1) + `,{"reservation":"` + r1 + `"}]}`
	before := store.Log.Entries()
	rs := results(t, ts.do("POST", "/v1/settle/batch", body))
	if got := store.Log.Entries() - before; got != 1 {
		t.Fatalf("%d log entries for one batch, want 1", got)
	}
	if num(t, rs[0], "credited") != 20 || num(t, rs[1], "credited") != -10 || rs[0]["replayed"] != nil {
		t.Fatalf("settles: %v", rs)
	}
	if c, f := itemError(t, rs[2]); c != "invalid_argument" || f != "settles[2].reservation" {
		t.Fatalf("bad token: %q on %q", c, f)
	}
	if c, f := itemError(t, rs[3]); c != "invalid_argument" || f != "settles[3].cost" {
		t.Fatalf("no cost: %q on %q", c, f)
	}
	remaining := func() int64 {
		return num(t, ts.do("POST", "/v1/check", `{"key":"u","policy":"tokens","cost":0}`).json(t), "remaining")
	}
	if got := remaining(); got != 50 { // 100 - 30 - 30 + 20 - 10
		t.Fatalf("remaining %d after the batch, want 50", got)
	}
	rs = results(t, ts.do("POST", "/v1/settle/batch", body))
	if rs[0]["replayed"] != true || rs[1]["replayed"] != true || num(t, rs[0], "credited") != 20 || remaining() != 50 {
		t.Fatalf("a retried batch: %v", rs)
	}
	rs = results(t, ts.do("POST", "/v1/settle/batch", `{"settles":[`+item(r1, 11)+`]}`))
	if c, f := itemError(t, rs[0]); c != "conflict" || f != "settles[0].cost" {
		t.Fatalf("another cost: %q on %q", c, f)
	}
}

// The batch envelope is bounded like /v1/check/batch and strict: no items,
// too many, an unknown member or malformed JSON is a 400 naming the field,
// and nothing is applied.
func TestCostBatchBounds(t *testing.T) {
	ts, store := newPlanServer(t)
	many := `{"releases":[` + strings.Repeat(`{"key":"k","policy":"p","slot":"s"},`, 1000) + `{"key":"k","policy":"p","slot":"s"}]}`
	before := store.Log.Entries()
	for _, c := range []struct{ path, body, field string }{
		{"/v1/release/batch", `{"releases":[]}`, "releases"},
		{"/v1/release/batch", `{}`, "releases"},
		{"/v1/release/batch", many, "releases"},
		{"/v1/renew/batch", `{"releases":[{"key":"k","policy":"p","slot":"s"}]}`, "releases"},
		{"/v1/settle/batch", `{"settles":[{"reservation":"x","cost":1}],"checks":[]}`, "checks"},
		{"/v1/settle/batch", `{"settles":[`, ""},
		{"/v1/settle/batch", `[]`, ""},
	} {
		r := ts.do("POST", c.path, c.body)
		if r.code != 400 {
			t.Fatalf("%s %.60s: %d %s", c.path, c.body, r.code, r.body)
		}
		if c.field != "" {
			if _, f, _ := r.errorBody(t); f != c.field {
				t.Fatalf("%s %.60s: field %q, want %q", c.path, c.body, f, c.field)
			}
		}
	}
	if store.Log.Entries() != before {
		t.Fatal("a refused batch reached the log")
	}
}

// The batch routes are guarded as their single routes are: what a browser
// may not do to /v1/release or /v1/settle it may not do to their batches.
func TestCostBatchRoutesGuardedLikeTheirSingleRoutes(t *testing.T) {
	ts := newTestServer(t, Config{AllowedHosts: []string{"127.0.0.1:8080"}})
	headers := [][]string{
		{"Content-Type: text/plain", "Origin: https://evil.example"},
		{"Content-Type: application/json", "Sec-Fetch-Site: cross-site"},
		{"Content-Type: application/json", "Origin: http://127.0.0.1:8080", "Sec-Fetch-Site: same-origin"},
	}
	for _, p := range [][2]string{{"/v1/release", "/v1/release/batch"}, {"/v1/renew", "/v1/renew/batch"}, {"/v1/settle", "/v1/settle/batch"}} {
		for _, h := range headers {
			single := guardDo(ts, "POST", "127.0.0.1:8080", p[0], `{}`, h...)
			batch := guardDo(ts, "POST", "127.0.0.1:8080", p[1], `{}`, h...)
			guarded := func(r response) bool { return r.code == 403 || r.code == 415 }
			if guarded(single) != guarded(batch) {
				t.Fatalf("%v: %s answered %d, %s %d %s", h, p[0], single.code, p[1], batch.code, batch.body)
			}
		}
	}
	// Across hosts (DNS rebinding), both are refused.
	for _, p := range []string{"/v1/release/batch", "/v1/settle/batch"} {
		if r := guardDo(ts, "POST", "rebind.evil.example:8080", p, `{}`, "Content-Type: application/json", "Origin: http://rebind.evil.example:8080"); r.code != 403 {
			t.Fatalf("%s across hosts: %d %s", p, r.code, r.body)
		}
	}
}

// The pair batches have their own "endpoint" label in
// limitd_http_responses_total; their single routes stay "other".
func TestPairBatchRoutesHaveTheirMetricsLabel(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/release/batch": "pair_batch", "/v1/renew/batch": "pair_batch", "/v1/settle/batch": "pair_batch",
		"/v1/release": "other", "/v1/settle/batch/x": "other",
	} {
		if got := routeNames[routeOf(path)]; got != want {
			t.Errorf("routeOf(%q) = %s, want %s", path, got, want)
		}
	}
}
