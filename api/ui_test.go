package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/simulate"
)

// TestUIAssets: the page and every embedded asset are served with their
// content type, the strict CSP and nosniff; unknown files are 404.
func TestUIAssets(t *testing.T) {
	ts := newTestServer(t, Config{})
	var names []string
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, strings.TrimPrefix(p, "ui/"))
		}
		return err
	})
	if err != nil || len(names) < 4 {
		t.Fatalf("embedded assets %v: %v", names, err)
	}
	check := func(urlPath, wantType string, want []byte) {
		t.Helper()
		r := ts.do("GET", urlPath, "")
		if r.code != 200 || string(r.body) != string(want) {
			t.Errorf("GET %s: %d, %d bytes; want 200 and the embedded %d bytes", urlPath, r.code, len(r.body), len(want))
		}
		for h, v := range map[string]string{
			"Content-Type":            wantType,
			"Content-Security-Policy": UIContentSecurityPolicy,
			"X-Content-Type-Options":  "nosniff",
		} {
			if got := r.header.Get(h); got != v {
				t.Errorf("GET %s: %s = %q, want %q", urlPath, h, got, v)
			}
		}
	}
	// The types browsers need (with nosniff, a script of another type is not run).
	want := map[string]string{".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
		".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
	for _, name := range names {
		ctype, ok := want[path.Ext(name)]
		if _, served := uiContentTypes[path.Ext(name)]; !ok || !served {
			t.Errorf("asset %s has no content type: it would not be served", name)
			continue
		}
		body, _ := uiFiles.ReadFile("ui/" + name)
		check("/ui/"+name, ctype, body)
	}
	index, _ := uiFiles.ReadFile("ui/index.html")
	check("/ui", "text/html; charset=utf-8", index)
	check("/ui/", "text/html; charset=utf-8", index)
	if !strings.HasPrefix(UIContentSecurityPolicy, "default-src 'self'") {
		t.Errorf("CSP %q", UIContentSecurityPolicy)
	}
	for _, p := range []string{"/ui/missing.js", "/ui/ui.go", "/ui/../server.go", "/ui/index.html?x=1"} {
		r := ts.do("GET", p, "")
		if r.code == 200 {
			t.Errorf("GET %s: 200, want an error", p)
		}
	}
	if r := ts.do("HEAD", "/ui", ""); r.code != 200 || r.header.Get("Content-Security-Policy") != UIContentSecurityPolicy {
		t.Errorf("HEAD /ui: %d, CSP %q", r.code, r.header.Get("Content-Security-Policy"))
	}
	if r := ts.do("POST", "/ui", ""); r.code != 405 {
		t.Errorf("POST /ui: %d, want 405", r.code)
	}
}

// Before the first poll answers, the page shows placeholders, not blank
// tables or fields.
func TestUIPlaceholdersBeforeFirstPoll(t *testing.T) {
	b, err := uiFiles.ReadFile("ui/index.html")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, table := range []string{"members", "policies", "rates", "plans", "prefix-rules", "top-keys"} {
		re := regexp.MustCompile(`<table id="` + table + `">.*?<tbody>(.*?)</tbody>`)
		m := re.FindStringSubmatch(page)
		if m == nil || !strings.Contains(m[1], `class="placeholder"`) {
			t.Errorf("table %s has no placeholder row before the first poll: %q", table, m)
		}
	}
	for _, id := range []string{"node", "leader", "state", "ready", "term", "indexes", "rls", "default-plan"} {
		if regexp.MustCompile(`id="` + id + `"[^>]*></`).MatchString(page) {
			t.Errorf("#%s is blank before the first poll", id)
		}
	}
}

