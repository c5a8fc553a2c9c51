package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/service"
)

// leaseNode is one in-process node serving the HTTP API, for the CLI's
// lease tests; run runs the CLI against it.
type leaseNode struct {
	t    *testing.T
	addr string
}

func newLeaseNode(t *testing.T) *leaseNode {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{
		Nodes: 1, SkipShort: true,
		Handler: func(_ int, n *cluster.Node) http.Handler {
			// The HTTP API as the daemon composes it: its metrics are the service's
			// Observer. (One node: no /internal/ endpoints are needed.)
			m := api.NewMetrics(prometheus.NewRegistry(), 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
			h := api.New(service.New(clustertest.ServiceDeps(n), service.Config{Observer: m}), n, m, api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
			return h
		},
	})
	return &leaseNode{t: t, addr: c.HTTPAddr(0)}
}

// run runs `limitd ARGS --addr NODE` and returns its exit code, stdout and
// stderr.
func (n *leaseNode) run(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := runPolicy(append(args[1:], "--addr", n.addr), Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	return code, stdout.String(), stderr.String()
}

func (n *leaseNode) mustRun(args ...string) string {
	n.t.Helper()
	code, out, errs := n.run(args...)
	if code != ExitOK {
		n.t.Fatalf("%v: exit %d, stderr %s", args, code, errs)
	}
	return out
}

// httpPolicy is GET /v1/policies/NAME's body, straight from the HTTP API.
func (n *leaseNode) httpPolicy(name string) string {
	n.t.Helper()
	resp, err := http.Get("http://" + n.addr + "/v1/policies/" + name)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		n.t.Fatalf("GET %s: %d %v %s", name, resp.StatusCode, err, b)
	}
	return string(b)
}

// httpLease is a policy's "lease" as GET over HTTP shows it (nil for none).
func (n *leaseNode) httpLease(name string) map[string]any {
	n.t.Helper()
	var body struct {
		Lease map[string]any `json:"lease"`
	}
	if err := json.Unmarshal([]byte(n.httpPolicy(name)), &body); err != nil {
		n.t.Fatal(err)
	}
	return body.Lease
}

// leaseIs reports whether an HTTP lease has this share and max_ttl (strict,
// on a server that has it, is not compared).
func leaseIs(m map[string]any, share float64, maxTTL string) bool {
	return m != nil && m["share"] == share && m["max_ttl"] == maxTTL
}

// TestPolicyLeaseCLI: `policy put --lease-*` stores the lease option (GET
// over HTTP shows it), `policy get --output json` answers it and `policy
// list` shows it; the get --output json / edit / put --file round trip keeps
// it; --lease alone is the server's defaults; a put without the flags has
// no leases.
func TestPolicyLeaseCLI(t *testing.T) {
	n := newLeaseNode(t)
	n.mustRun("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day", "--lease-share", "0.25", "--lease-max-ttl", "3s")
	if got := n.httpLease("quota"); !leaseIs(got, 0.25, "3s") {
		t.Fatalf("after put --lease-share 0.25 --lease-max-ttl 3s: GET shows lease %v", got)
	}
	out := n.mustRun("policy", "get", "quota", "--output", "json")
	var got client.Policy
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("policy get --output json: %v: %s", err, out)
	}
	if l := got.Lease; l == nil || l.Share == nil || *l.Share != 0.25 || l.MaxTTL != "3s" {
		t.Fatalf("policy get --output json: %s, want share 0.25 max_ttl 3s", out)
	}
	if out := n.mustRun("policy", "list"); !strings.Contains(out, "LEASE") || !strings.Contains(out, "share=0.25,max_ttl=3s") {
		t.Fatalf("policy list: %s, want the lease shown", out)
	}

	// Read-modify-write: what get printed, with the limit raised, through --file.
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatal(err)
	}
	obj["limit"] = 2_000_000
	edited, _ := json.Marshal(obj)
	file := filepath.Join(t.TempDir(), "quota.json")
	if err := os.WriteFile(file, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	n.mustRun("policy", "put", "--file", file)
	if got := n.httpLease("quota"); !leaseIs(got, 0.25, "3s") {
		t.Fatalf("after get --output json, edit, put --file: lease %v", got)
	}
	if out := n.mustRun("policy", "get", "quota"); !strings.Contains(out, "2000000") || !strings.Contains(out, "share=0.25,max_ttl=3s") {
		t.Fatalf("policy get after the edit: %s", out)
	}

	n.mustRun("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day", "--lease")
	if got := n.httpLease("quota"); !leaseIs(got, 0.05, "2s") {
		t.Fatalf("after put --lease: lease %v, want the defaults", got)
	}
	// --lease-strict, either way, reaches the server: stored as given, or
	// refused naming lease.strict by a server that does not know it.
	for _, strict := range []bool{true, false} {
		code, _, errs := n.run("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day", "--lease-strict="+strconv.FormatBool(strict))
		if code == ExitOK && n.httpLease("quota")["strict"] != strict || code != ExitOK && (code != ExitUsage || !strings.Contains(errs, "lease.strict")) {
			t.Fatalf("put --lease-strict=%v: exit %d, stderr %q, lease %v", strict, code, errs, n.httpLease("quota"))
		}
	}
	// A replace without the flags turns leases off, and says so.
	code, _, errs := n.run("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day")
	if code != ExitOK || !strings.Contains(errs, "note: the policy had a lease (share=0.05,max_ttl=2s") {
		t.Fatalf("put without --lease flags over a leased policy: exit %d, stderr %q, want a note", code, errs)
	}
	if got := n.httpLease("quota"); got != nil {
		t.Fatalf("after a put without --lease flags: lease %v, want none", got)
	}
	if code, _, errs := n.run("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day"); code != ExitOK || errs != "" {
		t.Fatalf("put over a policy without a lease: exit %d, stderr %q, want no note", code, errs)
	}
	if out := n.mustRun("policy", "list"); !strings.Contains(out, "quota") || strings.Contains(out, "share=") {
		t.Fatalf("policy list without a lease: %s", out)
	}
}

