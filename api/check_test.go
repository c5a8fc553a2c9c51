package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

const fw3 = `{"algorithm":"fixed_window","limit":3,"window":"60s"}`

// TestCheckUntilRefused walks a fixed window of 3 per minute from 15 s (plus
// half a millisecond) into the window: the times left until the window ends
// are 44.9995 s, reported rounded up (45000 ms, 45 s) so that retrying then
// succeeds.
func TestCheckUntilRefused(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.advance(15*time.Second + 500*time.Microsecond)
	body := `{"key":"user:42","limit":` + fw3 + `}`
	for i, want := range []struct {
		allowed   bool
		remaining int64
	}{{true, 2}, {true, 1}, {true, 0}, {false, 0}} {
		r := ts.do("POST", "/v1/check", body)
		if r.code != http.StatusOK {
			t.Fatalf("check %d: status %d: %s", i, r.code, r.body)
		}
		m := r.json(t)
		if m["allowed"] != want.allowed || num(t, m, "remaining") != want.remaining || num(t, m, "limit") != 3 {
			t.Fatalf("check %d: got %s, want allowed=%v remaining=%d", i, r.body, want.allowed, want.remaining)
		}
		if got := num(t, m, "reset_after_ms"); got != 45000 {
			t.Errorf("check %d: reset_after_ms = %d, want 45000 (44999.5 rounded up)", i, got)
		}
		wantRetry := int64(0)
		if !want.allowed {
			wantRetry = 45000
		}
		if got := num(t, m, "retry_after_ms"); got != wantRetry {
			t.Errorf("check %d: retry_after_ms = %d, want %d", i, got, wantRetry)
		}
		if num(t, m, "delay_ms") != 0 {
			t.Errorf("check %d: delay_ms = %v", i, m["delay_ms"])
		}
		if _, ok := m["shadow_refused"]; ok {
			t.Errorf("check %d: shadow_refused present though false: %s", i, r.body)
		}
		if _, ok := m["replayed"]; ok {
			t.Errorf("check %d: replayed present though false: %s", i, r.body)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"inline";q=3;w=60` {
			t.Errorf("check %d: RateLimit-Policy = %q", i, got)
		}
		if got, w := r.header.Get("RateLimit"), fmt.Sprintf(`"inline";r=%d;t=45`, want.remaining); got != w {
			t.Errorf("check %d: RateLimit = %q, want %q", i, got, w)
		}
		ra := r.header.Get("Retry-After")
		if want.allowed && ra != "" || !want.allowed && ra != "45" {
			t.Errorf("check %d: Retry-After = %q (allowed=%v)", i, ra, want.allowed)
		}
	}
	// The next window opens exactly when promised.
	ts.store.advance(44999500 * time.Microsecond)
	if m := ts.do("POST", "/v1/check", body).json(t); m["allowed"] != true {
		t.Fatalf("after retry_after: %v", m)
	}
}

func TestCheckDefaultsAndCost(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1m"}, false)
	cases := []struct {
		body      string
		remaining int64
		cost      int64
	}{
		{`{"key":"k","policy":"api"}`, 9, 1},             // cost defaults to 1
		{`{"key":"k","policy":"api","cost":null}`, 8, 1}, // null is the default too
		{`{"key":"k","policy":"api","cost":3}`, 5, 3},
		{`{"key":"k","policy":"api","cost":0}`, 5, 0}, // a peek consumes nothing
	}
	for _, c := range cases {
		r := ts.do("POST", "/v1/check", c.body)
		m := r.json(t)
		if r.code != 200 || num(t, m, "remaining") != c.remaining {
			t.Errorf("%s: %d %s, want remaining %d", c.body, r.code, r.body, c.remaining)
		}
		last := ts.store.checkCalls[len(ts.store.checkCalls)-1]
		if got := last[0].Checks[0].Cost; got != c.cost {
			t.Errorf("%s: cost sent to the store = %d, want %d", c.body, got, c.cost)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"api";q=10;w=60` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
	}
	// A cost that can never fit is refused with retry_after_ms -1 and no Retry-After.
	r := ts.do("POST", "/v1/check", `{"key":"k","policy":"api","cost":11}`)
	m := r.json(t)
	if m["allowed"] != false || num(t, m, "retry_after_ms") != -1 {
		t.Fatalf("cost over the limit: %s", r.body)
	}
	if ra := r.header.Get("Retry-After"); ra != "" {
		t.Fatalf("Retry-After %q for a request that can never succeed", ra)
	}
}

// TestCheckInputErrors covers every class of bad input: the status, the
// code and the field the error names.
func TestCheckInputErrors(t *testing.T) {
	longKey := strings.Repeat("k", service.MaxKeyBytes+1)
	longID := strings.Repeat("r", service.MaxRequestIDBytes+1)
	cases := []struct {
		name, body string
		status     int
		code       string
		field      string
	}{
		{"empty body", ``, 400, CodeInvalidArgument, ""},
		{"malformed", `{"key":`, 400, CodeInvalidArgument, ""},
		{"syntax error", `{"key" "k"}`, 400, CodeInvalidArgument, ""},
		{"not an object", `["k"]`, 400, CodeInvalidArgument, ""},
		{"trailing data", `{"key":"k","limit":` + fw3 + `} {}`, 400, CodeInvalidArgument, ""},
		{"unknown field", `{"key":"k","limit":` + fw3 + `,"kee":1}`, 400, CodeInvalidArgument, "kee"},
		{"unknown limit field", `{"key":"k","limit":{"algorithm":"fixed_window","limit":3,"windw":"1s"}}`, 400, CodeInvalidArgument, "limit.windw"},
		{"key wrong type", `{"key":42,"limit":` + fw3 + `}`, 400, CodeInvalidArgument, "key"},
		{"cost wrong type", `{"key":"k","cost":"1","limit":` + fw3 + `}`, 400, CodeInvalidArgument, "cost"},
		{"cost fraction", `{"key":"k","cost":1.5,"limit":` + fw3 + `}`, 400, CodeInvalidArgument, "cost"},
		{"cost overflow", `{"key":"k","cost":1e40,"limit":` + fw3 + `}`, 400, CodeInvalidArgument, "cost"},
		{"negative cost", `{"key":"k","cost":-1,"limit":` + fw3 + `}`, 400, CodeInvalidArgument, "cost"},
		{"missing key", `{"limit":` + fw3 + `}`, 400, CodeInvalidArgument, "key"},
		{"empty key", `{"key":"","limit":` + fw3 + `}`, 400, CodeInvalidArgument, "key"},
		{"key too long", `{"key":"` + longKey + `","limit":` + fw3 + `}`, 400, CodeInvalidArgument, "key"},
		{"request_id too long", `{"key":"k","request_id":"` + longID + `","limit":` + fw3 + `}`, 400, CodeInvalidArgument, "request_id"},
		{"no limit and no plan", `{"key":"k"}`, 404, CodeNotFound, "policy"},
		{"policy and limit", `{"key":"k","policy":"api","limit":` + fw3 + `}`, 400, CodeInvalidArgument, "limit"},
		{"bad policy name", `{"key":"k","policy":"a b"}`, 400, CodeInvalidArgument, "policy"},
		{"limit wrong type", `{"key":"k","limit":"60s"}`, 400, CodeInvalidArgument, "limit"},
		{"limit.window wrong type", `{"key":"k","limit":{"algorithm":"fixed_window","limit":3,"window":60}}`, 400, CodeInvalidArgument, "limit.window"},
		{"unknown algorithm", `{"key":"k","limit":{"algorithm":"leaky","limit":3,"window":"1s"}}`, 400, CodeInvalidArgument, "limit.algorithm"},
		{"bad window", `{"key":"k","limit":{"algorithm":"fixed_window","limit":3,"window":"-5s"}}`, 400, CodeInvalidArgument, "limit.window"},
		{"bad limit", `{"key":"k","limit":{"algorithm":"fixed_window","limit":0,"window":"5s"}}`, 400, CodeInvalidArgument, "limit.limit"},
		{"unknown policy", `{"key":"k","policy":"nope"}`, 404, CodeNotFound, "policy"},
	}
	ts := newTestServer(t, Config{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := len(ts.store.checkCalls)
			r := ts.do("POST", "/v1/check", c.body)
			if r.code != c.status {
				t.Fatalf("status %d, want %d: %s", r.code, c.status, r.body)
			}
			code, field, _ := r.errorBody(t)
			if code != c.code || field != c.field {
				t.Fatalf("code %q field %q, want %q %q: %s", code, field, c.code, c.field, r.body)
			}
			if c.status == 400 && len(ts.store.checkCalls) != calls {
				t.Fatalf("an invalid request reached the store")
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	ts := newTestServer(t, Config{})
	pad := strings.Repeat(" ", DefaultMaxBodyBytes)
	for _, path := range []string{"/v1/check", "/v1/check/batch", "/v1/check/all"} {
		r := ts.do("POST", path, `{"key":"k",`+pad+`"limit":`+fw3+`}`)
		if r.code != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s: status %d: %s", path, r.code, r.body)
		}
		if code, _, _ := r.errorBody(t); code != CodePayloadTooLarge {
			t.Fatalf("%s: code %q", path, code)
		}
	}
	// Just under the limit is fine.
	body := `{"key":"k","limit":` + fw3 + `}`
	body += strings.Repeat(" ", DefaultMaxBodyBytes-len(body))
	if r := ts.do("POST", "/v1/check", body); r.code != 200 {
		t.Fatalf("body of exactly the limit: %d %s", r.code, r.body)
	}
}

// TestStoreErrors maps each failure of the store to its answer.
func TestStoreErrors(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		block      bool
		status     int
		code       string
		retryAfter string
	}{
		{"no leader", nodeapi.ErrNoLeader, false, 503, CodeUnavailable, "2"},
		{"wrapped no leader", fmt.Errorf("forward: %w", nodeapi.ErrNoLeader), false, 503, CodeUnavailable, "2"},
		{"outcome unknown", nodeapi.ErrOutcomeUnknown, false, 503, CodeOutcomeUnknown, "2"},
		{"deadline", nil, true, 503, CodeUnavailable, "2"},
		{"other", errors.New("disk on fire"), false, 500, CodeInternal, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t, Config{NoLeaderRetryAfter: 1500 * time.Millisecond}, service.Config{RequestTimeout: 20 * time.Millisecond})
			ts.store.checkErr, ts.store.blockCheck = c.err, c.block
			for _, path := range []string{"/v1/check", "/v1/check/all", "/v1/check/batch", "/v1/auth/api", "/v1/keys/k?policy=api"} {
				method, body := "POST", `{"checks":[{"key":"k","policy":"api"}]}`
				switch path {
				case "/v1/check":
					body = `{"key":"k","policy":"api"}`
				case "/v1/auth/api", "/v1/keys/k?policy=api":
					method, body = "GET", ""
				}
				r := ts.do(method, path, body, "X-Forwarded-For: 203.0.113.9")
				if r.code != c.status {
					t.Fatalf("%s: status %d, want %d: %s", path, r.code, c.status, r.body)
				}
				code, _, msg := r.errorBody(t)
				if code != c.code {
					t.Fatalf("%s: code %q, want %q", path, code, c.code)
				}
				if got := r.header.Get("Retry-After"); got != c.retryAfter {
					t.Fatalf("%s: Retry-After %q, want %q", path, got, c.retryAfter)
				}
				if c.code == CodeOutcomeUnknown && !strings.Contains(msg, "same request_id") {
					t.Fatalf("%s: outcome_unknown message does not say how to recover: %q", path, msg)
				}
			}
		})
	}
}

