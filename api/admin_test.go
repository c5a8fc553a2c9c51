package api

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// TestAdminAuth: every admin endpoint needs the bearer token when one is set;
// reads and checks do not.
func TestAdminAuth(t *testing.T) {
	ts := newTestServer(t, Config{AdminToken: "t0ken"})
	ts.store.status = nodeapi.Status{Members: []nodeapi.Member{{ID: "n2"}}}
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1m"}, false)
	admin := []struct{ method, path, body string }{
		{"PUT", "/v1/policies/p", `{"algorithm":"fixed_window","limit":1,"window":"1s"}`},
		{"DELETE", "/v1/policies/p", ""},
		{"DELETE", "/v1/keys/k?policy=api", ""},
		{"POST", "/v1/cluster/join", `{"id":"n3","raft_addr":"127.0.0.1:8302","http_addr":"127.0.0.1:8082"}`},
		{"DELETE", "/v1/cluster/nodes/n2", ""},
	}
	for _, c := range admin {
		for _, auth := range []string{"", "Authorization: Bearer wrong", "Authorization: t0ken", "Authorization: Bearer t0ken0"} {
			var hdr []string
			if auth != "" {
				hdr = append(hdr, auth)
			}
			r := ts.do(c.method, c.path, c.body, hdr...)
			if r.code != http.StatusUnauthorized {
				t.Fatalf("%s %s with %q: %d %s", c.method, c.path, auth, r.code, r.body)
			}
			if code, _, _ := r.errorBody(t); code != CodeUnauthenticated {
				t.Fatalf("%s %s: code %q", c.method, c.path, code)
			}
			if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s %s: WWW-Authenticate = %q", c.method, c.path, r.header.Get("WWW-Authenticate"))
			}
		}
		if len(ts.store.applied)+len(ts.store.joins)+len(ts.store.removed) != 0 {
			t.Fatalf("%s %s: an unauthenticated admin request reached the store", c.method, c.path)
		}
	}
	for _, c := range admin {
		if r := ts.do(c.method, c.path, c.body, "Authorization: Bearer t0ken"); r.code != 200 {
			t.Fatalf("%s %s with the token: %d %s", c.method, c.path, r.code, r.body)
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/policies", ""},
		{"GET", "/v1/policies/api", ""},
		{"GET", "/v1/keys/k?policy=api", ""},
		{"GET", "/v1/cluster", ""},
		{"POST", "/v1/check", `{"key":"k","policy":"api"}`},
		{"GET", "/v1/auth/api", ""},
	} {
		if r := ts.do(c.method, c.path, c.body); r.code != 200 {
			t.Fatalf("%s %s needs no token: %d %s", c.method, c.path, r.code, r.body)
		}
	}
}

