package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/service"
)

// TestAuthKeySources: each source finds the key where proxies put it, and
// counts it in the source's own name space ("ip:", "header:X-Api-Key:"...).
func TestAuthKeySources(t *testing.T) {
	cases := []struct {
		name, source, path string
		header             []string
		wantKey            string
	}{
		{"ip from X-Forwarded-For", "ip", "/v1/auth/api", []string{"X-Forwarded-For: 203.0.113.5, 10.0.0.1"}, "ip:203.0.113.5"},
		{"ip from the peer", "ip", "/v1/auth/api", nil, "ip:192.0.2.7"},
		{"header", "header:X-Api-Key", "/v1/auth/api", []string{"X-Api-Key: key-123"}, "header:X-Api-Key:key-123"},
		{"header, any case", "header:x-api-key", "/v1/auth/api", []string{"X-API-KEY: key-123"}, "header:X-Api-Key:key-123"},
		{"query", "query:api_key", "/v1/auth/api?api_key=abc", nil, "query:api_key:abc"},
		{"query via Traefik", "query:api_key", "/v1/auth/api?uri_header=X-Forwarded-Uri", []string{"X-Forwarded-Uri: /orders?api_key=from-traefik&x=1", "X-Original-URI: /?api_key=forged"}, "query:api_key:from-traefik"},
		{"query via nginx", "query:api_key", "/v1/auth/api", []string{"X-Original-URI: /orders?api_key=from-nginx"}, "query:api_key:from-nginx"},
		// nginx passes the client's own headers on; a forged one
		// of another name is never read.
		{"query via nginx, forged X-Forwarded-Uri", "query:api_key", "/v1/auth/api", []string{"X-Forwarded-Uri: /?api_key=VICTIM", "X-Original-URI: /orders?api_key=mine"}, "query:api_key:mine"},
		{"ip from a configured header", "ip", "/v1/auth/api?addr_header=X-Real-IP", []string{"X-Real-IP: 198.51.100.9", "X-Forwarded-For: 203.0.113.66"}, "ip:198.51.100.9"},
		{"per-request override", "ip", "/v1/auth/api?key_source=header:X-User", []string{"X-User: alice"}, "header:X-User:alice"},
		{"Envoy path suffix", "header:X-Api-Key", "/v1/auth/api/orders/17", []string{"X-Api-Key: envoy"}, "header:X-Api-Key:envoy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t, Config{AuthKeySource: c.source})
			ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1m"}, false)
			r := ts.do("GET", c.path, "", c.header...)
			if r.code != 200 {
				t.Fatalf("%d %s", r.code, r.body)
			}
			got := ts.store.checkCalls[0][0].Checks[0]
			if got.Key != c.wantKey || got.Policy != "api" || got.Cost != 1 {
				t.Fatalf("checked %+v, want key %q under api", got, c.wantKey)
			}
		})
	}
}

// TestAuthUntrustedHeadersIgnored: a key source reads only the configured
// URI and address headers; a request carrying its key only in another
// proxy's header has none (400), and the node's configuration picks the
// header.
func TestAuthUntrustedHeadersIgnored(t *testing.T) {
	ts := newTestServer(t, Config{AuthKeySource: "query:api_key"})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1m"}, false)
	if r := ts.do("GET", "/v1/auth/api", "", "X-Forwarded-Uri: /?api_key=VICTIM"); r.code != 400 || len(ts.store.checkCalls) != 0 {
		t.Fatalf("key only in X-Forwarded-Uri, default configuration: %d %s, want 400 and no check", r.code, r.body)
	}
	ts = newTestServer(t, Config{AuthKeySource: "query:api_key", AuthURIHeader: "x-forwarded-uri"})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1m"}, false)
	if r := ts.do("GET", "/v1/auth/api", "", "X-Forwarded-Uri: /?api_key=t", "X-Original-URI: /?api_key=forged"); r.code != 200 || ts.store.checkCalls[0][0].Checks[0].Key != "query:api_key:t" {
		t.Fatalf("AuthURIHeader X-Forwarded-Uri: %d %s %+v", r.code, r.body, ts.store.checkCalls)
	}
	if err := (Config{AuthURIHeader: "X-Bad Header"}).Validate(); err == nil {
		t.Fatal("a header name with a space validated")
	}
	if r := ts.do("GET", "/v1/auth/api?uri_header=a:b", ""); r.code != 400 || !strings.Contains(string(r.body), "uri_header") {
		t.Fatalf("?uri_header=a:b: %d %s, want 400 naming uri_header", r.code, r.body)
	}
}

