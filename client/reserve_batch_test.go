package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// With coalescing on, Reserve is a /v1/check/batch entry carrying its hold,
// its cost and a request id, and reads its reservation from the entry's
// answer; a refused entry is ErrRefused. A node that refuses a reserve as a
// batch entry (older than the entry) gets it as a single /v1/check, then
// every later reserve too.
func TestReserveCoalesced(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	var entries []map[string]any
	old := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/check" || r.URL.Path == "/v1/check/batch" {
			paths = append(paths, r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/check/batch":
			var in struct{ Checks []map[string]any }
			_ = json.Unmarshal(body, &in)
			entries = append(entries, in.Checks...)
			out := `{"results":[`
			for i, c := range in.Checks {
				if i > 0 {
					out += ","
				}
				switch {
				case old:
					out += `{"error":{"code":"invalid_argument","field":"checks[` + strconv.Itoa(i) + `].reserve","message":"a reserve is a check of its own, not part of a batch or group"}}`
				case c["cost"] != nil && c["cost"].(float64) > 100:
					out += `{"allowed":false,"limit":100,"remaining":3,"reset_after_ms":5000,"retry_after_ms":5000,"delay_ms":0}`
				default:
					out += `{"allowed":true,"limit":100,"remaining":40,"reset_after_ms":5000,"retry_after_ms":0,"delay_ms":0,"reservation":"r1.` + c["key"].(string) + `","reservation_expires_ms":60000}`
				}
			}
			_, _ = io.WriteString(w, out+`]}`)
		case "/v1/check":
			_, _ = io.WriteString(w, `{"allowed":true,"limit":100,"remaining":40,"reset_after_ms":5000,"retry_after_ms":0,"delay_ms":0,"reservation":"r1.single","reservation_expires_ms":60000}`)
		}
	}))
	defer srv.Close()
	c, err := New([]string{srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	rsv, settle, err := c.Reserve(ctx, Request{Key: "u", Policy: "tokens", Cost: 60}, time.Minute)
	if err != nil || rsv.ID != "r1.u" || settle == nil || time.Until(rsv.Expires) < 59*time.Second || rsv.Decision.Remaining != 40 {
		t.Fatalf("reserve: %+v %v", rsv, err)
	}
	if _, settle, err := c.Reserve(ctx, Request{Key: "u", Policy: "tokens", Cost: 200}, time.Minute); !errors.Is(err, ErrRefused) || settle != nil {
		t.Fatalf("a refused reserve: %v", err)
	}
	mu.Lock()
	if len(paths) != 2 || paths[0] != "/v1/check/batch" || paths[1] != "/v1/check/batch" {
		t.Fatalf("paths %v, want two batches", paths)
	}
	first := entries[0]
	if hold, _ := first["reserve"].(map[string]any); hold["hold"] != "1m0s" || first["request_id"] == nil || first["request_id"] == "" || first["cost"].(float64) != 60 {
		t.Fatalf("the reserve entry: %v", first)
	}
	old, paths = true, nil
	mu.Unlock()
	for i := 0; i < 2; i++ {
		if rsv, _, err := c.Reserve(ctx, Request{Key: "v", Policy: "tokens", Cost: 5}, time.Minute); err != nil || rsv.ID != "r1.single" {
			t.Fatalf("reserve %d against an older node: %+v %v", i, rsv, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 3 || paths[0] != "/v1/check/batch" || paths[1] != "/v1/check" || paths[2] != "/v1/check" {
		t.Fatalf("paths against an older node %v, want one refused batch, then single checks", paths)
	}
}
