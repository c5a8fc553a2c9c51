package client_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
)

// TestExportUsageStreamsAndReportsItsEnd: the export is copied as sent, with
// the bearer token; an error line after the header is an error, and a
// refusal before it is the server's error (fails if the shared GET stream
// helper loses the token, the body or the status).
func TestExportUsageStreamsAndReportsItsEnd(t *testing.T) {
	body := "key,used,refused,window_start,window_end\nu/1,3,2,a,b\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/usage/export" || r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, `{"error":{"code":"unauthenticated","message":"no"}}`, http.StatusUnauthorized)
			return
		}
		switch r.URL.Query().Get("policy") {
		case "api":
			_, _ = w.Write([]byte(body))
		case "broken":
			_, _ = w.Write([]byte(body + "# error: the state changed\n"))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","field":"policy","message":"no such policy"}}`))
		}
	}))
	defer srv.Close()
	c, err := client.New([]string{strings.TrimPrefix(srv.URL, "http://")}, client.WithToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	window := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	if n, err := c.ExportUsage(ctx, client.ExportQuery{Policy: "api", Window: window}, &out); err != nil || n != int64(len(body)) || out.String() != body {
		t.Fatalf("export: %d %v %q", n, err, out.String())
	}
	out.Reset()
	if _, err := c.ExportUsage(ctx, client.ExportQuery{Policy: "broken", Window: window}, &out); err == nil || !strings.Contains(err.Error(), "the state changed") {
		t.Fatalf("an export ending in an error line: %v", err)
	}
	_, err = c.ExportUsage(ctx, client.ExportQuery{Policy: "nope", Window: window}, &out)
	var e *client.Error
	if !errors.As(err, &e) || e.Field != "policy" || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a refused export: %v", err)
	}
}