// TestPanicIsContained: a panicking store answers 500 and the server keeps serving.
func TestPanicIsContained(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.panicCheck = true
	r := ts.do("POST", "/v1/check", `{"key":"k","limit":`+fw3+`}`)
	if r.code != 500 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	if code, _, _ := r.errorBody(t); code != CodeInternal {
		t.Fatalf("code %q", code)
	}
	ts.store.panicCheck = false
	if r := ts.do("POST", "/v1/check", `{"key":"k","limit":`+fw3+`}`); r.code != 200 {
		t.Fatalf("after a panic: %d %s", r.code, r.body)
	}
}

// TestCheckAllAtomic: when one limit refuses, nothing is consumed in the others.
func TestCheckAllAtomic(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.putPolicy(t, "per_minute", algo.Config{Algorithm: "sliding_window", Limit: 5, Window: "1m"}, false)
	ts.store.putPolicy(t, "global", algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"}, false)
	body := `{"checks":[{"key":"user:1","policy":"per_minute"},{"key":"all","policy":"global","cost":1}]}`

	r := ts.do("POST", "/v1/check/all", body)
	m := r.json(t)
	if r.code != 200 || m["allowed"] != true {
		t.Fatalf("first: %d %s", r.code, r.body)
	}
	results := m["results"].([]any)
	if len(results) != 2 {
		t.Fatalf("results: %s", r.body)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"per_minute";q=5;w=60, "global";q=1;w=3600` {
		t.Fatalf("RateLimit-Policy = %q", got)
	}
	if got := r.header.Get("RateLimit"); got != `"per_minute";r=4;t=120, "global";r=0;t=3600` {
		t.Fatalf("RateLimit = %q", got)
	}

	// The global limit refuses: per_minute must keep its 4.
	for i := 0; i < 3; i++ {
		r = ts.do("POST", "/v1/check/all", body)
		m = r.json(t)
		if r.code != 200 || m["allowed"] != false {
			t.Fatalf("refused op: %d %s", r.code, r.body)
		}
		res := m["results"].([]any)
		perMinute, global := res[0].(map[string]any), res[1].(map[string]any)
		if perMinute["allowed"] != true || global["allowed"] != false {
			t.Fatalf("each limit's own decision: %s", r.body)
		}
		if r.header.Get("Retry-After") != "3600" {
			t.Fatalf("Retry-After = %q", r.header.Get("Retry-After"))
		}
	}
	peek := ts.do("GET", "/v1/keys/user:1?policy=per_minute", "").json(t)
	if got := num(t, peek["decision"].(map[string]any), "remaining"); got != 4 {
		t.Fatalf("per_minute remaining after refused ops = %d, want 4 (untouched)", got)
	}

	// An unknown policy fails the whole op, naming the check.
	r = ts.do("POST", "/v1/check/all", `{"checks":[{"key":"a","policy":"per_minute"},{"key":"b","policy":"missing"}]}`)
	if r.code != 404 {
		t.Fatalf("unknown policy: %d %s", r.code, r.body)
	}
	if code, field, _ := r.errorBody(t); code != CodeNotFound || field != "checks[1].policy" {
		t.Fatalf("unknown policy: %s", r.body)
	}
}

func TestCheckAllInputErrors(t *testing.T) {
	ts := newTestServer(t, Config{}, service.Config{MaxBatch: 3})
	inline := `{"key":"k","limit":` + fw3 + `}`
	cases := []struct {
		body, field string
	}{
		{`{}`, "checks"},
		{`{"checks":[]}`, "checks"},
		{`{"checks":[` + inline + `,` + inline + `,` + inline + `,` + inline + `]}`, "checks"},
		{`{"checks":[` + inline + `,{"key":"k","limit":{"algorithm":"fixed_window","limit":3,"window":"soon"}}]}`, "checks[1].limit.window"},
		{`{"checks":[` + inline + `,{"key":"","limit":` + fw3 + `}]}`, "checks[1].key"},
		{`{"checks":[` + inline + `,{"key":"k","limit":` + fw3 + `,"request_id":"x"}]}`, "checks[1].request_id"},
		{`{"checks":[` + inline + `,{"key":"k","cost":"2","limit":` + fw3 + `}]}`, "checks[1].cost"},
		{`{"checks":[` + inline + `,{"key":"k","bogus":1}]}`, "checks[1].bogus"},
		{`{"checks":[` + inline + `,7]}`, "checks[1]"},
		{`{"checks":{}}`, "checks"},
		{`{"checks":[` + inline + `],"extra":true}`, "extra"},
	}
	for _, c := range cases {
		r := ts.do("POST", "/v1/check/all", c.body)
		if r.code != 400 {
			t.Fatalf("%s: status %d: %s", c.body, r.code, r.body)
		}
		if _, field, _ := r.errorBody(t); field != c.field {
			t.Errorf("%s: field %q, want %q", c.body, field, c.field)
		}
	}
}

// TestBatch: independent decisions in order; an invalid entry gets its own
// error and the others are decided.
func TestBatch(t *testing.T) {
	ts := newTestServer(t, Config{}, service.Config{MaxBatch: 5})
	ts.store.putPolicy(t, "one", algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1m"}, false)
	body := `{"checks":[
		{"key":"a","policy":"one"},
		{"key":"","policy":"one"},
		{"key":"a","policy":"one"},
		{"key":"b","policy":"ghost"},
		{"key":"c","limit":{"algorithm":"token_bucket","limit":2,"window":"1s"},"cost":2}
	]}`
	r := ts.do("POST", "/v1/check/batch", body)
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	if r.header.Get("RateLimit") != "" {
		t.Fatalf("batch answers carry per-entry results, not RateLimit headers")
	}
	results := r.json(t)["results"].([]any)
	if len(results) != 5 {
		t.Fatalf("results: %s", r.body)
	}
	slot := func(i int) map[string]any { return results[i].(map[string]any) }
	if slot(0)["allowed"] != true || slot(2)["allowed"] != false || slot(4)["allowed"] != true {
		t.Fatalf("decisions out of order: %s", r.body)
	}
	for i, want := range map[int][2]string{1: {CodeInvalidArgument, "checks[1].key"}, 3: {CodeNotFound, "checks[3].policy"}} {
		e, ok := slot(i)["error"].(map[string]any)
		if !ok || e["code"] != want[0] || e["field"] != want[1] {
			t.Errorf("slot %d = %v, want error %v", i, slot(i), want)
		}
	}
	calls := ts.store.checkCalls[len(ts.store.checkCalls)-1]
	if len(calls) != 4 {
		t.Fatalf("the invalid entry was sent to the store: %d ops", len(calls))
	}
	for _, op := range calls {
		if op.All || len(op.Checks) != 1 {
			t.Fatalf("batch entries must be independent single-check ops: %+v", op)
		}
	}

	// Envelope errors fail the request.
	for _, c := range []struct{ body, field string }{
		{`{"checks":[]}`, "checks"},
		{`{"checks":[{},{},{},{},{},{}]}`, "checks"},
		{`{"checks":[{"key":"a","policy":"one"}],"request_id":"x"}`, "request_id"},
		{`{"check":[]}`, "check"},
	} {
		r := ts.do("POST", "/v1/check/batch", c.body)
		if r.code != 400 {
			t.Fatalf("%s: %d %s", c.body, r.code, r.body)
		}
		if _, field, _ := r.errorBody(t); field != c.field {
			t.Errorf("%s: field %q, want %q", c.body, field, c.field)
		}
	}

	// A batch of only invalid entries is answered without the store.
	calls0 := len(ts.store.checkCalls)
	r = ts.do("POST", "/v1/check/batch", `{"checks":[{"policy":"api"}]}`)
	if r.code != 200 || len(ts.store.checkCalls) != calls0 {
		t.Fatalf("all-invalid batch: %d %s", r.code, r.body)
	}
}

// TestRequestIDReplay: a retried request_id returns the first decision and
// consumes nothing more, for single checks, batches and check/all.
func TestRequestIDReplay(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.putPolicy(t, "p", algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1m"}, false)

	first := ts.do("POST", "/v1/check", `{"key":"k","policy":"p","cost":4,"request_id":"req-1"}`).json(t)
	again := ts.do("POST", "/v1/check", `{"key":"k","policy":"p","cost":4,"request_id":"req-1"}`)
	m := again.json(t)
	if m["replayed"] != true || num(t, m, "remaining") != num(t, first, "remaining") {
		t.Fatalf("replay: first %v, again %s", first, again.body)
	}
	batch := ts.do("POST", "/v1/check/batch", `{"checks":[{"key":"k","policy":"p","cost":4,"request_id":"req-1"},{"key":"k","policy":"p","cost":1,"request_id":"req-2"}]}`)
	res := batch.json(t)["results"].([]any)
	if res[0].(map[string]any)["replayed"] != true || res[1].(map[string]any)["replayed"] != nil {
		t.Fatalf("batch replay: %s", batch.body)
	}
	// 10 - 4 (req-1, once) - 1 (req-2) = 5.
	peek := ts.do("GET", "/v1/keys/k?policy=p", "").json(t)
	if got := num(t, peek["decision"].(map[string]any), "remaining"); got != 5 {
		t.Fatalf("remaining = %d, want 5: a replay was counted", got)
	}
	last := ts.store.checkCalls[len(ts.store.checkCalls)-2]
	if last[0].RequestID != "req-1" || last[1].RequestID != "req-2" {
		t.Fatalf("request ids not passed to the store: %+v", last)
	}

	all := `{"request_id":"req-3","checks":[{"key":"k","policy":"p"},{"key":"j","policy":"p"}]}`
	ts.do("POST", "/v1/check/all", all)
	r := ts.do("POST", "/v1/check/all", all)
	if m := r.json(t); m["replayed"] != true || m["allowed"] != true {
		t.Fatalf("check/all replay: %s", r.body)
	}
	// The same id for a request of another shape is a conflict, not a wrong answer.
	r = ts.do("POST", "/v1/check", `{"key":"k","policy":"p","request_id":"req-3"}`)
	if r.code != http.StatusConflict {
		t.Fatalf("reused id: %d %s", r.code, r.body)
	}
	if code, field, _ := r.errorBody(t); code != CodeConflict || field != "request_id" {
		t.Fatalf("reused id: %s", r.body)
	}
}

// TestRequestIDReuseRefused: an id reused for a request with another key,
// limit, policy or cost is refused with 409 naming the field, counts
// nothing, and the first request's retry is still replayed (otherwise ids
// restarted from 0 after a deploy were silently answered with old decisions).
func TestRequestIDReuseRefused(t *testing.T) {
	store := newFSMStore(t) // the real state machine's request table
	ts := &testServer{t: t, h: newAPI(store, Config{Logger: discardLogger()}).Handler()}
	for _, name := range []string{"api", "web"} {
		if r := ts.do("PUT", "/v1/policies/"+name, `{"algorithm":"fixed_window","limit":10,"window":"1m"}`); r.code != 200 {
			t.Fatalf("put %s: %d %s", name, r.code, r.body)
		}
	}
	const fw = `{"algorithm":"fixed_window","limit":10,"window":"1m"}`
	first := ts.do("POST", "/v1/check", `{"key":"A","policy":"api","request_id":"dup1"}`)
	if first.code != 200 {
		t.Fatalf("first: %d %s", first.code, first.body)
	}
	for _, tc := range []struct{ path, body, field string }{
		{"/v1/check", `{"key":"B","limit":` + fw + `,"cost":5,"request_id":"dup1"}`, "key"},
		{"/v1/check", `{"key":"A","policy":"web","request_id":"dup1"}`, "policy"},
		{"/v1/check", `{"key":"A","limit":` + fw + `,"request_id":"dup1"}`, "limit"},
		{"/v1/check", `{"key":"A","policy":"api","cost":2,"request_id":"dup1"}`, "cost"},
		{"/v1/check/batch", `{"checks":[{"key":"A","policy":"api","request_id":"fresh"},{"key":"A","policy":"api","cost":3,"request_id":"dup1"}]}`, "checks[1].cost"},
		{"/v1/check/all", `{"request_id":"dup1","checks":[{"key":"A","policy":"api"},{"key":"B","policy":"api"}]}`, "request_id"},
	} {
		r := ts.do("POST", tc.path, tc.body)
		if tc.path == "/v1/check/batch" {
			res := r.json(t)["results"].([]any)
			e, _ := res[1].(map[string]any)["error"].(map[string]any)
			if r.code != 200 || e["code"] != CodeConflict || e["field"] != tc.field {
				t.Fatalf("%s %s: %d %s, want a conflict on %s in results[1]", tc.path, tc.body, r.code, r.body, tc.field)
			}
			continue
		}
		if code, field, msg := r.errorBody(t); r.code != http.StatusConflict || code != CodeConflict || field != tc.field || !strings.Contains(msg, "request_id") {
			t.Fatalf("%s %s: %d %s, want 409 conflict on %s", tc.path, tc.body, r.code, r.body, tc.field)
		}
	}
	// Only the first request and the batch's fresh id counted.
	peek := ts.do("GET", "/v1/keys/A?policy=api", "").json(t)
	if got := num(t, peek["decision"].(map[string]any), "remaining"); got != 8 {
		t.Fatalf("remaining = %d, want 8: a refused reuse was counted", got)
	}
	again := ts.do("POST", "/v1/check", `{"key":"A","policy":"api","request_id":"dup1"}`)
	if m := again.json(t); again.code != 200 || m["replayed"] != true || num(t, m, "remaining") != num(t, first.json(t), "remaining") {
		t.Fatalf("true retry: %d %s, want the first decision replayed (%s)", again.code, again.body, first.body)
	}
}

func TestShadowPolicy(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.putPolicy(t, "dry", algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1m"}, true)
	ts.do("POST", "/v1/check", `{"key":"k","policy":"dry"}`)
	r := ts.do("POST", "/v1/check", `{"key":"k","policy":"dry"}`)
	m := r.json(t)
	if m["allowed"] != true || m["shadow_refused"] != true {
		t.Fatalf("shadow refusal: %s", r.body)
	}
	if r.header.Get("Retry-After") != "" {
		t.Fatalf("Retry-After on an allowed (shadow) answer")
	}
	metrics := string(ts.do("GET", "/metrics", "").body)
	for _, want := range []string{
		`limitd_checks_total{policy="dry",result="allowed"} 1`,
		`limitd_checks_total{policy="dry",result="shadow_refused"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestKeys: peek and reset, with keys that need percent-encoding.
func TestKeys(t *testing.T) {
	ts := newTestServer(t, Config{AdminToken: "s3cret"})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1m"}, false)
	ts.do("POST", "/v1/check", `{"key":"user/42","policy":"api","cost":2}`)

	for _, path := range []string{"/v1/keys/user%2F42?policy=api", "/v1/keys/user/42?policy=api"} {
		r := ts.do("GET", path, "")
		if r.code != 200 {
			t.Fatalf("%s: %d %s", path, r.code, r.body)
		}
		m := r.json(t)
		d := m["decision"].(map[string]any)
		if m["key"] != "user/42" || m["policy"] != "api" || num(t, d, "remaining") != 3 || d["allowed"] != true {
			t.Fatalf("%s: %s", path, r.body)
		}
		last := ts.store.checkCalls[len(ts.store.checkCalls)-1][0].Checks[0]
		if last.Cost != 0 || last.Key != "user/42" {
			t.Fatalf("%s: peek sent %+v, want cost 0 for key user/42", path, last)
		}
	}
	// Keys with '?', '%' and spaces survive percent-encoding.
	ts.do("GET", "/v1/keys/a%3Fb%25c%20d?policy=api", "")
	if got := ts.store.checkCalls[len(ts.store.checkCalls)-1][0].Checks[0].Key; got != "a?b%c d" {
		t.Fatalf("decoded key %q", got)
	}
	// Inline limits by query parameters.
	r := ts.do("GET", "/v1/keys/x?algorithm=token_bucket&limit=7&window=1s", "")
	if m := r.json(t); r.code != 200 || m["policy"] != "inline" || num(t, m["decision"].(map[string]any), "remaining") != 7 {
		t.Fatalf("inline peek: %d %s", r.code, r.body)
	}

	for _, c := range []struct{ path, field string }{
		{"/v1/keys/k", "policy"},
		{"/v1/keys/?policy=api", "key"},
		{"/v1/keys/k?policy=api&limit=3", "policy"},
		{"/v1/keys/k?algorithm=fixed_window&limit=x&window=1s", "limit"},
		{"/v1/keys/k?algorithm=fixed_window&limit=1&window=never", "window"},
		{"/v1/keys/k?policy=api&colour=red", "colour"},
	} {
		r := ts.do("GET", c.path, "")
		if r.code != 400 {
			t.Fatalf("%s: %d %s", c.path, r.code, r.body)
		}
		if _, field, _ := r.errorBody(t); field != c.field {
			t.Errorf("%s: field %q, want %q", c.path, field, c.field)
		}
	}

	// Reset: admin only; proposes exactly the reset command.
	if r := ts.do("DELETE", "/v1/keys/user%2F42?policy=api", ""); r.code != 401 {
		t.Fatalf("reset without token: %d", r.code)
	}
	r = ts.do("DELETE", "/v1/keys/user%2F42?policy=api", "", "Authorization: Bearer s3cret")
	if m := r.json(t); r.code != 200 || m["key"] != "user/42" || m["reset"] != true {
		t.Fatalf("reset: %d %s", r.code, r.body)
	}
	want := fsm.EncodeResetKey(fsm.Check{Key: "user/42", Policy: "api"})
	if got := ts.store.applied[len(ts.store.applied)-1]; string(got) != string(want) {
		t.Fatalf("reset proposed %x, want %x", got, want)
	}
	ts.store.applyResp = &fsm.Error{Code: "not_found", Field: "policy", Message: `no policy named "zzz"`}
	r = ts.do("DELETE", "/v1/keys/k?policy=zzz", "", "Authorization: Bearer s3cret")
	if code, field, _ := r.errorBody(t); r.code != 404 || code != CodeNotFound || field != "policy" {
		t.Fatalf("reset of unknown policy: %d %s", r.code, r.body)
	}
}

func TestMetrics(t *testing.T) {
	ts := newTestServer(t, Config{})
	for i := 0; i < 4; i++ {
		ts.do("POST", "/v1/check", `{"key":"k","limit":`+fw3+`}`)
	}
	ts.do("POST", "/v1/check", `{"key":"k","policy":"made-up-1"}`)
	ts.do("POST", "/v1/check", `{"key":"k","policy":"made-up-2"}`)
	r := ts.do("GET", "/metrics", "")
	if r.code != 200 {
		t.Fatalf("metrics: %d", r.code)
	}
	body := string(r.body)
	for _, want := range []string{
		`limitd_checks_total{policy="inline",result="allowed"} 3`,
		`limitd_checks_total{policy="inline",result="refused"} 1`,
		// Made-up policy names do not become label values.
		`limitd_checks_total{policy="unknown",result="error"} 2`,
		`limitd_check_duration_seconds_count{endpoint="check"} 6`,
		`limitd_test_store_collector_total 0`, // the store's collectors are registered
		`go_goroutines`,
		`process_`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(body, "made-up") {
		t.Errorf("unknown policy names leaked into labels")
	}
}

// TestRoutingErrors: unknown routes and wrong methods are JSON errors too.
func TestRoutingErrors(t *testing.T) {
	ts := newTestServer(t, Config{})
	r := ts.do("GET", "/v1/nope", "")
	if code, _, _ := r.errorBody(t); r.code != 404 || code != CodeNotFound {
		t.Fatalf("unknown route: %d %s", r.code, r.body)
	}
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/v1/check", "POST"},
		{"PUT", "/v1/check/batch", "POST"},
		{"POST", "/v1/policies/x", "DELETE, GET, PUT"},
		{"DELETE", "/v1/cluster", "GET"},
	} {
		r := ts.do(c.method, c.path, "")
		if r.code != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s: %d", c.method, c.path, r.code)
		}
		if code, _, _ := r.errorBody(t); code != CodeMethodNotAllowed {
			t.Fatalf("%s %s: code %q", c.method, c.path, code)
		}
		if !sameMethods(r.header.Get("Allow"), c.allow) {
			t.Errorf("%s %s: Allow = %q, want %q", c.method, c.path, r.header.Get("Allow"), c.allow)
		}
	}
	// The node's node-to-node endpoints are served beside the API, on the
	// same listener, as the daemon composes them; the API's own handler
	// does not mount them.
	if r := ts.do("POST", "/internal/v1/check", ""); r.code != http.StatusTeapot || r.header.Get("X-Fake-Internal") != "/internal/v1/check" {
		t.Fatalf("/internal/ not routed to the node: %d", r.code)
	}
	rec := httptest.NewRecorder()
	newAPI(newFakeStore(), Config{Logger: discardLogger()}).Server.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/internal/v1/check", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("the API's own handler answers /internal/ with %d; want 404 (not its route)", rec.Code)
	}
}

// sameMethods compares Allow values ignoring order and OPTIONS, which the
// router adds for its automatic OPTIONS answers.
func sameMethods(got, want string) bool {
	set := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" && p != "OPTIONS" {
				m[p] = true
			}
		}
		return m
	}
	g, w := set(got), set(want)
	if len(g) != len(w) {
		return false
	}
	for k := range w {
		if !g[k] {
			return false
		}
	}
	return true
}