// TestUIReadsAreRouted: every read the Plans, Top keys and Key sections
// make is in the page and is an endpoint of this server (not the router's
// "no such endpoint"), answered 200 with the admin token on a node with a
// plan, a concurrency policy and a key under both: a renamed or removed
// route would leave a section saying only "HTTP 404".
func TestUIReadsAreRouted(t *testing.T) {
	js, err := uiFiles.ReadFile("ui/app.js")
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := newPlanServer(t)
	ts.want(ts.do("PUT", "/v1/plans/pro", `{"limits":{"daily":{"algorithm":"fixed_window","limit":10,"window":"1h"}}}`, admin), 200, "", "")
	ts.want(ts.do("PUT", "/v1/policies/jobs", `{"algorithm":"concurrency","limit":2,"hold":"60s"}`, admin), 200, "", "")
	ts.want(ts.do("PUT", "/v1/keys/u%2F1/plan", `{"plan":"pro"}`, admin), 200, "", "")
	ts.want(ts.do("PUT", "/v1/keys/u%2F1/override", `{"limits":{"daily":{"limit":20}}}`, admin), 200, "", "")
	ts.want(ts.do("POST", "/v1/check", `{"key":"u/1","policy":"jobs"}`), 200, "", "")
	for _, c := range []struct{ inPage, url string }{
		{`"/v1/plans"`, "/v1/plans"},
		{`"/v1/cluster/slots"`, "/v1/cluster/slots"},
		{`"/v1/prefix-rules"`, "/v1/prefix-rules"},
		{`"/v1/keys/top?policy="`, "/v1/keys/top?policy=jobs&window=5m&by=allowed"},
		{`"/v1/keys/top?policy="`, "/v1/keys/top?policy=jobs&window=1h&by=refused"},
		{`"/v1/keys/top?plan="`, "/v1/keys/top?plan=pro&window=5m&by=allowed"},
		{`"/plan"`, "/v1/keys/u%2F1/plan"},
		{`"/override"`, "/v1/keys/u%2F1/override"},
		{`"/v1/plans/"`, "/v1/plans/pro"},
		{`"/v1/keys?"`, "/v1/keys?plan=pro&plan_limit=daily&prefix=u%2F1&limit=1"},
		{`"/v1/keys?"`, "/v1/keys?policy=jobs&prefix=u%2F1&limit=1"},
		{`"/v1/usage?key="`, "/v1/usage?key=u%2F1&limit=daily"},
		{`"/v1/usage?key="`, "/v1/usage?key=u%2F1&policy=jobs"},
		{`"/inflight?"`, "/v1/keys/u%2F1/inflight?limit=daily"},
		{`"/inflight?"`, "/v1/keys/u%2F1/inflight?policy=jobs"},
	} {
		if !strings.Contains(string(js), c.inPage) {
			t.Errorf("the page no longer reads %s: update this list", c.inPage)
		}
		if r := ts.do("GET", c.url, "", admin); r.code != 200 {
			t.Errorf("GET %s: %d %s", c.url, r.code, r.body)
		}
	}
}

