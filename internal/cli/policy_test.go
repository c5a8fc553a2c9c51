package cli

import (
	"bytes"
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
		code := runPolicy(tc.args[1:], Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
		if code != ExitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
