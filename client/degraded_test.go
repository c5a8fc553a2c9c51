package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFailLocalDecidesWithItsShare: with the cluster unreachable, FailLocal
// admits ceil(limit/instances) per key and window of a policy given
// WithLocalLimit, each answer Degraded; the next window starts afresh; a
// policy it does not know is refused (never over-admitted).
func TestFailLocalDecidesWithItsShare(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	c := mustNew(t, []string{addr}, WithLocalLimit("p", LocalLimit{Limit: 10, Window: time.Hour, Instances: 3}), WithTimeout(20*time.Millisecond))
	now := time.Unix(1_800_000_000, 0).Truncate(time.Hour)
	c.opts.local.now = func() time.Time { return now }
	allowed := func(key string) int {
		n := 0
		for range 6 {
			d, err := c.Check(context.Background(), Request{Key: key, Policy: "p"})
			if err != nil || !d.Degraded {
				t.Fatalf("%+v %v, want a degraded decision", d, err)
			}
			if d.Allowed {
				n++
			}
		}
		return n
	}
	if n := allowed("k"); n != 4 {
		t.Fatalf("%d allowed alone, want ceil(10/3) = 4", n)
	}
	if n := allowed("other"); n != 4 {
		t.Fatalf("another key: %d allowed, want its own 4", n)
	}
	now = now.Add(time.Hour)
	if n := allowed("k"); n != 4 {
		t.Fatalf("the next window: %d allowed, want 4", n)
	}
	if d, err := c.Check(context.Background(), Request{Key: "k", Policy: "unknown"}); err != nil || d.Allowed || !d.Degraded {
		t.Fatalf("a policy without a local limit: %+v %v, want refused", d, err)
	}
}

// TestDegradedDecisionDecoded: a node's "degraded":true reaches Decision.
func TestDegradedDecisionDecoded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"allowed":true,"limit":9,"remaining":2,"reset_after_ms":1000,"retry_after_ms":0,"delay_ms":0,"degraded":true}`))
	}))
	defer srv.Close()
	c := mustNew(t, []string{strings.TrimPrefix(srv.URL, "http://")}, WithCoalescing(Coalescing{Disabled: true}))
	d, err := c.Check(context.Background(), Request{Key: "k", Policy: "p"})
	if err != nil || !d.Allowed || !d.Degraded || d.Remaining != 2 {
		t.Fatalf("%+v %v", d, err)
	}
}
