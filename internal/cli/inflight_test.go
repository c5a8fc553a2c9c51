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

// `limitd keys inflight KEY --policy P` asks the key's inflight read and
// prints its slots and reservations with their expiries, then a count;
// wrong arguments are usage errors.
func TestKeysInflight(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"key":"user/1","policy":"workers","concurrency":true,"at":"2026-12-01T11:00:00.000Z",` +
			`"slots":[{"slot":"job-1","acquired":"2026-12-01T10:59:00.000Z","expires":"2026-12-01T11:04:00.000Z","expires_in_ms":240000}],"slots_held":1,` +
			`"reservations":[{"reservation":"r1.abc","cost":7,"expires":"2026-12-01T11:10:00.000Z","expires_in_ms":600000}],"more_reservations":false,"applied_index":9}`))
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if code := runKeys([]string{"inflight", "user/1", "--policy", "workers", "--addr", srv.URL}, env); code != ExitOK ||
		!strings.Contains(out.String(), "\"job-1\"  2026-12-01T10:59:00.000Z  2026-12-01T11:04:00.000Z  4m0s\n") ||
		!strings.Contains(out.String(), "r1.abc       7         2026-12-01T11:10:00.000Z  10m0s\n") ||
		!strings.Contains(out.String(), `key "user/1", policy "workers", at 2026-12-01T11:00:00.000Z: 1 slots held, 1 open reservations`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	// The client may still be asking something in the background (its
	// leader lookup): read the queries under the handler's lock.
	mu.Lock()
	got := slices.Clone(queries)
	mu.Unlock()
	if want := "/v1/keys/user%2F1/inflight?max=100&policy=workers"; !slices.Contains(got, want) {
		t.Fatalf("queries %q, want %q among them", got, want)
	}
	for _, args := range [][]string{{"inflight"}, {"inflight", "a", "b"}, {"inflight", "k", "--policy", "p", "--plan-limit", "d"}, {"inflight", "k", "--limit", "0"}} {
		if code := runKeys(append(args, "--addr", "127.0.0.1:1"), env); code != ExitUsage {
			t.Errorf("%v: exit %d, want a usage error", args, code)
		}
	}
}