// GET /healthcheck answers as envoyproxy/ratelimit's: 200 "OK" while the
// node serves, 500 with an empty body while it is not ready or unhealthy.
func TestEnvoyHealthcheck(t *testing.T) {
	ts := newTestServer(t, Config{})
	if r := ts.do("GET", "/healthcheck", ""); r.code != 200 || string(r.body) != "OK" {
		t.Fatalf("healthcheck: %d %q, want 200 OK", r.code, r.body)
	}
	ts.store.readyErr = errors.New("no leader")
	if r := ts.do("GET", "/healthcheck", ""); r.code != 500 || len(r.body) != 0 {
		t.Fatalf("healthcheck while not ready: %d %q, want 500 and no body", r.code, r.body)
	}
	ts.store.readyErr, ts.store.healthErr = nil, errors.New("disk full")
	if r := ts.do("GET", "/healthcheck", ""); r.code != 500 {
		t.Fatalf("healthcheck while unhealthy: %d %q, want 500", r.code, r.body)
	}
}

func TestHealthAndReady(t *testing.T) {
	ts := newTestServer(t, Config{})
	if r := ts.do("GET", "/healthz", ""); r.code != 200 {
		t.Fatalf("healthz: %d", r.code)
	}
	if r := ts.do("GET", "/readyz", ""); r.code != 200 || r.json(t)["ready"] != true {
		t.Fatalf("readyz: %d %s", r.code, r.body)
	}
	ts.store.readyErr = errors.New("applied index 10 behind commit index 50")
	r := ts.do("GET", "/readyz", "")
	if r.code != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("not ready: %d %s", r.code, r.body)
	}
	m := r.json(t)
	e, _ := m["error"].(map[string]any)
	if m["ready"] != false || e == nil || !strings.Contains(e["message"].(string), "behind commit index") {
		t.Fatalf("not ready body: %s", r.body)
	}
	// healthz does not depend on the cluster.
	if r := ts.do("GET", "/healthz", ""); r.code != 200 {
		t.Fatalf("healthz while not ready: %d", r.code)
	}
	// A node that can no longer serve (disk full, halted state machine) is
	// degraded: liveness fails, naming the cause, so a supervisor restarts it.
	ts.store.healthErr = errors.New("node unavailable: raft log write failed: no space left on device")
	r = ts.do("GET", "/healthz", "")
	m = r.json(t)
	e, _ = m["error"].(map[string]any)
	if r.code != 503 || m["status"] != "degraded" || e == nil || !strings.Contains(e["message"].(string), "no space left") {
		t.Fatalf("degraded healthz: %d %s", r.code, r.body)
	}
}

