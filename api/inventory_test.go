package api

import (
	"net/url"
	"strings"
	"testing"
)

func keysOf(t *testing.T, m map[string]any) []string {
	t.Helper()
	var ks []string
	for _, k := range m["keys"].([]any) {
		ks = append(ks, k.(map[string]any)["key"].(string))
	}
	return ks
}

func TestListKeysRoute(t *testing.T) {
	ts, _ := newPlanServer(t)
	ts.want(ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":10,"window":"1h"}`, admin), 200, "", "")
	for i, k := range []string{"user/3", "user/1", "team:1", "user/2"} {
		for range i + 1 {
			ts.want(ts.do("POST", "/v1/check", `{"key":"`+k+`","policy":"api"}`), 200, "", "")
		}
	}
	// Admin only: keys can be API keys.
	ts.want(ts.do("GET", "/v1/keys?policy=api", ""), 401, CodeUnauthenticated, "")

	r := ts.do("GET", "/v1/keys?policy=api", "", admin)
	ts.want(r, 200, "", "")
	m := r.json(t)
	if got := strings.Join(keysOf(t, m), ","); got != "team:1,user/1,user/2,user/3" || m["cursor"] != nil || num(t, m, "applied_index") <= 0 {
		t.Fatalf("all: %s", r.body)
	}
	k0 := m["keys"].([]any)[1].(map[string]any) // user/1: 2 checks
	if num(t, k0, "used") != 2 || num(t, k0, "remaining") != 8 || num(t, k0, "reset_after_ms") <= 0 || k0["refused"] != nil {
		t.Fatalf("user/1: %v", k0)
	}

	// Paging in key order, with a prefix.
	m = ts.do("GET", "/v1/keys?policy=api&prefix=user/&limit=2", "", admin).json(t)
	if got := strings.Join(keysOf(t, m), ","); got != "user/1,user/2" || m["cursor"] == nil {
		t.Fatalf("page 1: %v", m)
	}
	m = ts.do("GET", "/v1/keys?policy=api&prefix=user/&limit=2&cursor="+url.QueryEscape(m["cursor"].(string)), "", admin).json(t)
	if got := strings.Join(keysOf(t, m), ","); got != "user/3" || m["cursor"] != nil {
		t.Fatalf("page 2: %v", m)
	}
	// Sorted by use, then remaining.
	m = ts.do("GET", "/v1/keys?policy=api&sort=used&limit=3", "", admin).json(t)
	if got := strings.Join(keysOf(t, m), ","); got != "user/2,team:1,user/1" || m["cursor"] == nil {
		t.Fatalf("by used: %v", m)
	}
	m = ts.do("GET", "/v1/keys?policy=api&sort=used&limit=3&cursor="+url.QueryEscape(m["cursor"].(string)), "", admin).json(t)
	if got := strings.Join(keysOf(t, m), ","); got != "user/3" || m["cursor"] != nil {
		t.Fatalf("by used, page 2: %v", m)
	}
	m = ts.do("GET", "/v1/keys?policy=api&sort=remaining&limit=1", "", admin).json(t)
	if got := strings.Join(keysOf(t, m), ","); got != "user/2" {
		t.Fatalf("by remaining: %v", m)
	}
	m = ts.do("GET", "/v1/keys?policy=api&sort=refused", "", admin).json(t)
	if got := strings.Join(keysOf(t, m), ","); got != "team:1,user/1,user/2,user/3" {
		t.Fatalf("by refused (unknown: key order): %v", m)
	}
	// An empty listing is an empty array.
	r = ts.do("GET", "/v1/keys?policy=api&prefix=zzz", "", admin)
	if !strings.Contains(string(r.body), `"keys":[]`) {
		t.Fatalf("empty: %s", r.body)
	}

	// By plan limit.
	ts.want(ts.do("PUT", "/v1/plans/pro", proBody, admin), 200, "", "")
	ts.want(ts.do("PUT", "/v1/plans/solo", `{"limits":{"daily":{"algorithm":"fixed_window","limit":5,"window":"1h"}}}`, admin), 200, "", "")
	ts.want(ts.do("PUT", "/v1/prefix-rules/tenant:", `{"plan":"pro"}`, admin), 200, "", "")
	ts.want(ts.do("POST", "/v1/check", `{"key":"tenant:acme"}`), 200, "", "")
	m = ts.do("GET", "/v1/keys?plan=pro&plan_limit=daily", "", admin).json(t)
	if got := strings.Join(keysOf(t, m), ","); got != "tenant:acme" || num(t, m["keys"].([]any)[0].(map[string]any), "remaining") != 9999 {
		t.Fatalf("plan: %v", m)
	}
	ts.want(ts.do("GET", "/v1/keys?plan=solo", "", admin), 200, "", "")

	// Bad input: 400 naming the parameter; unknown names: 404 naming them.
	for _, c := range []struct{ query, field string }{
		{"", "policy"},
		{"policy=api&plan=pro", "plan"},
		{"policy=a%20b", "policy"},
		{"plan=a%20b", "plan"},
		{"policy=api&plan_limit=daily", "plan_limit"},
		{"plan=pro", "plan_limit"},
		{"plan=pro&plan_limit=a%20b", "plan_limit"},
		{"policy=api&prefix=" + strings.Repeat("x", 1025), "prefix"},
		{"policy=api&prefix=%FF", "prefix"},
		{"policy=api&sort=size", "sort"},
		{"policy=api&sort=", "sort"},
		{"policy=api&limit=0", "limit"},
		{"policy=api&limit=1001", "limit"},
		{"policy=api&limit=ten", "limit"},
		{"policy=api&limit=-1", "limit"},
		{"policy=api&cursor=", "cursor"},
		{"policy=api&cursor=%21%21", "cursor"},
		{"policy=api&cursor=" + strings.Repeat("A", 3000), "cursor"},
		{"policy=api&limit=1&limit=2", "limit"},
		{"policy=api&page=2", "page"},
	} {
		ts.want(ts.do("GET", "/v1/keys?"+c.query, "", admin), 400, CodeInvalidArgument, c.field)
	}
	// A cursor of another order.
	cur := ts.do("GET", "/v1/keys?policy=api&limit=1", "", admin).json(t)["cursor"].(string)
	ts.want(ts.do("GET", "/v1/keys?policy=api&sort=used&cursor="+url.QueryEscape(cur), "", admin), 400, CodeInvalidArgument, "cursor")
	ts.want(ts.do("GET", "/v1/keys?policy=nope", "", admin), 404, CodeNotFound, "policy")
	ts.want(ts.do("GET", "/v1/keys?plan=nope", "", admin), 404, CodeNotFound, "plan")
	ts.want(ts.do("GET", "/v1/keys?plan=pro&plan_limit=monthly", "", admin), 404, CodeNotFound, "plan_limit")
}