// TestAuthDecisions: 200 while allowed, then 429 (or deny_status) with
// RateLimit headers and Retry-After; any method.
func TestAuthDecisions(t *testing.T) {
	ts := newTestServer(t, Config{AuthKeySource: "header:X-Api-Key"})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1m"}, false)
	for i, method := range []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"} {
		r := ts.do(method, "/v1/auth/api", "", "X-Api-Key: k")
		want := http.StatusOK
		if i >= 2 {
			want = http.StatusTooManyRequests
		}
		if r.code != want {
			t.Fatalf("%s #%d: %d, want %d: %s", method, i, r.code, want, r.body)
		}
		if r.header.Get("RateLimit-Policy") != `"api";q=2;w=60` || !strings.HasPrefix(r.header.Get("RateLimit"), `"api";r=`) {
			t.Fatalf("%s #%d: headers %v", method, i, r.header)
		}
		if (r.header.Get("Retry-After") != "") != (want != 200) {
			t.Fatalf("%s #%d: Retry-After %q", method, i, r.header.Get("Retry-After"))
		}
	}
	r := ts.do("GET", "/v1/auth/api?deny_status=403", "", "X-Api-Key: k")
	if r.code != http.StatusForbidden || r.header.Get("Retry-After") != "60" {
		t.Fatalf("deny_status=403: %d %v", r.code, r.header)
	}
	if m := r.json(t); m["allowed"] != false {
		t.Fatalf("body: %s", r.body)
	}
	// Another key has its own budget; cost is honoured.
	if r := ts.do("GET", "/v1/auth/api?cost=2", "", "X-Api-Key: other"); r.code != 200 {
		t.Fatalf("other key: %d", r.code)
	}
	if r := ts.do("GET", "/v1/auth/api", "", "X-Api-Key: other"); r.code != 429 {
		t.Fatalf("other key after cost 2: %d", r.code)
	}

	for _, c := range []struct {
		path   string
		header []string
		status int
		field  string
	}{
		{"/v1/auth/api", nil, 400, "header:X-Api-Key"},
		{"/v1/auth/api", []string{"X-Api-Key: " + strings.Repeat("x", service.MaxKeyBytes+1)}, 400, "header:X-Api-Key"},
		{"/v1/auth/api?deny_status=200", []string{"X-Api-Key: k"}, 400, "deny_status"},
		{"/v1/auth/api?deny_status=abc", []string{"X-Api-Key: k"}, 400, "deny_status"},
		{"/v1/auth/api?cost=-1", []string{"X-Api-Key: k"}, 400, "cost"},
		{"/v1/auth/api?colour=red", []string{"X-Api-Key: k"}, 400, "colour"},
		{"/v1/auth/api?key_source=cookie:x", []string{"X-Api-Key: k"}, 400, "key_source"},
		{"/v1/auth/a%20b", []string{"X-Api-Key: k"}, 400, "policy"},
		{"/v1/auth/ghost", []string{"X-Api-Key: k"}, 404, "policy"},
	} {
		r := ts.do("GET", c.path, "", c.header...)
		if r.code != c.status {
			t.Fatalf("%s: %d %s", c.path, r.code, r.body)
		}
		if _, field, _ := r.errorBody(t); field != c.field {
			t.Errorf("%s: field %q, want %q", c.path, field, c.field)
		}
	}
}

