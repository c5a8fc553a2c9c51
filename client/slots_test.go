package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// A one-slot server: an acquire answers the request id as the slot; a
// release frees it once.
func TestAcquireAndRelease(t *testing.T) {
	var mu sync.Mutex
	held := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		var in struct{ Slot, RequestID string }
		var raw map[string]any
		_ = json.Unmarshal(body, &raw)
		in.RequestID, _ = raw["request_id"].(string)
		in.Slot, _ = raw["slot"].(string)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/check":
			if held != "" {
				_, _ = io.WriteString(w, `{"allowed":false,"limit":1,"remaining":0,"reset_after_ms":5000,"retry_after_ms":5000,"delay_ms":0}`)
				return
			}
			held = in.RequestID
			_, _ = io.WriteString(w, `{"allowed":true,"limit":1,"remaining":0,"reset_after_ms":30000,"retry_after_ms":0,"delay_ms":0,"slot":"`+held+`","slot_expires_ms":30000}`)
		case "/v1/release":
			done := in.Slot == held && held != ""
			if done {
				held = ""
			}
			b, _ := json.Marshal(map[string]any{"released": done, "slot": in.Slot, "slot_expires_ms": 0, "limit": 1, "remaining": 1})
			_, _ = w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := New([]string{srv.URL}, WithCoalescing(Coalescing{Disabled: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	req := Request{Key: "job", Policy: "workers"}
	s, release, err := c.Acquire(ctx, req)
	if err != nil || s.ID == "" || release == nil || !strings.Contains(held, s.ID) {
		t.Fatalf("acquire: %+v %v (held %q)", s, err, held)
	}
	if s2, _, err := c.Acquire(ctx, req); !errors.Is(err, ErrNoSlot) || s2.Decision.RetryAfter <= 0 {
		t.Fatalf("second acquire: %+v %v", s2, err)
	}
	if err := release(ctx); err != nil || held != "" {
		t.Fatalf("release: %v (held %q)", err, held)
	}
	if err := release(ctx); err != nil {
		t.Fatalf("a repeated release: %v", err)
	}
	if st, err := c.Release(ctx, req, s.ID); err != nil || st.Done {
		t.Fatalf("release of a freed slot: %+v %v", st, err)
	}
}