// TestPolicyGetPutFileKeepsHTTP: a policy stored over HTTP answers the same
// GET body after `policy get --output json` and `policy put --file` of what
// it printed: every field the HTTP API has, the lease's included, crosses
// the CLI both ways. A seed the server refuses only because it does not
// know "strict" is tried without it.
func TestPolicyGetPutFileKeepsHTTP(t *testing.T) {
	n := newLeaseNode(t)
	file := filepath.Join(t.TempDir(), "p.json")
	for i, seed := range []string{
		`{"algorithm":"fixed_window","limit":1000,"calendar":"month","timezone":"Europe/Paris","local_refusals":false,"lease":{"share":0.1,"max_ttl":"1s"}}`,
		`{"algorithm":"sliding_window","limit":50,"window":"90s","lease":{"share":1,"max_ttl":"10m","strict":false}}`,
		`{"algorithm":"token_bucket","limit":5,"window":"1s","burst":20,"lease":{"share":0.000001,"max_ttl":"250ms","strict":true}}`,
		`{"algorithm":"sliding_log","limit":5,"window":"15m","count_refused":true,"shadow":true}`,
	} {
		code, body := n.httpPut("seed", seed)
		if code == http.StatusBadRequest && strings.Contains(body, `"field":"lease.strict"`) {
			seed = strings.NewReplacer(`,"strict":false`, "", `,"strict":true`, "").Replace(seed)
			code, body = n.httpPut("seed", seed)
		}
		if code != http.StatusOK {
			t.Fatalf("seed %d: PUT %s: %d %s", i, seed, code, body)
		}
		want := n.httpPolicy("seed")
		if err := os.WriteFile(file, []byte(n.mustRun("policy", "get", "seed", "--output", "json")), 0o644); err != nil {
			t.Fatal(err)
		}
		n.mustRun("policy", "put", "--file", file)
		if got := n.httpPolicy("seed"); got != want {
			t.Fatalf("seed %d: after policy get --output json and put --file, GET answers\n%s\nwant\n%s", i, got, want)
		}
	}
}