// TestAuthSuffixQueryIsTheClients: behind Envoy's ext_authz the original
// path and query follow the policy name, so a client must not be able to
// choose its key, its cost or the deny status there.
func TestAuthSuffixQueryIsTheClients(t *testing.T) {
	ts := newTestServer(t, Config{AuthKeySource: "ip"})
	ts.store.putPolicy(t, "one", algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"}, false)
	if r := ts.do("GET", "/v1/auth/one/x", ""); r.code != 200 {
		t.Fatalf("first request: %d %s", r.code, r.body)
	}
	for _, path := range []string{
		"/v1/auth/one/x?key_source=query:x&x=r4nd0m",
		"/v1/auth/one/x?key_source=header:X-Mine",
		"/v1/auth/one/x?cost=0",
		"/v1/auth/one/x?deny_status=418",
		"/v1/auth/one/x?anything=else",
	} {
		r := ts.do("GET", path, "", "X-Mine: fresh")
		if r.code != http.StatusTooManyRequests {
			t.Fatalf("%s: %d %s, want 429 (the limit of 1 is spent)", path, r.code, r.body)
		}
		got := ts.store.checkCalls[len(ts.store.checkCalls)-1][0].Checks[0]
		if got.Key != "ip:192.0.2.7" || got.Cost != 1 {
			t.Fatalf("%s: checked %+v, want the peer address at cost 1", path, got)
		}
	}
	// The configured query source still reads the original query.
	ts = newTestServer(t, Config{AuthKeySource: "query:api_key"})
	ts.store.putPolicy(t, "one", algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"}, false)
	if r := ts.do("GET", "/v1/auth/one/orders?api_key=k1&page=2", ""); r.code != 200 {
		t.Fatalf("query source behind a suffix: %d %s", r.code, r.body)
	}
	if got := ts.store.checkCalls[0][0].Checks[0]; got.Key != "query:api_key:k1" {
		t.Fatalf("checked %+v, want key k1", got)
	}
}

// TestAuthRepeatedKeyIsRefused: a key given twice is ambiguous (Go reads the
// first value, PHP and Rails the last: a random first value was never
// limited while the application used the second), so it answers 400 naming
// the source and counts nothing; and the same value from two sources never
// shares a budget.
func TestAuthRepeatedKeyIsRefused(t *testing.T) {
	cases := []struct {
		source, path string
		header       []string
	}{
		{"query:api_key", "/v1/auth/api?api_key=r4nd0m&api_key=victim", nil},
		{"query:api_key", "/v1/auth/api", []string{"X-Original-URI: /orders?api_key=r4nd0m&api_key=victim"}},
		{"query:api_key", "/v1/auth/api/orders?api_key=r4nd0m&api_key=victim", nil},
		{"header:X-Api-Key", "/v1/auth/api", []string{"X-Api-Key: r4nd0m", "X-Api-Key: victim"}},
	}
	for _, c := range cases {
		ts := newTestServer(t, Config{AuthKeySource: c.source})
		ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1m"}, false)
		r := ts.do("GET", c.path, "", c.header...)
		if r.code != 400 || !strings.Contains(string(r.body), `"field":"`+c.source+`"`) || len(ts.store.checkCalls) != 0 {
			t.Fatalf("%s %s %v: %d %s, want 400 naming the source and no check", c.source, c.path, c.header, r.code, r.body)
		}
	}
	// One value, two sources: two keys.
	ts := newTestServer(t, Config{AuthKeySource: "ip"})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1m"}, false)
	ts.do("GET", "/v1/auth/api", "", "X-Forwarded-For: 192.0.2.7")
	ts.do("GET", "/v1/auth/api?key_source=header:X-Api-Key", "", "X-Api-Key: 192.0.2.7")
	if len(ts.store.checkCalls) != 2 {
		t.Fatalf("%d checks, want 2", len(ts.store.checkCalls))
	}
	if a, b := ts.store.checkCalls[0][0].Checks[0].Key, ts.store.checkCalls[1][0].Checks[0].Key; a == b {
		t.Fatalf("ip and header:X-Api-Key both counted %q", a)
	}
}