func TestToSeconds(t *testing.T) {
	cases := []struct {
		ns time.Duration
		s  int64
	}{
		{0, 0}, {1, 1}, {999_999, 1}, {1_000_000_000, 1}, {1_000_000_001, 2}, {algo.Never, 0},
	}
	for _, c := range cases {
		if got := toSeconds(c.ns); got != c.s {
			t.Errorf("toSeconds(%d) = %d, want %d", c.ns, got, c.s)
		}
	}
}

// TestUnknownQueryParameters: every endpoint refuses query parameters it does
// not know, naming the parameter, before doing anything (no silent ignoring).
func TestUnknownQueryParameters(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1m"}, false)
	check := `{"key":"k","policy":"api"}`
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/v1/check?dry_run=1", check, "dry_run"},
		{"POST", "/v1/check/all?zeta=1&alpha=2", `{"checks":[` + check + `]}`, "alpha"},
		{"POST", "/v1/check/batch?x", `{"checks":[` + check + `]}`, "x"},
		{"GET", "/v1/policies?limit=10", "", "limit"},
		{"GET", "/v1/policies/api?verbose=true", "", "verbose"},
		{"PUT", "/v1/policies/api?force=1", `{"algorithm":"fixed_window","limit":1,"window":"1s"}`, "force"},
		{"DELETE", "/v1/policies/api?force=1", "", "force"},
		{"GET", "/v1/keys/k?policy=api&x=1", "", "x"},
		{"DELETE", "/v1/keys/k?policy=api&x=1", "", "x"},
		{"GET", "/v1/cluster?full=1", "", "full"},
		{"GET", "/v1/cluster/digest?x=1", "", "x"},
		{"POST", "/v1/cluster/join?x=1", `{"id":"n3","raft_addr":"127.0.0.1:8302"}`, "x"},
		{"DELETE", "/v1/cluster/nodes/n2?x=1", "", "x"},
		{"GET", "/healthz?x=1", "", "x"},
		{"GET", "/readyz?x=1", "", "x"},
		{"GET", "/v1/auth/api?x=1", "", "x"},
	} {
		r := ts.do(c.method, c.path, c.body)
		if code, field, _ := r.errorBody(t); r.code != 400 || code != CodeInvalidArgument || field != c.field {
			t.Errorf("%s %s: %d %s, want 400 naming %q", c.method, c.path, r.code, r.body, c.field)
		}
	}
	if n := len(ts.store.checkCalls) + len(ts.store.applied) + len(ts.store.joins) + len(ts.store.removed); n != 0 {
		t.Fatalf("a refused request reached the store (%d calls)", n)
	}
}

