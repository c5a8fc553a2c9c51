package api

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"
	"time"
)

func TestUsageRoutesHistoryAndExport(t *testing.T) {
	ts, store := newPlanServer(t)
	store.Log.SetNow(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	// history is validated with the limit, named.
	ts.want(ts.do("PUT", "/v1/policies/api", `{"algorithm":"token_bucket","limit":10,"window":"1h","history":"2d"}`, admin), 400, CodeInvalidArgument, "history")
	ts.want(ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":10,"window":"1h","history":"banana"}`, admin), 400, CodeInvalidArgument, "history")
	ts.want(ts.do("PUT", "/v1/plans/free", `{"limits":{"daily":{"algorithm":"sliding_window","limit":10,"window":"1h","history":"2d"}}}`, admin), 400, CodeInvalidArgument, "limits.daily.history")
	ts.want(ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":3,"window":"1h","history":"2d"}`, admin), 200, "", "")
	if m := ts.do("GET", "/v1/policies/api", "").json(t); m["history"] != "2d" {
		t.Fatalf("policy: %v", m)
	}
	ts.want(ts.do("PUT", "/v1/plans/free", `{"limits":{"daily":{"algorithm":"fixed_window","limit":10,"calendar":"day","timezone":"UTC","history":"400d"}}}`, admin), 200, "", "")
	if m := ts.do("GET", "/v1/plans/free", "").json(t); m["limits"].(map[string]any)["daily"].(map[string]any)["history"] != "400d" {
		t.Fatalf("plan: %v", m)
	}
	for i := 0; i < 5; i++ { // 3 allowed, 2 refused
		ts.do("POST", "/v1/check", `{"key":"u/1","policy":"api"}`)
	}
	store.Log.Advance(time.Hour)
	ts.want(ts.do("POST", "/v1/check", `{"key":"u/1","policy":"api"}`), 200, "", "")

	ts.want(ts.do("GET", "/v1/usage?key=u/1&policy=api", ""), 401, CodeUnauthenticated, "")
	ts.want(ts.do("GET", "/v1/usage?policy=api", "", admin), 400, CodeInvalidArgument, "key")
	ts.want(ts.do("GET", "/v1/usage?key=u/1&policy=api&nope=1", "", admin), 400, CodeInvalidArgument, "nope")
	ts.want(ts.do("GET", "/v1/usage?key=u/1&policy=api&from=yesterday", "", admin), 400, CodeInvalidArgument, "from")
	m := ts.do("GET", "/v1/usage?key=u/1&policy=api", "", admin).json(t)
	ws := m["windows"].([]any)
	if len(ws) != 2 || m["history"] != "2d" {
		t.Fatalf("usage: %v", m)
	}
	w0, w1 := ws[0].(map[string]any), ws[1].(map[string]any)
	if num(t, w0, "used") != 3 || num(t, w0, "refused") != 2 || w0["start"] != "2026-12-01T10:00:00Z" || w0["current"] != nil {
		t.Fatalf("closed window: %v", w0)
	}
	if num(t, w1, "used") != 1 || w1["current"] != true {
		t.Fatalf("current window: %v", w1)
	}
	// sort=refused lists by the current window's refusals.
	if k := ts.do("GET", "/v1/keys?policy=api", "", admin).json(t)["keys"].([]any)[0].(map[string]any); num(t, k, "refused") != 0 {
		t.Fatalf("keys: %v", k)
	}

	// windows bounds the answer to the newest windows; what is no number is
	// refused naming the field (countParam, shared with top keys' limit).
	if ws := ts.do("GET", "/v1/usage?key=u/1&policy=api&windows=1", "", admin).json(t)["windows"].([]any); len(ws) != 1 {
		t.Fatalf("windows=1: %v", ws)
	}
	ts.want(ts.do("GET", "/v1/usage?key=u/1&policy=api&windows=two", "", admin), 400, CodeInvalidArgument, "windows")
	ts.want(ts.do("GET", "/v1/usage/export?policy=api&window=2026-12-01T11:30:00Z", "", admin), 400, CodeInvalidArgument, "window")
	ts.want(ts.do("GET", "/v1/usage/export?policy=api&window=2026-12-01T10:30:00Z&format=xml", "", admin), 400, CodeInvalidArgument, "format")
	r := ts.do("GET", "/v1/usage/export?policy=api&window=2026-12-01T10:30:00Z", "", admin)
	ts.want(r, 200, "", "")
	rows, err := csv.NewReader(bytes.NewReader(r.body)).ReadAll()
	if err != nil || len(rows) != 2 || strings.Join(rows[1], ",") != "u/1,3,2,2026-12-01T10:00:00Z,2026-12-01T11:00:00Z" {
		t.Fatalf("csv: %v %q", err, r.body)
	}
	r = ts.do("GET", "/v1/usage/export?policy=api&window=2026-12-01T10:30:00Z&format=jsonl", "", admin)
	lines := strings.Split(strings.TrimSpace(string(r.body)), "\n")
	if len(lines) != 2 || lines[1] != `{"key":"u/1","used":3,"refused":2}` {
		t.Fatalf("jsonl: %q", r.body)
	}
}

func TestTopKeysRoute(t *testing.T) {
	ts, store := newPlanServer(t)
	store.Log.SetNow(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	ts.want(ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":2,"window":"1h"}`, admin), 200, "", "")
	for _, k := range []string{"a", "b", "b", "b", "top"} {
		ts.do("POST", "/v1/check", `{"key":"`+k+`","policy":"api"}`)
	}
	ts.want(ts.do("GET", "/v1/keys/top?policy=api&window=5m", ""), 401, CodeUnauthenticated, "")
	m := ts.do("GET", "/v1/keys/top?policy=api&window=5m", "", admin).json(t)
	if ks := keysOf(t, m); strings.Join(ks, ",") != "b,a,top" || m["at"] != "2026-12-01T10:00:00Z" {
		t.Fatalf("allowed: %v", m)
	}
	m = ts.do("GET", "/v1/keys/top?policy=api&window=1h&by=refused", "", admin).json(t)
	if ks := keysOf(t, m); strings.Join(ks, ",") != "b" || num(t, m["keys"].([]any)[0].(map[string]any), "count") != 1 {
		t.Fatalf("refused: %v", m)
	}
	// Without window it is the key "top" peeked, as before.
	if m := ts.do("GET", "/v1/keys/top?policy=api", "").json(t); num(t, m["decision"].(map[string]any), "remaining") != 1 {
		t.Fatalf("peek of the key top: %v", m)
	}
	ts.want(ts.do("GET", "/v1/keys/top?policy=api&window=10m", "", admin), 400, CodeInvalidArgument, "window")
	ts.want(ts.do("GET", "/v1/keys/top?policy=api&window=5m&by=used", "", admin), 400, CodeInvalidArgument, "by")
	ts.want(ts.do("GET", "/v1/keys/top?policy=api&window=5m&limit=99", "", admin), 400, CodeInvalidArgument, "limit")
	ts.want(ts.do("GET", "/v1/keys/top?policy=api&window=5m&limit=ten", "", admin), 400, CodeInvalidArgument, "limit")
	ts.want(ts.do("GET", "/v1/keys/top?policy=nope&window=5m", "", admin), 404, CodeNotFound, "policy")
}