func TestPutPolicy(t *testing.T) {
	ts := newTestServer(t, Config{})
	r := ts.do("PUT", "/v1/policies/api", `{"algorithm":"token_bucket","limit":10,"window":"1m","shadow":true}`)
	if r.code != 200 {
		t.Fatalf("put: %d %s", r.code, r.body)
	}
	spec, err := algo.Config{Algorithm: "token_bucket", Limit: 10, Window: "1m"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	want := fsm.EncodePutPolicy(fsm.Policy{Name: "api", Spec: spec, Shadow: true})
	if got := ts.store.applied[0]; string(got) != string(want) {
		t.Fatalf("proposed %x, want %x", got, want)
	}
	m := r.json(t)
	if m["name"] != "api" || m["algorithm"] != "token_bucket" || num(t, m, "limit") != 10 || m["window"] != "1m0s" && m["window"] != "60s" && m["window"] != "1m" || m["shadow"] != true {
		t.Fatalf("put response: %s", r.body)
	}
	// The GET shape can be PUT back unchanged.
	if r := ts.do("PUT", "/v1/policies/api", string(r.body)); r.code != 200 {
		t.Fatalf("round trip of the response: %d %s", r.code, r.body)
	}

	cases := []struct {
		name, path, body string
		status           int
		code, field      string
	}{
		{"bad window", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"fortnight"}`, 400, CodeInvalidArgument, "window"},
		{"window type", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":5}`, 400, CodeInvalidArgument, "window"},
		{"limit type", "/v1/policies/api", `{"algorithm":"fixed_window","limit":"1","window":"5s"}`, 400, CodeInvalidArgument, "limit"},
		{"shadow type", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"5s","shadow":"yes"}`, 400, CodeInvalidArgument, "shadow"},
		{"unknown field", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"5s","colour":1}`, 400, CodeInvalidArgument, "colour"},
		{"unknown algorithm", "/v1/policies/api", `{"algorithm":"gcra","limit":1,"window":"5s"}`, 400, CodeInvalidArgument, "algorithm"},
		{"name mismatch", "/v1/policies/api", `{"name":"other","algorithm":"fixed_window","limit":1,"window":"5s"}`, 400, CodeInvalidArgument, "name"},
		{"bad name", "/v1/policies/a%20b", `{"algorithm":"fixed_window","limit":1,"window":"5s"}`, 400, CodeInvalidArgument, "name"},
		{"long name", "/v1/policies/" + strings.Repeat("n", service.MaxPolicyName+1), `{"algorithm":"fixed_window","limit":1,"window":"5s"}`, 400, CodeInvalidArgument, "name"},
		{"empty body", "/v1/policies/api", ``, 400, CodeInvalidArgument, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := len(ts.store.applied)
			r := ts.do("PUT", c.path, c.body)
			if r.code != c.status {
				t.Fatalf("status %d, want %d: %s", r.code, c.status, r.body)
			}
			if code, field, _ := r.errorBody(t); code != c.code || field != c.field {
				t.Fatalf("code %q field %q, want %q %q", code, field, c.code, c.field)
			}
			if len(ts.store.applied) != n {
				t.Fatalf("an invalid policy was proposed")
			}
		})
	}

	// The store's failures.
	ts.store.applyErr = nodeapi.ErrNoLeader
	r = ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"5s"}`)
	if code, _, _ := r.errorBody(t); r.code != 503 || code != CodeUnavailable {
		t.Fatalf("no leader: %d %s", r.code, r.body)
	}
	ts.store.applyErr = nil
	ts.store.applyResp = &fsm.Error{Code: "invalid_argument", Field: "limit", Message: "too large"}
	r = ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"5s"}`)
	if code, field, _ := r.errorBody(t); r.code != 400 || code != CodeInvalidArgument || field != "limit" {
		t.Fatalf("state machine refusal: %d %s", r.code, r.body)
	}
	ts.store.applyResp = (*fsm.Error)(nil) // a typed nil is success, not a crash
	if r := ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"5s"}`); r.code != 200 {
		t.Fatalf("typed nil response: %d %s", r.code, r.body)
	}
	ts.store.applyResp = errors.New("raft: disk full")
	if r := ts.do("PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"5s"}`); r.code != 500 {
		t.Fatalf("other error: %d %s", r.code, r.body)
	}
}