// TestRateLimitHeadersBuckets: for token and leaky buckets RateLimit-Policy's
// q is the capacity, so that RateLimit's r never exceeds it.
func TestRateLimitHeadersBuckets(t *testing.T) {
	for _, alg := range []string{"token_bucket", "leaky_bucket"} {
		ts := newTestServer(t, Config{})
		body := `{"key":"k","limit":{"algorithm":"` + alg + `","limit":10,"burst":20,"window":"1s"}}`
		r := ts.do("POST", "/v1/check", body)
		if r.code != 200 {
			t.Fatalf("%s: %d %s", alg, r.code, r.body)
		}
		if got, want := r.header.Get("RateLimit-Policy"), `"inline";q=20;w=1`; got != want {
			t.Errorf("%s: RateLimit-Policy %q, want %q", alg, got, want)
		}
		if got, want := r.header.Get("RateLimit"), `"inline";r=19;t=`; !strings.HasPrefix(got, want) {
			t.Errorf("%s: RateLimit %q, want prefix %q", alg, got, want)
		}
		// Without a burst the capacity is the limit.
		r = ts.do("POST", "/v1/check", `{"key":"k","limit":{"algorithm":"`+alg+`","limit":10,"window":"1s"}}`)
		if got, want := r.header.Get("RateLimit-Policy"), `"inline";q=10;w=1`; got != want {
			t.Errorf("%s: RateLimit-Policy %q, want %q", alg, got, want)
		}
	}
}

