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
	"strings"
	"testing"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
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
			return api.New(n, api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
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

// httpLease is a policy's "lease" as GET over HTTP shows it ("" for none).
func (n *leaseNode) httpLease(name string) string {
	n.t.Helper()
	resp, err := http.Get("http://" + n.addr + "/v1/policies/" + name)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Lease json.RawMessage `json:"lease"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		n.t.Fatalf("GET %s: %d %v", name, resp.StatusCode, err)
	}
	return string(body.Lease)
}

// TestPolicyLeaseCLI: `policy put --lease-*` stores the lease option (GET
// over HTTP shows it), `policy get --output json` answers it and `policy
// list` shows it; the get --output json / edit / put --file round trip keeps
// it; --lease alone is the server's defaults; a put without the flags has
// no leases.
func TestPolicyLeaseCLI(t *testing.T) {
	n := newLeaseNode(t)
	const want = `{"share":0.25,"max_ttl":"3s"}`
	n.mustRun("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day", "--lease-share", "0.25", "--lease-max-ttl", "3s")
	if got := n.httpLease("quota"); got != want {
		t.Fatalf("after put --lease-share 0.25 --lease-max-ttl 3s: GET shows lease %s, want %s", got, want)
	}
	out := n.mustRun("policy", "get", "quota", "--output", "json")
	var got client.Policy
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("policy get --output json: %v: %s", err, out)
	}
	share := 0.25
	if !reflect.DeepEqual(got.Lease, &client.Lease{Share: &share, MaxTTL: "3s"}) {
		t.Fatalf("policy get --output json: %s, want lease %s", out, want)
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
	if got := n.httpLease("quota"); got != want {
		t.Fatalf("after get --output json, edit, put --file: lease %s, want %s", got, want)
	}
	if out := n.mustRun("policy", "get", "quota"); !strings.Contains(out, "2000000") || !strings.Contains(out, "share=0.25,max_ttl=3s") {
		t.Fatalf("policy get after the edit: %s", out)
	}

	n.mustRun("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day", "--lease")
	if got := n.httpLease("quota"); got != `{"share":0.05,"max_ttl":"2s"}` {
		t.Fatalf("after put --lease: lease %s, want the defaults", got)
	}
	// --lease-strict reaches the server: stored, or refused naming
	// lease.strict by a server that does not know it — never dropped.
	code, _, errs := n.run("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day", "--lease-strict")
	if code == ExitOK && !strings.Contains(n.httpLease("quota"), `"strict":true`) || code != ExitOK && !strings.Contains(errs, "lease.strict") {
		t.Fatalf("put --lease-strict: exit %d, stderr %q, lease %s", code, errs, n.httpLease("quota"))
	}
	n.mustRun("policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day")
	if got := n.httpLease("quota"); got != "" {
		t.Fatalf("after a put without --lease flags: lease %s, want none", got)
	}
	if out := n.mustRun("policy", "list"); !strings.Contains(out, "quota") || strings.Contains(out, "share=") {
		t.Fatalf("policy list without a lease: %s", out)
	}
}

// TestPolicyLeaseCLIErrors: a bad lease is the server's invalid_argument
// (exit 2, naming the field as the HTTP API does) or, for what the CLI
// parses itself, a usage error naming the flag; nothing is stored.
func TestPolicyLeaseCLIErrors(t *testing.T) {
	n := newLeaseNode(t)
	n.mustRun("policy", "put", "q", "--algorithm", "fixed_window", "--limit", "100", "--window", "1h", "--lease-share", "0.1", "--lease-max-ttl", "1s")
	fixed := []string{"policy", "put", "q", "--algorithm", "fixed_window", "--limit", "100", "--window", "1h"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(fixed, "--lease-share", "0"), "lease.share"},
		{append(fixed, "--lease-share", "1.5"), "lease.share"},
		{append(fixed, "--lease-share", "abc"), "-lease-share: want a number"},
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
	if got := n.httpLease("q"); got != `{"share":0.1,"max_ttl":"1s"}` {
		t.Fatalf("after refused puts: lease %s, want the first one", got)
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
	share := 0.1
	if ps[0].Name != "api" || ps[0].Lease != nil {
		t.Fatalf("api: %+v, want no lease", ps[0])
	}
	if ps[1].Name != "quota" || !reflect.DeepEqual(ps[1].Lease, &client.Lease{Share: &share, MaxTTL: "1s", Strict: true}) {
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
