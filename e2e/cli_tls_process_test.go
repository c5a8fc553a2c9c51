package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/cli"
)

// The client commands speak HTTPS to a node started with --tls-cert:
// trusting it with --tls-ca (or an https:// address), and failing as a
// configuration error (exit 5) when the certificate is not trusted.
func TestProcessCLIOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	cert, key := writeSelfSigned(t, t.TempDir())
	p := newProc(t, "n1", "")
	p.start("--tls-cert", cert, "--tls-key", key, "--tls-ca", cert, "--admin-token", "secret")
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, errOut := runCLI(t, "cluster", "status", "--addr", p.HTTPAddr, "--tls-ca", cert, "--timeout", "1s")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not reachable over TLS: exit %d %s\n%s", code, errOut, p.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, out, errOut := runCLI(t, "policy", "put", "api", "--algorithm", "fixed_window", "--limit", "1", "--window", "1h",
		"--addr", "https://"+p.HTTPAddr, "--tls-ca", cert, "--token", "secret"); code != 0 {
		t.Fatalf("policy put over TLS: exit %d %s%s", code, out, errOut)
	}
	if code, out, _ := runCLI(t, "check", "--policy", "api", "k", "--addr", p.HTTPAddr, "--tls-ca", cert); code != cli.ExitOK || !strings.Contains(out, "allowed      true") {
		t.Fatalf("check over TLS: exit %d\n%s", code, out)
	}
	if code, _, _ := runCLI(t, "check", "--policy", "api", "k", "--addr", p.HTTPAddr, "--tls-ca", cert); code != cli.ExitRefused {
		t.Fatalf("second check over TLS: exit %d, want %d (refused)", code, cli.ExitRefused)
	}
	// Configuration mistakes: exit 5 at once (not after --timeout of
	// retries), a message naming the flag to fix, and the command the user
	// ran rather than the API path.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "https://" + p.HTTPAddr}, "--tls-ca"},
		{[]string{"--addr", "http://" + p.HTTPAddr}, "add --tls"},
		{[]string{"--addr", p.HTTPAddr, "--tls-ca", cert, "--token", "wrong"}, "--token"},
	} {
		// Retrying would take all of --timeout: 10m, far beyond any load.
		args := append([]string{"key", "reset", "k", "--policy", "api", "--timeout", "10m"}, tc.args...)
		start := time.Now()
		code, _, errOut := runCLI(t, args...)
		if code != cli.ExitConfig || !strings.Contains(errOut, tc.want) || !strings.HasPrefix(errOut, "limitd key reset: ") || strings.Contains(errOut, "/v1/") {
			t.Fatalf("%v: exit %d, %q; want exit %d naming %s", tc.args, code, errOut, cli.ExitConfig, tc.want)
		}
		if took := time.Since(start); took > 5*time.Minute {
			t.Fatalf("%v: took %v: retried until close to --timeout", tc.args, took)
		}
	}
}
