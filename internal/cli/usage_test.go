package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestUsageGetAndExport(t *testing.T) {
	var mu sync.Mutex // a connection's handler may still run when the next request arrives
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/usage":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"key":"u:1","policy":"api","history":"2d","windows":[{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","used":3,"refused":2},{"start":"2026-12-01T11:00:00Z","end":"2026-12-01T12:00:00Z","used":1,"refused":0,"current":true}],"applied_index":7}`))
		case "/v1/usage/export":
			if r.URL.Query().Get("policy") == "broken" {
				_, _ = w.Write([]byte("key,used,refused,window_start,window_end\nu:1,3,2,a,b\n# error: storage\n"))
				return
			}
			_, _ = w.Write([]byte("key,used,refused,window_start,window_end\nu:1,3,2,2026-12-01T10:00:00Z,2026-12-01T11:00:00Z\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if code := runUsage([]string{"get", "u:1", "--policy", "api", "--from", "2026-12-01T00:00:00Z", "--addr", srv.URL}, env); code != ExitOK ||
		!strings.Contains(out.String(), "2026-12-01T10:00:00Z  2026-12-01T11:00:00Z  3     2") || !strings.Contains(out.String(), "(current)") ||
		!strings.Contains(out.String(), `policy "api"; history 2d; applied index 7`) {
		t.Fatalf("get: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	mu.Lock() // the client may still ask something in the background
	got := slices.Clone(queries)
	mu.Unlock()
	if want := "/v1/usage?from=2026-12-01T00%3A00%3A00Z&key=u%3A1&policy=api"; !slices.Contains(got, want) {
		t.Fatalf("queries %q, want %q among them", got, want)
	}
	file := filepath.Join(t.TempDir(), "out.csv")
	if code := runUsage([]string{"export", "--policy", "api", "--at", "2026-12-01T10:30:00Z", "--out", file, "--addr", srv.URL}, env); code != ExitOK {
		t.Fatalf("export: exit %d, stderr %q", code, errb.String())
	}
	if b, _ := os.ReadFile(file); !strings.HasSuffix(string(b), "u:1,3,2,2026-12-01T10:00:00Z,2026-12-01T11:00:00Z\n") {
		t.Fatalf("export file %q", b)
	}
	// An existing file is never overwritten; a stream that ends in an error
	// line is a failure.
	if code := runUsage([]string{"export", "--policy", "api", "--at", "2026-12-01T10:30:00Z", "--out", file, "--addr", srv.URL}, env); code == ExitOK {
		t.Fatalf("export over an existing file succeeded")
	}
	out.Reset()
	if code := runUsage([]string{"export", "--policy", "broken", "--at", "2026-12-01T10:30:00Z", "--addr", srv.URL}, env); code == ExitOK {
		t.Fatalf("a broken export succeeded: %q", out.String())
	}
	for _, args := range [][]string{
		{"get"},
		{"get", "u:1", "--from", "yesterday"},
		{"export", "--at", "2026-12-01T10:30:00Z"},
		{"export", "--policy", "a"},
		{"export", "--policy", "a", "--at", "2026-12-01T10:30:00Z", "--format", "xml"},
		{"exprt", "--policy", "a"},
	} {
		errb.Reset()
		if code := runUsage(append(args, "--addr", "127.0.0.1:1"), env); code != ExitUsage {
			t.Errorf("%v: exit %d, stderr %q, want a usage error", args, code, errb.String())
		}
	}
}

func TestKeysTop(t *testing.T) {
	var mu sync.Mutex // a connection's handler may still run when the next request arrives
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"policy":"api","window":"1h","by":"refused","at":"2026-12-01T10:00:00Z","keys":[{"key":"b","count":7,"error":0}]}`))
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if code := runKeys([]string{"top", "--policy", "api", "--last", "1h", "--by", "refused", "--addr", srv.URL}, env); code != ExitOK ||
		!strings.Contains(out.String(), `"b"  7        0`) || !strings.Contains(out.String(), `policy "api", the 1h to 2026-12-01T10:00:00Z`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	mu.Lock() // the client may still ask something in the background
	got := slices.Clone(queries)
	mu.Unlock()
	if want := "/v1/keys/top?by=refused&limit=32&policy=api&window=1h"; !slices.Contains(got, want) {
		t.Fatalf("queries %q, want %q among them", got, want)
	}
	for _, args := range [][]string{{"top"}, {"top", "--policy", "a", "--last", "2h"}, {"top", "--policy", "a", "--by", "used"}} {
		if code := runKeys(append(args, "--addr", "127.0.0.1:1"), env); code != ExitUsage {
			t.Errorf("%v: exit %d, want a usage error", args, code)
		}
	}
}
