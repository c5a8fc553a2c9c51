package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyFileLocalRefusals: a policies file carries "local_refusals" (JSON
// and YAML); absent stays unset, so that the server applies its default.
func TestPolicyFileLocalRefusals(t *testing.T) {
	dir := t.TempDir()
	yml := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(yml, []byte("policies:\n  pay: {algorithm: fixed_window, limit: 5, window: 1h, local_refusals: false}\n  api: {algorithm: fixed_window, limit: 5, window: 1h}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := readPolicyFile(yml, nil)
	if err != nil || len(ps) != 2 {
		t.Fatalf("readPolicyFile: %v %v", ps, err)
	}
	if ps[0].Name != "api" || ps[0].LocalRefusals != nil {
		t.Fatalf("api: %+v, want LocalRefusals unset", ps[0])
	}
	if ps[1].Name != "pay" || ps[1].LocalRefusals == nil || *ps[1].LocalRefusals {
		t.Fatalf("pay: %+v, want LocalRefusals false", ps[1])
	}
	ps, err = readPolicyFile("-", strings.NewReader(`{"name":"pay","algorithm":"fixed_window","limit":5,"window":"1h","local_refusals":"no"}`))
	if err == nil || !strings.Contains(err.Error(), "local_refusals") {
		t.Fatalf("local_refusals \"no\": %v %v, want an error naming the field", ps, err)
	}
}

// TestPolicyFlagLocalRefusals: bad values and --file with the flag are usage
// errors (exit 2) that name it, before any request.
func TestPolicyFlagLocalRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "put", "pay", "--algorithm", "fixed_window", "--limit", "5", "--window", "1h", "--local-refusals=maybe", "--addr", "127.0.0.1:1"}, "-local-refusals: want true or false"},
		{[]string{"policy", "put", "--file", "testdata/cli/policies.yaml", "--local-refusals=false", "--addr", "127.0.0.1:1"}, "give --file or limit flags, not both"},
	} {
		var stdout, stderr bytes.Buffer
		code := runMain(tc.args, cliEnv{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }})
		if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestCLIPolicyLocalRefusals: `limitd policy put --local-refusals=false` and
// a file with "local_refusals": false store it (GET over HTTP shows false);
// a put without it is the default, true, also over a policy that had it off.
func TestCLIPolicyLocalRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	p := newProc(t, "n1", "")
	p.start()
	p.waitReady()
	env := cliEnv{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
	cli := func(args ...string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env.stdout, env.stderr = &stdout, &stderr
		if code := runMain(append(args, "--addr", p.HTTPAddr), env); code != exitOK {
			t.Fatalf("%v: exit %d, stderr %s", args, code, stderr.String())
		}
	}
	httpLocal := func(name string) bool {
		t.Helper()
		resp, err := http.Get("http://" + p.HTTPAddr + "/v1/policies/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			LocalRefusals *bool `json:"local_refusals"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.LocalRefusals == nil {
			t.Fatalf("GET %s: %d %v %v", name, resp.StatusCode, err, body.LocalRefusals)
		}
		return *body.LocalRefusals
	}

	cli("policy", "put", "pay", "--algorithm", "fixed_window", "--limit", "5", "--window", "1h", "--local-refusals=false")
	if httpLocal("pay") {
		t.Fatal("--local-refusals=false: GET shows local_refusals true")
	}
	cli("policy", "put", "pay", "--algorithm", "fixed_window", "--limit", "5", "--window", "1h")
	if !httpLocal("pay") {
		t.Fatal("a put without --local-refusals left the cache off")
	}
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(`[{"name":"pay","algorithm":"fixed_window","limit":5,"window":"1h","local_refusals":false}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	cli("policy", "put", "--file", file)
	if httpLocal("pay") {
		t.Fatal("a file with local_refusals false: GET shows true")
	}
}
