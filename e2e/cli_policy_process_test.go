package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/limitd/limitd/internal/cli"
)

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
	env := cli.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
	run := func(args ...string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env.Stdout, env.Stderr = &stdout, &stderr
		if code := runCommand(append(args, "--addr", p.HTTPAddr), env); code != cli.ExitOK {
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

	run("policy", "put", "pay", "--algorithm", "fixed_window", "--limit", "5", "--window", "1h", "--local-refusals=false")
	if httpLocal("pay") {
		t.Fatal("--local-refusals=false: GET shows local_refusals true")
	}
	run("policy", "put", "pay", "--algorithm", "fixed_window", "--limit", "5", "--window", "1h")
	if !httpLocal("pay") {
		t.Fatal("a put without --local-refusals left the cache off")
	}
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(`[{"name":"pay","algorithm":"fixed_window","limit":5,"window":"1h","local_refusals":false}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	run("policy", "put", "--file", file)
	if httpLocal("pay") {
		t.Fatal("a file with local_refusals false: GET shows true")
	}
}
