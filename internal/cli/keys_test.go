package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestKeysList(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/keys" {
			http.NotFound(w, r)
			return
		}
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"keys":[{"key":"user:1","used":2,"remaining":8,"reset_after_ms":1500}],"cursor":"azE","applied_index":9}`))
	}))
	defer srv.Close()
	env := func(out, errb *bytes.Buffer) Env {
		return Env{Stdout: out, Stderr: errb, Getenv: func(string) string { return "" }}
	}
	var out, errb bytes.Buffer
	code := runKeys([]string{"list", "--policy", "api", "--prefix", "user:", "--sort", "used", "--limit", "5", "--addr", srv.URL}, env(&out, &errb))
	if code != ExitOK || !strings.Contains(out.String(), `"user:1"  2     8          1.5s`) || !strings.Contains(out.String(), "next page: --cursor azE") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if want := "limit=5&policy=api&prefix=user%3A&sort=used"; len(queries) != 1 || queries[0] != want {
		t.Fatalf("queries %q, want %q", queries, want)
	}
	out.Reset()
	if code := runKeys([]string{"list", "--plan", "pro", "--plan-limit", "daily", "--output", "json", "--addr", srv.URL}, env(&out, &errb)); code != ExitOK ||
		!strings.Contains(out.String(), `"cursor": "azE"`) || !strings.Contains(out.String(), `"applied_index": 9`) {
		t.Fatalf("json: exit %d, %q", code, out.String())
	}
	for _, args := range [][]string{
		{"list"},
		{"list", "--policy", "a", "--plan", "b"},
		{"list", "--policy", "a", "--limit", "0"},
		{"list", "--policy", "a", "extra"},
		{"lst", "--policy", "a"},
	} {
		errb.Reset()
		if code := runKeys(append(args, "--addr", "127.0.0.1:1"), env(&out, &errb)); code != ExitUsage {
			t.Errorf("%v: exit %d, stderr %q, want a usage error", args, code, errb.String())
		}
	}
}