// TestBurstZeroRefused: an explicit burst of 0 is a 400 naming the field,
// not a silent "use the default"; leaving burst out still gives
// the default.
func TestBurstZeroRefused(t *testing.T) {
	ts := newTestServer(t, Config{})
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/v1/check", `{"key":"k","limit":{"algorithm":"token_bucket","limit":10,"burst":0,"window":"1s"}}`, "limit.burst"},
		{"POST", "/v1/check/batch", `{"checks":[{"key":"k","limit":{"algorithm":"token_bucket","limit":10,"burst":0,"window":"1s"}}]}`, "checks[0].limit.burst"},
		{"PUT", "/v1/policies/b", `{"algorithm":"leaky_bucket","limit":10,"burst":0,"window":"1s"}`, "burst"},
		{"GET", "/v1/keys/k?algorithm=token_bucket&limit=10&burst=0&window=1s", "", "burst"},
	} {
		r := ts.do(c.method, c.path, c.body)
		var code, field string
		if c.path == "/v1/check/batch" {
			e := r.json(t)["results"].([]any)[0].(map[string]any)["error"].(map[string]any)
			code, field = e["code"].(string), e["field"].(string)
		} else {
			code, field, _ = r.errorBody(t)
		}
		if code != CodeInvalidArgument || field != c.field {
			t.Errorf("%s %s: %d %s, want invalid_argument on %q", c.method, c.path, r.code, r.body, c.field)
		}
	}
	r := ts.do("PUT", "/v1/policies/b", `{"algorithm":"token_bucket","limit":10,"window":"1s"}`)
	if r.code != 200 || num(t, r.json(t), "burst") != 10 {
		t.Fatalf("default burst: %d %s", r.code, r.body)
	}
	r = ts.do("PUT", "/v1/policies/b", `{"algorithm":"token_bucket","limit":10,"burst":25,"window":"1s"}`)
	if r.code != 200 || num(t, r.json(t), "burst") != 25 {
		t.Fatalf("explicit burst: %d %s", r.code, r.body)
	}
}

