package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Reserve sends the estimate with its hold and a request id, and its settle
// func sends the reservation and the actual cost; a refused reserve is
// ErrRefused with no settle; Refund sends the request id and the cost.
func TestReserveSettleAndRefund(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]any
	spent := int64(0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		var in map[string]any
		_ = json.Unmarshal(body, &in)
		in["path"] = r.URL.Path
		got = append(got, in)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/check":
			cost := int64(in["cost"].(float64))
			if spent+cost > 100 {
				_, _ = io.WriteString(w, `{"allowed":false,"limit":100,"remaining":0,"reset_after_ms":5000,"retry_after_ms":5000,"delay_ms":0}`)
				return
			}
			spent += cost
			_, _ = io.WriteString(w, `{"allowed":true,"limit":100,"remaining":40,"reset_after_ms":5000,"retry_after_ms":0,"delay_ms":0,"reservation":"r1.abc","reservation_expires_ms":60000}`)
		case "/v1/settle":
			_, _ = io.WriteString(w, `{"credited":35,"debt":0,"rolled":false,"limit":100,"remaining":75,"reset_after_ms":5000,"retry_after_ms":0,"reservation":"r1.abc"}`)
		case "/v1/refund":
			_, _ = io.WriteString(w, `{"credited":0,"debt":0,"rolled":true,"limit":100,"remaining":75,"reset_after_ms":5000,"retry_after_ms":0}`)
		}
	}))
	defer srv.Close()
	c, err := New([]string{srv.URL}, WithCoalescing(Coalescing{Disabled: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	rsv, settle, err := c.Reserve(ctx, Request{Key: "u", Policy: "tokens", Cost: 60}, time.Minute)
	if err != nil || rsv.ID != "r1.abc" || settle == nil || time.Until(rsv.Expires) < 59*time.Second {
		t.Fatalf("reserve: %+v %v", rsv, err)
	}
	st, err := settle(ctx, 25)
	if err != nil || st.Credited != 35 || st.Remaining != 75 {
		t.Fatalf("settle: %+v %v", st, err)
	}
	if _, settle, err := c.Reserve(ctx, Request{Key: "u", Policy: "tokens", Cost: 60}, time.Minute); !errors.Is(err, ErrRefused) || settle != nil {
		t.Fatalf("a refused reserve: %v", err)
	}
	if st, err := c.Refund(ctx, "job-1", 5); err != nil || !st.Rolled {
		t.Fatalf("refund: %+v %v", st, err)
	}
	mu.Lock()
	defer mu.Unlock()
	first := got[0]
	if first["reserve"].(map[string]any)["hold"] != "1m0s" || first["request_id"] == "" || first["cost"].(float64) != 60 {
		t.Fatalf("reserve body: %v", first)
	}
	if s := got[1]; s["path"] != "/v1/settle" || s["reservation"] != "r1.abc" || s["cost"].(float64) != 25 {
		t.Fatalf("settle body: %v", s)
	}
	if r := got[3]; r["path"] != "/v1/refund" || r["request_id"] != "job-1" || r["cost"].(float64) != 5 {
		t.Fatalf("refund body: %v", r)
	}
}