// TestUIAssetsAreSelfContained scans every asset: no URL of another origin
// (the CSP would block it, and the page must work offline), no inline script
// or style (blocked by the CSP too), and the token kept out of storage.
func TestUIAssetsAreSelfContained(t *testing.T) {
	// The SVG namespace is a name, not something fetched.
	allowed := regexp.MustCompile(`http://www\.w3\.org/2000/svg`)
	external := regexp.MustCompile(`(?i)(https?:|wss?:|ftp:)//|(src|href|action)\s*=\s*["']?//|url\(\s*["']?(//|https?:|data:)|@import`)
	inline := regexp.MustCompile(`(?i)<script(\s[^>]*)?>[^<\s]|<style|\sstyle\s*=|\son[a-z]+\s*=\s*["']|javascript:|\beval\(|new Function\(`)
	storage := regexp.MustCompile(`localStorage|sessionStorage|indexedDB|document\.cookie`)
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		text := allowed.ReplaceAllString(string(b), "")
		if m := external.FindString(text); m != "" {
			t.Errorf("%s refers to another origin: %q", p, m)
		}
		if m := inline.FindString(text); m != "" {
			t.Errorf("%s has inline script or style, which the CSP blocks: %q", p, m)
		}
		if m := storage.FindString(text); m != "" {
			t.Errorf("%s uses browser storage (%q): the admin token must stay in memory", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// simulateBody is a POST /v1/simulate body.
func simulateBody(t *testing.T, trace string, fields map[string]any) string {
	t.Helper()
	m := map[string]any{"trace": trace, "limit": 10, "window": "60s"}
	for k, v := range fields {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type simulateAnswer struct {
	Requests int `json:"requests"`
	Runs     []struct {
		Algorithm string                  `json:"algorithm"`
		Spec      string                  `json:"spec"`
		Admitted  int                     `json:"admitted"`
		Refused   int                     `json:"refused"`
		Decisions []simulate.JSONDecision `json:"decisions"`
		Keys      []simulate.KeyCounts    `json:"keys"`
	} `json:"runs"`
}

// TestSimulateEndpointMatchesEngine: docs/ALGORITHMS.md's algorithm comparison
// (cmd/limitd/testdata/simulate) through POST /v1/simulate gives the
// documented admitted counts, and every decision is the one `limitd simulate`
// prints (the same engine and JSON form).
func TestSimulateEndpointMatchesEngine(t *testing.T) {
	ts := newTestServer(t, Config{})
	readme := map[string][]int{ // fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket
		"edge.trace":             {20, 10, 10, 10, 10},
		"early_then_later.trace": {20, 20, 15, 20, 20},
	}
	for name, want := range readme {
		raw, err := os.ReadFile(filepath.Join("..", "cmd", "limitd", "testdata", "simulate", name))
		if err != nil {
			t.Fatal(err)
		}
		r := ts.do("POST", "/v1/simulate", simulateBody(t, string(raw), map[string]any{"burst": 5}))
		if r.code != 200 {
			t.Fatalf("%s: %d %s", name, r.code, r.body)
		}
		var got simulateAnswer
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		trace, err := simulate.ParseTrace(strings.NewReader(string(raw)), 0)
		if err != nil {
			t.Fatal(err)
		}
		specs, err := simulate.Specs(algo.Config{Limit: 10, Window: "60s", Burst: 5}, algo.Algorithms)
		if err != nil {
			t.Fatal(err)
		}
		if got.Requests != 20 || len(got.Runs) != len(specs) {
			t.Fatalf("%s: %d requests, %d runs", name, got.Requests, len(got.Runs))
		}
		for i, spec := range specs {
			run := got.Runs[i]
			if run.Algorithm != spec.Algorithm.String() || run.Spec != simulate.Describe(spec) {
				t.Errorf("%s run %d: %s %q, want %s %q", name, i, run.Algorithm, run.Spec, spec.Algorithm, simulate.Describe(spec))
			}
			engine, err := simulate.Replay(spec, trace)
			if err != nil {
				t.Fatal(err)
			}
			for j, d := range run.Decisions {
				if w := simulate.NewJSONDecision("", trace[j], engine.Decisions[j]); d != w {
					t.Errorf("%s %s request %d: %+v, want %+v", name, run.Algorithm, j, d, w)
				}
			}
			if fmt.Sprint(run.Keys) != fmt.Sprint(engine.Summary(trace)) || run.Admitted+run.Refused != 20 {
				t.Errorf("%s %s: keys %v admitted %d refused %d", name, run.Algorithm, run.Keys, run.Admitted, run.Refused)
			}
		}
		// Without a burst, docs/ALGORITHMS.md's table exactly.
		r = ts.do("POST", "/v1/simulate", simulateBody(t, string(raw), nil))
		if err := json.Unmarshal(r.body, &got); err != nil || r.code != 200 {
			t.Fatalf("%s: %d %s", name, r.code, r.body)
		}
		for i, run := range got.Runs {
			if run.Admitted != want[i] || run.Refused != 20-want[i] {
				t.Errorf("%s %s: admitted %d refused %d, want %d and %d (README)", name, run.Algorithm, run.Admitted, run.Refused, want[i], 20-want[i])
			}
		}
	}
}

// TestSimulateEndpointAlgorithms: a subset runs in the order given; burst
// and count_refused apply where they mean something.
func TestSimulateEndpointAlgorithms(t *testing.T) {
	ts := newTestServer(t, Config{})
	r := ts.do("POST", "/v1/simulate", simulateBody(t, "0 k\n0 k\n0 k\n",
		map[string]any{"limit": 1, "burst": 3, "count_refused": true, "algorithms": []string{"token_bucket", "sliding_log"}}))
	var got simulateAnswer
	if err := json.Unmarshal(r.body, &got); err != nil || r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if len(got.Runs) != 2 || got.Runs[0].Algorithm != "token_bucket" || got.Runs[0].Admitted != 3 ||
		got.Runs[1].Algorithm != "sliding_log" || got.Runs[1].Admitted != 1 || got.Runs[1].Spec != "sliding_log --limit 1 --window 1m --count-refused" {
		t.Fatalf("runs %+v", got.Runs)
	}
}

// TestSimulateEndpointErrors: every refusal names its field; the trace and
// the body are bounded.
func TestSimulateEndpointErrors(t *testing.T) {
	ts := newTestServer(t, Config{})
	long := strings.Repeat("1 k\n", MaxSimulateRequests+1)
	tests := []struct {
		name, body, field, msg string
		status                 int
	}{
		{"empty trace", simulateBody(t, "# nothing\n", nil), "trace", "no requests", 400},
		{"bad line", simulateBody(t, "1 a\n2\n", nil), "trace", "line 2: missing key", 400},
		{"out of order", simulateBody(t, "5 a\n4 a\n", nil), "trace", "line 2: time 4 is before line 1's 5", 400},
		{"too many requests", simulateBody(t, long, nil), "trace", fmt.Sprintf("more than %d requests", MaxSimulateRequests), 400},
		{"no limit", simulateBody(t, "1 a\n", map[string]any{"limit": nil}), "limit", "", 400},
		{"no window", simulateBody(t, "1 a\n", map[string]any{"window": nil}), "window", "required", 400},
		{"bad burst", simulateBody(t, "1 a\n", map[string]any{"burst": -1}), "burst", "", 400},
		{"unknown algorithm", simulateBody(t, "1 a\n", map[string]any{"algorithms": []string{"token_bucket", "gcra"}}), "algorithms[1]", "unknown algorithm \"gcra\"", 400},
		{"twice", simulateBody(t, "1 a\n", map[string]any{"algorithms": []string{"token_bucket", "token_bucket"}}), "algorithms[1]", "listed twice", 400},
		{"none", simulateBody(t, "1 a\n", map[string]any{"algorithms": []string{}}), "algorithms", "at least one", 400},
		{"calendar elsewhere", simulateBody(t, "1 a\n", map[string]any{"window": nil, "calendar": "day"}), "calendar", "", 400},
		{"unknown field", `{"trace":"1 a\n","limit":1,"window":"1s","rate":5}`, "rate", "unknown", 400},
		{"wrong type", `{"trace":"1 a\n","limit":"1","window":"1s"}`, "limit", "", 400},
		{"body too large", simulateBody(t, strings.Repeat("1 k\n", DefaultMaxBodyBytes/4+1), nil), "", "larger than", 413},
	}
	for _, tt := range tests {
		r := ts.do("POST", "/v1/simulate", tt.body)
		if r.code != tt.status {
			t.Errorf("%s: %d %s, want %d", tt.name, r.code, r.body, tt.status)
			continue
		}
		_, field, msg := r.errorBody(t)
		if field != tt.field || !strings.Contains(msg, tt.msg) {
			t.Errorf("%s: field %q message %q; want field %q and %q", tt.name, field, msg, tt.field, tt.msg)
		}
	}
	if r := ts.do("POST", "/v1/simulate?algorithm=x", simulateBody(t, "1 a\n", nil)); r.code != 400 {
		t.Errorf("query parameter: %d, want 400", r.code)
	}
}

// TestSimulateEndpointOneAtATime: while a simulation runs, another waits;
// one whose request ends while waiting gets 503 and nothing is computed.
func TestSimulateEndpointOneAtATime(t *testing.T) {
	ts := newTestServer(t, Config{})
	simulateSlots <- struct{}{} // a simulation in progress
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest("POST", "/v1/simulate", strings.NewReader(simulateBody(t, "1 a\n", nil))).WithContext(ctx)
	rec := httptest.NewRecorder()
	ts.h.ServeHTTP(rec, req)
	<-simulateSlots
	r := response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	if code, _, _ := r.errorBody(t); r.code != 503 || code != CodeUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("waiting simulation: %d %s", r.code, r.body)
	}
	if r := ts.do("POST", "/v1/simulate", simulateBody(t, "1 a\n", nil)); r.code != 200 {
		t.Fatalf("after the slot is free: %d %s", r.code, r.body)
	}
}

// leaseNode is a one-node cluster whose API needs an admin token, with a
// leased policy "quota" (a fixed window of an hour, 20% leases): the
// harness of the status page's leases panel.
func leaseNode(t *testing.T, token string) *clustertest.Cluster {
	t.Helper()
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 1, SkipShort: true,
		Handler: func(_ int, n *cluster.Node) http.Handler {
			return newAPI(n, Config{AdminToken: token, Logger: discardLogger()}).Handler()
		}})
	code, body := httpDo(t, "PUT", c.URL(0)+"/v1/policies/quota", token,
		`{"algorithm":"fixed_window","limit":1000000,"window":"1h","lease":{"share":0.2,"max_ttl":"10m"}}`)
	if code != 200 {
		t.Fatalf("put policy: %d %s", code, body)
	}
	return c
}

// httpDo sends one request, with the admin token when token is not "".
func httpDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkKeys sends one check of each key under the policy quota.
func checkKeys(t *testing.T, base string, keys []string) {
	t.Helper()
	for _, k := range keys {
		if code, body := httpDo(t, "POST", base+"/v1/check", "", `{"key":"`+k+`","policy":"quota"}`); code != 200 {
			t.Fatalf("check %s: %d %s", k, code, body)
		}
	}
}

type leasesView struct {
	Taken          uint64 `json:"taken"`
	ChecksAnswered uint64 `json:"checks_answered"`
	LeasedKeys     int    `json:"leased_keys"`
	Keys           []struct {
		Policy      string `json:"policy"`
		Key         string `json:"key"`
		Left        int64  `json:"left"`
		Spent       int64  `json:"spent"`
		ExpiresInMS int64  `json:"expires_in_ms"`
	} `json:"keys"`
	More int `json:"more"`
}

// TestClusterStatusLeases: the admin view of GET /v1/cluster lists the keys
// this node holds leases on (policy, key, units left and spent, expiry) and
// the lease counters; at most StatusLeaseKeys of them, the rest counted.
// Key names are for admins: the public view has no "leases".
func TestClusterStatusLeases(t *testing.T) {
	const token = "s3cret"
	c := leaseNode(t, token)
	read := func() leasesView {
		t.Helper()
		code, body := httpDo(t, "GET", c.URL(0)+"/v1/cluster", token, "")
		var v struct {
			NodeID string     `json:"node_id"`
			Leases leasesView `json:"leases"`
		}
		if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil || v.NodeID == "" {
			t.Fatalf("admin view: %d %s (%v)", code, body, err)
		}
		return v.Leases
	}
	if l := read(); len(l.Keys) != 0 || l.More != 0 || l.Taken != 0 {
		t.Fatalf("leases before any check: %+v", l)
	}

	// One busy key: a lease is taken in the background after its first
	// checks; keep checking until the view lists it (an idle key's lease
	// goes back after a second).
	var l leasesView
	for deadline := time.Now().Add(20 * time.Second); ; {
		checkKeys(t, c.URL(0), []string{"busy/1"})
		if l = read(); len(l.Keys) == 1 && l.Keys[0].Spent > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease listed: %+v", l)
		}
	}
	k := l.Keys[0]
	// 20% of what remained after the checks through the log.
	if k.Policy != "quota" || k.Key != "busy/1" || k.Left <= 0 || k.Left+k.Spent > 200_000 || k.Left+k.Spent < 190_000 ||
		k.ExpiresInMS <= 0 || k.ExpiresInMS > (10*time.Minute).Milliseconds() || l.More != 0 {
		t.Fatalf("the lease listed: %+v", l)
	}
	if l.Taken == 0 || l.ChecksAnswered == 0 || l.LeasedKeys != 1 {
		t.Fatalf("lease counters: %+v", l)
	}

	// The public view shows no key names.
	if code, body := httpDo(t, "GET", c.URL(0)+"/v1/cluster", "", ""); code != 200 || strings.Contains(body, "busy/1") || strings.Contains(body, "leases") {
		t.Fatalf("public view: %d %s", code, body)
	}

	// More keys than the cap: the view lists StatusLeaseKeys and counts the rest.
	keys := []string{"busy/1"}
	for i := 0; i < StatusLeaseKeys+7; i++ {
		keys = append(keys, fmt.Sprintf("many/%02d", i))
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		checkKeys(t, c.URL(0), keys)
		if l = read(); len(l.Keys) == StatusLeaseKeys && l.More == len(keys)-StatusLeaseKeys {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys listed, %d more; want %d and %d", len(l.Keys), l.More, StatusLeaseKeys, len(keys)-StatusLeaseKeys)
		}
	}
	for i := 1; i < len(l.Keys); i++ {
		if l.Keys[i].Spent > l.Keys[i-1].Spent {
			t.Fatalf("not the most spent first: %+v", l.Keys)
		}
	}
}
