package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitd/limitd/algo"
)

// guardDo sends a request with a Host of its own.
func guardDo(ts *testServer, method, host, path, body string, header ...string) response {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = host
	for _, h := range header {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(k, strings.TrimSpace(v))
	}
	rec := httptest.NewRecorder()
	ts.h.ServeHTTP(rec, req)
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

const joinBody = `{"id":"evil","raft_addr":"203.0.113.9:8300","http_addr":"203.0.113.9:8080"}`

// A web page cannot act on a node: a cross-site POST /v1/cluster/join with a
// text/plain body (no CORS preflight) had added the attacker's voter to a
// default node, and a page on a rebound name reached a token-less node as
// its own origin. Each is refused naming the header, and nothing reaches the
// cluster; curl (no Origin, no Sec-Fetch-*) and the status page's own
// same-origin JSON calls still work.
func TestBrowsersCannotActOnANode(t *testing.T) {
	ts := newTestServer(t, Config{AllowedHosts: []string{"127.0.0.1:8080", "limitd-0.limitd:8080"}})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1m"}, false)
	refused := []struct {
		name, method, host, path, body string
		header                         []string
		status                         int
		field                          string
	}{
		{"cross-site join, text/plain", "POST", "127.0.0.1:8080", "/v1/cluster/join", joinBody,
			[]string{"Content-Type: text/plain", "Origin: https://evil.example"}, 403, "Origin"},
		{"join, text/plain, no Origin (an old browser)", "POST", "127.0.0.1:8080", "/v1/cluster/join", joinBody,
			[]string{"Content-Type: text/plain;charset=UTF-8"}, 415, "Content-Type"},
		{"join from a form, same origin", "POST", "127.0.0.1:8080", "/v1/cluster/join", joinBody,
			[]string{"Content-Type: application/x-www-form-urlencoded", "Sec-Fetch-Site: same-origin", "Origin: http://127.0.0.1:8080"}, 415, "Content-Type"},
		{"cross-site, Sec-Fetch-Site only", "POST", "127.0.0.1:8080", "/v1/cluster/join", joinBody,
			[]string{"Content-Type: application/json", "Sec-Fetch-Site: cross-site"}, 403, "Sec-Fetch-Site"},
		{"Origin null", "PUT", "127.0.0.1:8080", "/v1/policies/x", `{"algorithm":"fixed_window","limit":1,"window":"1s"}`,
			[]string{"Content-Type: application/json", "Origin: null"}, 403, "Origin"},
		{"cross-site check spends a victim's budget", "POST", "127.0.0.1:8080", "/v1/check", `{"key":"victim","policy":"api"}`,
			[]string{"Content-Type: text/plain", "Origin: https://evil.example"}, 403, "Origin"},
		{"DNS rebinding", "POST", "rebind.evil.example:8080", "/v1/cluster/join", joinBody,
			[]string{"Content-Type: application/json", "Origin: http://rebind.evil.example:8080"}, 403, "Host"},
		{"DNS rebinding, a read", "GET", "rebind.evil.example:8080", "/v1/cluster", "", nil, 403, "Host"},
	}
	for _, c := range refused {
		r := guardDo(ts, c.method, c.host, c.path, c.body, c.header...)
		if r.code != c.status {
			t.Fatalf("%s: %d %s, want %d", c.name, r.code, r.body, c.status)
		}
		if _, field, _ := r.errorBody(t); field != c.field {
			t.Fatalf("%s: field %q, want %q", c.name, field, c.field)
		}
	}
	if len(ts.store.joins) != 0 || len(ts.store.checkCalls) != 0 {
		t.Fatalf("refused requests reached the cluster: joins %v, checks %d", ts.store.joins, len(ts.store.checkCalls))
	}
	allowed := []struct {
		name, method, host, path, body string
		header                         []string
	}{
		{"curl -d (form type, no browser)", "POST", "127.0.0.1:8080", "/v1/cluster/join", joinBody,
			[]string{"Content-Type: application/x-www-form-urlencoded"}},
		{"the status page: same origin, JSON", "PUT", "127.0.0.1:8080", "/v1/policies/ui", `{"algorithm":"fixed_window","limit":1,"window":"1s"}`,
			[]string{"Content-Type: application/json", "Origin: http://127.0.0.1:8080", "Sec-Fetch-Site: same-origin"}},
		{"a configured name", "GET", "limitd-0.limitd:8080", "/v1/cluster", "", nil},
		{"localhost", "GET", "localhost:8080", "/v1/cluster", "", nil},
		{"an IP address", "GET", "[::1]:8080", "/v1/cluster", "", nil},
		{"a check with curl -d", "POST", "10.1.2.3:8080", "/v1/check", `{"key":"k","policy":"api"}`,
			[]string{"Content-Type: application/x-www-form-urlencoded"}},
		{"forward-auth through a proxy, any Host and Origin", "GET", "shop.example", "/v1/auth/api", "",
			[]string{"X-Forwarded-For: 192.0.2.1", "Origin: https://shop.example"}},
		{"forward-auth, the original POST", "POST", "shop.example", "/v1/auth/api/cart", "",
			[]string{"X-Forwarded-For: 192.0.2.1", "Origin: https://other.example", "Content-Type: text/plain"}},
	}
	for _, c := range allowed {
		r := guardDo(ts, c.method, c.host, c.path, c.body, c.header...)
		if r.code == http.StatusForbidden || r.code == http.StatusUnsupportedMediaType {
			t.Fatalf("%s: %d %s", c.name, r.code, r.body)
		}
	}
	if len(ts.store.joins) != 1 {
		t.Fatalf("curl's join did not reach the cluster: %v", ts.store.joins)
	}
	// With an admin token the Host rule is off (the token is what guards).
	tok := newTestServer(t, Config{AdminToken: "s3cret", AllowedHosts: []string{"127.0.0.1:8080"}})
	if r := guardDo(tok, "GET", "limitd.example", "/v1/cluster", ""); r.code != 200 {
		t.Fatalf("a named Host with a token: %d %s", r.code, r.body)
	}
}