// ctxStore records the context error each Check of the store is given.
type ctxStore struct {
	*fakeStore
	errs []error
}

func (c *ctxStore) Check(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	c.errs = append(c.errs, ctx.Err())
	return c.fakeStore.Check(ctx, ops)
}

// TestCheckOutlivesClient: a check whose client has gone is still decided
// (docs/API.md: a disconnecting client does not cancel its check): the store
// gets a context without the request's cancellation.
func TestCheckOutlivesClient(t *testing.T) {
	store := &ctxStore{fakeStore: newFakeStore()}
	h := newAPI(store, Config{Logger: discardLogger()}).Handler()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"key":"k","limit":`+fw3+`}`)).WithContext(gone)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || len(store.errs) != 1 || store.errs[0] != nil {
		t.Fatalf("status %d %s, store saw context errors %v", rec.Code, rec.Body, store.errs)
	}
}

// TestRateLimitHeaderValues: a check response carries exactly one value for
// each RateLimit header, and Retry-After only when a wait helps: not on an
// allowed answer, not on a refusal that can never succeed (not even empty).
func TestRateLimitHeaderValues(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1m"}, false)
	for _, c := range []struct {
		body, rateLimit string
		retryAfter      []string
	}{
		{`{"key":"k","policy":"api"}`, `"api";r=0;t=60`, nil},
		{`{"key":"k","policy":"api","cost":2}`, `"api";r=0;t=60`, nil}, // can never fit
		{`{"key":"k","policy":"api"}`, `"api";r=0;t=60`, []string{"60"}},
	} {
		r := ts.do("POST", "/v1/check", c.body)
		if r.code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.body, r.code, r.body)
		}
		if got := r.header["Ratelimit-Policy"]; len(got) != 1 || got[0] != `"api";q=1;w=60` {
			t.Errorf("%s: RateLimit-Policy %q", c.body, got)
		}
		if got := r.header["Ratelimit"]; len(got) != 1 || got[0] != c.rateLimit {
			t.Errorf("%s: RateLimit %q, want %q", c.body, got, c.rateLimit)
		}
		if got, ok := r.header["Retry-After"]; ok != (c.retryAfter != nil) || strings.Join(got, "|") != strings.Join(c.retryAfter, "|") {
			t.Errorf("%s: Retry-After %q (present %v), want %q", c.body, got, ok, c.retryAfter)
		}
	}
}
