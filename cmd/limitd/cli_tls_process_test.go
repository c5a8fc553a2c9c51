package main

import (
	"strings"
	"testing"
	"time"
)

// The client commands speak HTTPS to a node started with --tls-cert:
// trusting it with --tls-ca (or an https:// address), and failing as
// unavailable (exit 3) when the certificate is not trusted.
func TestProcessCLIOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	cert, key := writeSelfSigned(t, t.TempDir())
	p := newProc(t, "n1", "")
	p.start("--tls-cert", cert, "--tls-key", key, "--tls-ca", cert, "--admin-token", "secret")
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, errOut := runCLI(t, "cluster", "status", "--addr", p.httpAddr, "--tls-ca", cert, "--timeout", "1s")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not reachable over TLS: exit %d %s\n%s", code, errOut, p.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, out, errOut := runCLI(t, "policy", "put", "api", "--algorithm", "fixed_window", "--limit", "1", "--window", "1h",
		"--addr", "https://"+p.httpAddr, "--tls-ca", cert, "--token", "secret"); code != 0 {
		t.Fatalf("policy put over TLS: exit %d %s%s", code, out, errOut)
	}
	if code, out, _ := runCLI(t, "check", "--policy", "api", "k", "--addr", p.httpAddr, "--tls-ca", cert); code != exitOK || !strings.Contains(out, "allowed      true") {
		t.Fatalf("check over TLS: exit %d\n%s", code, out)
	}
	if code, _, _ := runCLI(t, "check", "--policy", "api", "k", "--addr", p.httpAddr, "--tls-ca", cert); code != exitRefused {
		t.Fatalf("second check over TLS: exit %d, want %d (refused)", code, exitRefused)
	}
	// Not trusted: the handshake fails, the command reports unavailable.
	// The client retries until its timeout and reports the last failure:
	// the timeout leaves a slow (loaded, race-built) CLI time for one
	// handshake.
	code, _, errOut := runCLI(t, "check", "--policy", "api", "k", "--addr", "https://"+p.httpAddr, "--timeout", "2s")
	if code != exitUnavailable || !strings.Contains(errOut, "certificate") {
		t.Fatalf("untrusted certificate: exit %d, %q", code, errOut)
	}
}
