package cli

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWebhookPutReadsTheSecretFromAFileAndListShowsNoSecret: put sends the
// URL and the file's secret (its trailing newline dropped), a put without
// a secret is a usage error that sends nothing, and list prints names and
// URLs.
func TestWebhookPutReadsTheSecretFromAFileAndListShowsNoSecret(t *testing.T) {
	var puts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.Method + " " + r.URL.Path {
		case "PUT /v1/webhooks/ops":
			puts = append(puts, string(b))
			io.WriteString(w, `{"name":"ops","url":"https://hooks.example/x"}`)
		case "GET /v1/webhooks":
			io.WriteString(w, `{"webhooks":[{"name":"ops","url":"https://hooks.example/x"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI("webhook", "put", "ops", "--url", "https://hooks.example/x", "--addr", addr, "--token", "t"); code != ExitUsage || !strings.Contains(errs, "secret") {
		t.Fatalf("put without a secret: exit %d %s", code, errs)
	}
	if code, out, errs := runCLI("webhook", "put", "ops", "--url", "https://hooks.example/x", "--secret-file", secret, "--addr", addr, "--token", "t"); code != ExitOK || !strings.Contains(out, "https://hooks.example/x") {
		t.Fatalf("put: exit %d %s %s", code, out, errs)
	}
	if len(puts) != 1 || puts[0] != `{"url":"https://hooks.example/x","secret":"0123456789abcdef"}` {
		t.Fatalf("puts %q", puts)
	}
	var stdout, stderr bytes.Buffer
	code, _ := Run("webhook", []string{"list", "--addr", addr, "--token", "t"}, Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	if code != ExitOK || !strings.Contains(stdout.String(), "ops") || strings.Contains(stdout.String(), "0123456789abcdef") {
		t.Fatalf("list: exit %d %s %s", code, stdout.String(), stderr.String())
	}
}
