package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestKeysTopOfAPlan: `limitd keys top --plan P [--plan-limit L]` asks the
// plan's view and names it in the table's last line; --plan with --policy,
// or --plan-limit without --plan, is a usage error. Fails if the flags are
// not passed on or the footer names a policy for a plan's view.
func TestKeysTopOfAPlan(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"plan":"pro","plan_limit":"daily","window":"5m","by":"refused","at":"2026-12-01T10:00:00Z","keys":[{"key":"t:1","count":4,"error":0}]}`))
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if code := runKeys([]string{"top", "--plan", "pro", "--plan-limit", "daily", "--by", "refused", "--limit", "5", "--addr", srv.URL}, env); code != ExitOK ||
		!strings.Contains(out.String(), `"t:1"`) || !strings.Contains(out.String(), `plan "pro", limit "daily", the 5m to 2026-12-01T10:00:00Z`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	mu.Lock() // the client may still ask something in the background
	got := slices.Clone(queries)
	mu.Unlock()
	if want := "/v1/keys/top?by=refused&limit=5&plan=pro&plan_limit=daily&window=5m"; !slices.Contains(got, want) {
		t.Fatalf("queries %q, want %q among them", got, want)
	}
	for _, args := range [][]string{{"top", "--plan", "pro", "--policy", "api"}, {"top", "--policy", "api", "--plan-limit", "daily"}, {"top", "--plan-limit", "daily"}} {
		errb.Reset()
		if code := runKeys(append(args, "--addr", "127.0.0.1:1"), env); code != ExitUsage {
			t.Errorf("%v: exit %d, stderr %q, want a usage error", args, code, errb.String())
		}
	}
}
