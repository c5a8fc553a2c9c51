package e2e

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/limitd/limitd/internal/cli"
)

var updateGolden = flag.Bool("update", false, "rewrite the CLI golden files in testdata/cli")

// goldenCase is one command line, run in-process against a real node.
type goldenCase struct {
	name string
	args []string
}

// TestCLIGolden runs the client commands against one limitd process (with
// an admin token) and compares stdout, stderr and the exit status with
// testdata/cli/NAME.golden; the binary's own command lines are cmd/limitd's
// TestMainGolden. Values that vary between runs (addresses, times until
// reset) are masked. Run with -update to rewrite the files.
func TestCLIGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	p := newProc(t, "n1", "")
	p.start("--admin-token", "secret")
	p.waitReady()

	cases := []goldenCase{
		{"policy-put-no-token", []string{"policy", "put", "api", "--algorithm", "fixed_window", "--limit", "2", "--window", "1h"}},
		{"policy-put", []string{"policy", "put", "api", "--algorithm", "fixed_window", "--limit", "2", "--window", "1h", "--token", "secret"}},
		{"policy-put-file", []string{"policy", "put", "--file", "testdata/cli/policies.yaml", "--token", "secret"}},
		{"policy-put-bad-file", []string{"policy", "put", "--file", "testdata/cli/bad-policy.json", "--token", "secret"}},
		{"policy-put-invalid", []string{"policy", "put", "x", "--algorithm", "fixed_window", "--limit", "0", "--window", "1h", "--token", "secret"}},
		{"policy-list", []string{"policy", "list"}},
		{"policy-get-json", []string{"policy", "get", "api", "--output", "json"}},
		{"policy-put-local-refusals-off", []string{"policy", "put", "pay", "--algorithm", "fixed_window", "--limit", "100", "--window", "1h", "--local-refusals=false", "--token", "secret"}},
		{"policy-get-local-refusals-off-json", []string{"policy", "get", "pay", "--output", "json"}},
		{"policy-put-lease", []string{"policy", "put", "quota", "--algorithm", "fixed_window", "--limit", "1000000", "--calendar", "day", "--lease-share", "0.05", "--lease-max-ttl", "2s", "--token", "secret"}},
		{"policy-get-lease-json", []string{"policy", "get", "quota", "--output", "json"}},
		{"check-allowed", []string{"check", "--policy", "api", "user:1"}},
		{"check-allowed-json", []string{"check", "--policy", "api", "user:1", "--output", "json"}},
		{"check-refused", []string{"check", "--policy", "api", "user:1"}},
		{"check-unknown-policy", []string{"check", "--policy", "nope", "user:1"}},
		{"check-invalid-window", []string{"check", "--algorithm", "token_bucket", "--limit", "3", "--window", "60", "k"}},
		{"check-no-key", []string{"check", "--policy", "api"}},
		{"check-policy-and-limit", []string{"check", "--policy", "api", "--limit", "3", "k"}},
		{"check-bad-output", []string{"check", "--policy", "api", "--output", "xml", "k"}},
		{"check-bad-flag", []string{"check", "--polcy", "api", "k"}},
		{"check-https-to-plain-node", []string{"check", "--tls-insecure-skip-verify", "--policy", "api", "k"}},
		{"check-unavailable", []string{"check", "--addr", "127.0.0.1:1", "--timeout", "200ms", "--policy", "api", "k"}},
		{"key-peek", []string{"key", "peek", "user:1", "--policy", "api"}},
		{"key-reset", []string{"key", "reset", "user:1", "--policy", "api", "--token", "secret"}},
		{"key-peek-after-reset", []string{"key", "peek", "user:1", "--policy", "api"}},
		{"key-no-subcommand", []string{"key"}},
		{"cluster-status", []string{"cluster", "status", "--token", "secret"}},
		{"cluster-status-public", []string{"cluster", "status"}},
		{"cluster-members", []string{"cluster", "members", "--token", "secret"}},
		{"cluster-members-public", []string{"cluster", "members"}},
		{"cluster-remove-unknown", []string{"cluster", "remove", "n9", "--token", "secret"}},
		{"plan-put", []string{"plan", "put", "pro", "--file", "testdata/cli/plan-pro.yaml", "--token", "secret"}},
		{"plan-put-invalid", []string{"plan", "put", "bad", "--file", "testdata/cli/plan-bad.json", "--token", "secret"}},
		{"plan-put-no-file", []string{"plan", "put", "pro", "--token", "secret"}},
		{"plan-assign", []string{"plan", "assign", "tenant:acme", "pro", "--token", "secret"}},
		{"plan-assign-file", []string{"plan", "assign", "--file", "testdata/cli/assignments.csv", "--token", "secret"}},
		{"plan-assign-bad-file", []string{"plan", "assign", "--file", "testdata/cli/assignments-bad.jsonl", "--token", "secret"}},
		{"plan-default-set", []string{"plan", "default", "pro", "--token", "secret"}},
		{"plan-list", []string{"plan", "list"}},
		{"plan-get-json", []string{"plan", "get", "pro", "--output", "json"}},
		{"plan-delete-default", []string{"plan", "delete", "pro", "--token", "secret"}},
		{"snapshot-no-subcommand", []string{"snapshot"}},
		{"snapshot-restore-no-data-dir", []string{"snapshot", "restore", "backup.limitd"}},
		{"snapshot-inspect-missing", []string{"snapshot", "inspect", "testdata/cli/no-such-file"}},
		{"snapshot-inspect-not-a-backup", []string{"snapshot", "inspect", "testdata/cli/policies.yaml"}},
		{"policy-delete", []string{"policy", "delete", "api", "--token", "secret"}},
		{"policy-get-deleted", []string{"policy", "get", "api"}},
	}
	masks := []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(regexp.QuoteMeta(p.HTTPAddr)), "HTTP_ADDR"},
		{regexp.MustCompile(regexp.QuoteMeta(p.RaftAddr)), "RAFT_ADDR"},
		{regexp.MustCompile(`(reset_after +)\S+`), "${1}DURATION"},
		{regexp.MustCompile(`("reset_after_ms": )\d+`), "${1}MS"},
		{regexp.MustCompile(`(retry_after +)[1-9]\S*`), "${1}DURATION"},
		{regexp.MustCompile(`("retry_after_ms": )[1-9]\d*`), "${1}MS"},
		{regexp.MustCompile(`(?m)^((term|commit index|applied index) +)\d+$`), "${1}N"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		env := cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
			if k == "LIMITD_ADDR" {
				return p.HTTPAddr
			}
			return ""
		}}
		code := runCommand(tc.args, env)
		got := fmt.Sprintf("$ limitd %s\nexit: %d\n--- stdout\n%s--- stderr\n%s", strings.Join(tc.args, " "), code, stdout.String(), stderr.String())
		for _, m := range masks {
			got = m.re.ReplaceAllString(got, m.with)
		}
		path := filepath.Join("testdata", "cli", tc.name+".golden")
		if *updateGolden {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run with -update to create it)", tc.name, err)
		}
		if got != string(want) {
			t.Errorf("%s: output differs from %s (run with -update after checking the change):\n--- got\n%s\n--- want\n%s", tc.name, path, got, want)
		}
	}
}

// runCommand runs one of the operator's commands (check, policy, key,
// cluster, snapshot) in-process, as cmd/limitd dispatches them to
// internal/cli; the binary's own (serve, help, version, an unknown command)
// are tested in cmd/limitd.
func runCommand(args []string, env cli.Env) int {
	if len(args) == 0 {
		return cli.ExitUsage
	}
	code, ok := cli.Run(args[0], args[1:], env)
	if !ok {
		fmt.Fprintf(env.Stderr, "limitd: %q is not one of internal/cli's commands\n", args[0])
		return cli.ExitUsage
	}
	return code
}