func (n *leaseNode) httpPut(name, body string) (int, string) {
	n.t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+n.addr+"/v1/policies/"+name, strings.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPolicyLeaseCLIErrors: a bad lease is the server's invalid_argument
// (exit 2, naming the field as the HTTP API does) or, for what the CLI
// parses itself, a usage error naming the flag; nothing is stored.
func TestPolicyLeaseCLIErrors(t *testing.T) {
	n := newLeaseNode(t)
	n.mustRun("policy", "put", "q", "--algorithm", "fixed_window", "--limit", "100", "--window", "1h", "--lease-share", "0.1", "--lease-max-ttl", "1s")
	first := n.httpPolicy("q")
	fixed := []string{"policy", "put", "q", "--algorithm", "fixed_window", "--limit", "100", "--window", "1h"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(fixed, "--lease-share", "0"), "lease.share"},
		{append(fixed, "--lease-share", "1.5"), "lease.share"},
		{append(fixed, "--lease-share", "abc"), "-lease-share: want a number"},
		{append(fixed, "--lease-strict=maybe"), "-lease-strict: want true or false"},
		{append(fixed, "--lease-max-ttl", "2"), "lease.max_ttl"},
		{append(fixed, "--lease-max-ttl", "11m"), "lease.max_ttl"},
		{[]string{"policy", "put", "q", "--algorithm", "sliding_log", "--limit", "5", "--window", "1m", "--lease"}, "lease: not available for sliding_log"},
		{append(fixed, "--shadow", "--lease"), "lease: not with shadow"},
		{[]string{"policy", "put", "--file", "testdata/cli/policies.yaml", "--lease-share", "0.1"}, "give --file or limit flags, not both"},
	} {
		code, _, errs := n.run(tc.args...)
		if code != ExitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want exit %d naming %q", tc.args, code, errs, ExitUsage, tc.want)
		}
	}
	if got := n.httpPolicy("q"); got != first {
		t.Fatalf("after refused puts: %s, want the first policy %s", got, first)
	}
}

// TestPolicyFileLease: a policies file carries "lease" (JSON and YAML);
// unknown or mistyped lease fields are refused by name.
func TestPolicyFileLease(t *testing.T) {
	yml := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(yml, []byte("policies:\n  quota: {algorithm: fixed_window, limit: 1000, calendar: day, lease: {share: 0.1, max_ttl: 1s, strict: true}}\n  api: {algorithm: fixed_window, limit: 5, window: 1h}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := readPolicyFile(yml, nil)
	if err != nil || len(ps) != 2 {
		t.Fatalf("readPolicyFile: %v %v", ps, err)
	}
	share, yes := 0.1, true
	if ps[0].Name != "api" || ps[0].Lease != nil {
		t.Fatalf("api: %+v, want no lease", ps[0])
	}
	if ps[1].Name != "quota" || !reflect.DeepEqual(ps[1].Lease, &client.Lease{Share: &share, MaxTTL: "1s", Strict: &yes}) {
		t.Fatalf("quota: %+v, want lease share 0.1 max_ttl 1s strict", ps[1])
	}
	for _, tc := range []struct{ body, want string }{
		{`{"name":"q","algorithm":"fixed_window","limit":5,"window":"1h","lease":{"shares":0.1}}`, `unknown field "lease.shares"`},
		{`{"name":"q","algorithm":"fixed_window","limit":5,"window":"1h","lease":{"share":"0.1"}}`, "lease.share"},
		{`{"name":"q","algorithm":"fixed_window","limit":5,"window":"1h","lease":true}`, "lease: want an object"},
	} {
		if ps, err := readPolicyFile("-", strings.NewReader(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v %v, want an error naming %q", tc.body, ps, err, tc.want)
		}
	}
}
