package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestListsAndBansOnACluster: a deny and an allow list answer on every node
// (followers from their own replica), deny > allow, a CIDR entry matches
// only the address forward-auth derived, bad input names the field and
// changes nothing; a policy's on_exceed bans a key the limit refuses, the
// ban is listed and answered on every node, and DELETE lifts it.
func TestListsAndBansOnACluster(t *testing.T) {
	c := newAPICluster(t, 3)
	l := c.leader()
	f := (l + 1) % 3
	if st, b := c.do(l, http.MethodPut, "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"1h","on_exceed":{"ban":"10m","escalate":["1h","24h"],"forget_after":"7d"}}`); st != 200 {
		t.Fatalf("put policy: %d %s", st, b)
	}
	for body, field := range map[string]string{
		`{"kind":"deny","entries":[{"key":"a"},{"cidr":"10.0.0.0/8"},{"key":"b"},{"cidr":"300.0.0.0/8"}]}`: `"field":"entries[3].cidr"`,
		`{"kind":"block","entries":[]}`:                            `"field":"kind"`,
		`{"kind":"deny","entries":[{"key":"a"}],"policies":["x"]}`: `"field":"policies[0]"`,
	} {
		if st, b := c.do(l, http.MethodPut, "/v1/lists/bad", body); st != 400 || !strings.Contains(b, field) {
			t.Fatalf("PUT %s: %d %s, want 400 naming %s", body, st, b, field)
		}
	}
	if st, _ := c.do(l, http.MethodGet, "/v1/lists/bad", ""); st != 404 {
		t.Fatalf("a refused list was stored: %d", st)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/policies/open", `{"algorithm":"fixed_window","limit":1,"window":"1h"}`); st != 200 {
		t.Fatalf("put policy: %d %s", st, b)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/lists/blocked", `{"kind":"deny","entries":[{"key":"evil"},{"cidr":"192.0.2.0/24"}]}`); st != 200 {
		t.Fatalf("put deny: %d %s", st, b)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/lists/vip", `{"kind":"allow","entries":[{"prefix":"vip-"},{"key":"evil"}],"policies":["open"]}`); st != 200 {
		t.Fatalf("put allow: %d %s", st, b)
	}
	check := func(i int, key, policy string) string {
		t.Helper()
		_, b := c.do(i, http.MethodPost, "/v1/check", `{"key":"`+key+`","policy":"`+policy+`"}`)
		return b
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(check(f, "evil", "open"), `"reason":"denied"`) {
		if time.Now().After(deadline) {
			t.Fatal("the follower never denied a deny-listed key")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The lists were written in order, so a follower that denies "evil" may
	// not have applied "vip" yet: wait for the allow list too.
	for !strings.Contains(check(f, "vip-1", "open"), `"reason":"allowed"`) {
		if time.Now().After(deadline) {
			t.Fatal("the follower never allowed an allow-listed key")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		if b := check(f, "vip-1", "open"); !strings.Contains(b, `"allowed":true`) || !strings.Contains(b, `"reason":"allowed"`) {
			t.Fatalf("allow-listed check: %s", b)
		}
	}
	if b := check(f, "vip-1", "api"); strings.Contains(b, `"reason"`) {
		t.Fatalf("an allow list scoped to open answered under api: %s", b)
	}
	// A key that looks like a listed address is not one limitd derived.
	if b := check(l, "192.0.2.7", "open"); strings.Contains(b, `"reason"`) {
		t.Fatalf("a CIDR entry matched a client-supplied key: %s", b)
	}
	req, _ := http.NewRequest(http.MethodGet, c.URL(f)+"/v1/auth/open?key_source=ip&addr_header=X-Forwarded-For", nil)
	req.Header.Set("X-Forwarded-For", "192.0.2.9")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("forward-auth from a denied range: %d, want 403", resp.StatusCode)
	}
	if st, b := c.do(f, http.MethodGet, "/v1/lists", ""); st != 200 || !strings.Contains(b, `"name":"blocked"`) || !strings.Contains(b, `"name":"vip"`) {
		t.Fatalf("GET /v1/lists: %d %s", st, b)
	}

	// Bans.
	if b := check(l, "u1", "api"); !strings.Contains(b, `"allowed":true`) {
		t.Fatalf("first check: %s", b)
	}
	if b := check(l, "u1", "api"); !strings.Contains(b, `"reason":"banned"`) || !strings.Contains(b, `"retry_after_ms":600000`) {
		t.Fatalf("the refusal that bans: %s", b)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		b := check(f, "u1", "api")
		if strings.Contains(b, `"reason":"banned"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower does not answer the ban: %s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, b := c.do(f, http.MethodGet, "/v1/bans?limit=10", ""); st != 200 || !strings.Contains(b, `"key":"u1","policy":"api"`) || !strings.Contains(b, `"offences":1`) {
		t.Fatalf("GET /v1/bans: %d %s", st, b)
	}
	check(l, "u2", "api")
	check(l, "u2", "api")
	c.waitReady()
	st, b := c.do(l, http.MethodGet, "/v1/bans?limit=1", "")
	var page struct {
		Bans       []struct{ Key string }
		NextCursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(b), &page); st != 200 || err != nil || len(page.Bans) != 1 || page.Bans[0].Key != "u1" || page.NextCursor == "" {
		t.Fatalf("first page: %d %s", st, b)
	}
	st, b = c.do(l, http.MethodGet, "/v1/bans?limit=1&cursor="+page.NextCursor, "")
	page.NextCursor = ""
	if err := json.Unmarshal([]byte(b), &page); st != 200 || err != nil || len(page.Bans) != 1 || page.Bans[0].Key != "u2" || page.NextCursor != "" {
		t.Fatalf("second page: %d %s", st, b)
	}
	if st, b := c.do(f, http.MethodDelete, "/v1/bans/u1", ""); st != 200 {
		t.Fatalf("unban: %d %s", st, b)
	}
	if st, _ := c.do(f, http.MethodDelete, "/v1/bans/u1", ""); st != 404 {
		t.Fatalf("second unban: %d, want 404", st)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/policies/x", `{"algorithm":"fixed_window","limit":1,"window":"1h","on_exceed":{"ban":"1h","escalate":["2h","1h"]}}`); st != 400 || !strings.Contains(b, `"field":"on_exceed.escalate[1]"`) {
		t.Fatalf("bad escalation: %d %s", st, b)
	}
	if st, b := c.do(l, http.MethodGet, "/v1/policies/api", ""); !strings.Contains(b, `"on_exceed":{"ban":"10m","escalate":["1h","1d"],"forget_after":"7d"}`) {
		t.Fatalf("GET policy: %d %s", st, b)
	}
}