func TestGetAndDeletePolicies(t *testing.T) {
	ts := newTestServer(t, Config{})
	r := ts.do("GET", "/v1/policies", "")
	if r.code != 200 || string(r.body) != `{"policies":[]}`+"\n" {
		t.Fatalf("empty list: %d %s", r.code, r.body)
	}
	ts.store.putPolicy(t, "zeta", algo.Config{Algorithm: "sliding_log", Limit: 5, Window: "15m", CountRefused: true}, false)
	ts.store.putPolicy(t, "alpha", algo.Config{Algorithm: "fixed_window", Limit: 1000, Calendar: "day", Timezone: "Europe/Paris"}, true)
	r = ts.do("GET", "/v1/policies", "")
	list := r.json(t)["policies"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["name"] != "alpha" || list[1].(map[string]any)["name"] != "zeta" {
		t.Fatalf("list: %s", r.body)
	}
	alpha := list[0].(map[string]any)
	if alpha["calendar"] != "day" || alpha["timezone"] != "Europe/Paris" || alpha["shadow"] != true {
		t.Fatalf("alpha: %v", alpha)
	}
	if zeta := list[1].(map[string]any); zeta["count_refused"] != true || zeta["algorithm"] != "sliding_log" {
		t.Fatalf("zeta: %v", zeta)
	}

	r = ts.do("GET", "/v1/policies/zeta", "")
	if m := r.json(t); r.code != 200 || m["name"] != "zeta" || num(t, m, "limit") != 5 {
		t.Fatalf("get: %d %s", r.code, r.body)
	}
	r = ts.do("GET", "/v1/policies/nope", "")
	if code, field, _ := r.errorBody(t); r.code != 404 || code != CodeNotFound || field != "name" {
		t.Fatalf("get unknown: %d %s", r.code, r.body)
	}
	// Calendar windows have no fixed length: no w in RateLimit-Policy.
	r = ts.do("POST", "/v1/check", `{"key":"k","policy":"alpha"}`)
	if got := r.header.Get("RateLimit-Policy"); got != `"alpha";q=1000` {
		t.Fatalf("calendar RateLimit-Policy = %q", got)
	}

	r = ts.do("DELETE", "/v1/policies/zeta", "")
	if m := r.json(t); r.code != 200 || m["deleted"] != true || m["name"] != "zeta" {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	if got, want := ts.store.applied[0], fsm.EncodeDeletePolicy("zeta"); string(got) != string(want) {
		t.Fatalf("delete proposed %x, want %x", got, want)
	}
	ts.store.applyResp = &fsm.Error{Code: "not_found", Field: "name", Message: `no policy named "zeta"`}
	r = ts.do("DELETE", "/v1/policies/zeta", "")
	if code, _, _ := r.errorBody(t); r.code != 404 || code != CodeNotFound {
		t.Fatalf("delete unknown: %d %s", r.code, r.body)
	}
}

func TestCluster(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.status = nodeapi.Status{
		NodeID: "n1", State: "Leader", LeaderID: "n1", LeaderHTTP: "127.0.0.1:8080", Term: 3, CommitIndex: 42, AppliedIndex: 41,
		Members: []nodeapi.Member{
			{ID: "n1", RaftAddr: "127.0.0.1:8300", HTTPAddr: "127.0.0.1:8080", Suffrage: "Voter", Leader: true, Healthy: true},
			{ID: "n2", RaftAddr: "127.0.0.1:8301", HTTPAddr: "127.0.0.1:8081", Suffrage: "Voter", Healthy: false},
		},
	}
	r := ts.do("GET", "/v1/cluster", "")
	m := r.json(t)
	if r.code != 200 || m["leader_id"] != "n1" || num(t, m, "commit_index") != 42 || num(t, m, "term") != 3 {
		t.Fatalf("status: %d %s", r.code, r.body)
	}
	members := m["members"].([]any)
	if len(members) != 2 || members[1].(map[string]any)["healthy"] != false || members[0].(map[string]any)["raft_addr"] != "127.0.0.1:8300" {
		t.Fatalf("members: %s", r.body)
	}

	r = ts.do("POST", "/v1/cluster/join", `{"id":"n3","raft_addr":"127.0.0.1:8302","http_addr":"127.0.0.1:8082"}`)
	if r.code != 200 || len(ts.store.joins) != 1 || ts.store.joins[0] != [3]string{"n3", "127.0.0.1:8302", "127.0.0.1:8082"} {
		t.Fatalf("join: %d %s %v", r.code, r.body, ts.store.joins)
	}
	for _, c := range []struct{ body, field string }{
		{`{"raft_addr":"127.0.0.1:8302"}`, "id"},
		{`{"id":"n3"}`, "raft_addr"},
		{`{"id":"n3","raft_addr":"localhost"}`, "raft_addr"},
		{`{"id":"n3","raft_addr":"127.0.0.1:1","http_addr":"nope"}`, "http_addr"},
		{`{"id":"n3","raft_addr":"127.0.0.1:1","voter":true}`, "voter"},
	} {
		r := ts.do("POST", "/v1/cluster/join", c.body)
		if _, field, _ := r.errorBody(t); r.code != 400 || field != c.field {
			t.Errorf("join %s: %d %s, want field %q", c.body, r.code, r.body, c.field)
		}
	}

	r = ts.do("DELETE", "/v1/cluster/nodes/n9", "")
	if code, _, _ := r.errorBody(t); r.code != 404 || code != CodeNotFound || len(ts.store.removed) != 0 {
		t.Fatalf("remove unknown: %d %s", r.code, r.body)
	}
	r = ts.do("DELETE", "/v1/cluster/nodes/n2", "")
	if r.code != 200 || len(ts.store.removed) != 1 || ts.store.removed[0] != "n2" {
		t.Fatalf("remove: %d %s", r.code, r.body)
	}
	ts.store.applyErr = nodeapi.ErrNoLeader
	r = ts.do("POST", "/v1/cluster/join", `{"id":"n3","raft_addr":"127.0.0.1:8302"}`)
	if code, _, _ := r.errorBody(t); r.code != 503 || code != CodeUnavailable || r.header.Get("Retry-After") != "1" {
		t.Fatalf("join without leader: %d %s", r.code, r.body)
	}
}

func TestLoadPolicies(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"policies":{
		"login": {"algorithm":"sliding_log","limit":5,"window":"15m","count_refused":true},
		"api":   {"algorithm":"sliding_window","limit":100,"window":"60s","shadow":true}
	}}`)
	ps, err := LoadPolicies(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Name != "api" || ps[1].Name != "login" {
		t.Fatalf("policies not sorted by name: %+v", ps)
	}
	wantAPI, _ := algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "60s"}.Spec()
	if ps[0].Spec != wantAPI || !ps[0].Shadow || ps[1].Shadow || !ps[1].Spec.CountRefused {
		t.Fatalf("decoded %+v", ps)
	}

	for _, c := range []struct{ content, want string }{
		{`{"policies":{"api":{"algorithm":"sliding_window","limit":100,"window":"soon"}}}`, `policy "api": window:`},
		{`{"policies":{"api":{"algorithm":"sliding_window","limit":"100","window":"1s"}}}`, `policy "api": limit:`},
		{`{"policies":{"api":{"algorithm":"sliding_window","limit":1,"window":"1s","extra":1}}}`, `policy "api": extra: unknown field`},
		{`{"policies":{"bad name":{"algorithm":"sliding_window","limit":1,"window":"1s"}}}`, `policy "bad name": name`},
		{`{"policies":[{"name":"api"}]}`, `policies:`},
		{`{"policy":{}}`, `policy: unknown field`},
		{`{}`, `expected {"policies"`},
		{`{"policies":`, `malformed JSON`},
	} {
		path := write("bad.json", c.content)
		_, err := LoadPolicies(path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want it to name the file and contain %q", c.content, err, c.want)
		}
	}
	if _, err := LoadPolicies(filepath.Join(dir, "missing.json")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		src string
		ok  bool
	}{
		{"", true}, {"ip", true}, {"header:X-Api-Key", true}, {"query:api_key", true},
		{"ip:x", false}, {"header:", false}, {"query:", false}, {"cookie:sid", false}, {"header:Bad Name", false},
	} {
		err := Config{AuthKeySource: c.src}.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%q: %v", c.src, err)
		}
	}
	// A body bound over the Raft entry bound could only fail later.
	if err := (Config{MaxBodyBytes: nodeapi.MaxEntryBytes + 1}).Validate(); err == nil {
		t.Error("a body bound over nodeapi.MaxEntryBytes was accepted")
	}
	if err := (Config{MaxBodyBytes: nodeapi.MaxEntryBytes}).Validate(); err != nil {
		t.Errorf("body bound at nodeapi.MaxEntryBytes: %v", err)
	}
	// A bad source set anyway fails /v1/auth with 500, not the node.
	ts := newTestServer(t, Config{AuthKeySource: "cookie:sid"})
	if r := ts.do("GET", "/v1/auth/api", ""); r.code != 500 {
		t.Fatalf("misconfigured source: %d %s", r.code, r.body)
	}
}

// TestClusterStatusPublicSubset: with an admin token, GET /v1/cluster shows
// Raft addresses, terms and indexes to admins only (what a forged Raft RPC needs).
func TestClusterStatusPublicSubset(t *testing.T) {
	ts := newTestServer(t, Config{AdminToken: "s3cret"})
	ts.store.status = nodeapi.Status{
		NodeID: "n1", State: "Leader", LeaderID: "n1", LeaderHTTP: "127.0.0.1:8080", Term: 3, CommitIndex: 42, AppliedIndex: 41,
		Members: []nodeapi.Member{{ID: "n1", RaftAddr: "127.0.0.1:8300", HTTPAddr: "127.0.0.1:8080", Suffrage: "Voter", Leader: true, Healthy: true}},
	}
	for _, auth := range []string{"", "Authorization: Bearer wrong"} {
		var hdr []string
		if auth != "" {
			hdr = append(hdr, auth)
		}
		r := ts.do("GET", "/v1/cluster", "", hdr...)
		m := r.json(t)
		if r.code != 200 || m["state"] != "Leader" || m["leader_id"] != "n1" || m["ready"] != true || len(m) != 5 ||
			m["leader_http_addr"] != "127.0.0.1:8080" || m["members"].([]any)[0].(map[string]any)["http_addr"] != "127.0.0.1:8080" {
			t.Fatalf("public view %q: %d %s", auth, r.code, r.body)
		}
		// Leader-aware clients need the API addresses; Raft's are for admins.
		if strings.Contains(string(r.body), "8300") || strings.Contains(string(r.body), "term") || strings.Contains(string(r.body), "index") {
			t.Fatalf("public view leaks raft details: %s", r.body)
		}
	}
	ts.store.readyErr = errors.New("catching up")
	if m := ts.do("GET", "/v1/cluster", "").json(t); m["ready"] != false {
		t.Fatalf("public view of an unready node: %v", m)
	}
	r := ts.do("GET", "/v1/cluster", "", "Authorization: Bearer s3cret")
	m := r.json(t)
	if r.code != 200 || num(t, m, "term") != 3 || num(t, m, "commit_index") != 42 || m["members"].([]any)[0].(map[string]any)["raft_addr"] != "127.0.0.1:8300" {
		t.Fatalf("admin view: %d %s", r.code, r.body)
	}
}
