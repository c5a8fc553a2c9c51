package algo

import (
	"testing"
	"time"
)

const sec = int64(time.Second)

type request struct {
	t    int64 // ns
	cost int64
}

// edgeTrace: ten requests at t = 59 s then ten at t = 60 s.
func edgeTrace() []request {
	var rs []request
	for i := 0; i < 10; i++ {
		rs = append(rs, request{59 * sec, 1})
	}
	for i := 0; i < 10; i++ {
		rs = append(rs, request{60 * sec, 1})
	}
	return rs
}

// earlyThenLaterTrace: one request at each of t = 0..9 s, then ten at t = 90 s.
func earlyThenLaterTrace() []request {
	var rs []request
	for i := int64(0); i < 10; i++ {
		rs = append(rs, request{i * sec, 1})
	}
	for i := 0; i < 10; i++ {
		rs = append(rs, request{90 * sec, 1})
	}
	return rs
}

// admitted replays a trace against one key and counts admitted requests.
func admitted(t *testing.T, s Spec, trace []request) int {
	t.Helper()
	var state []byte
	n := 0
	for _, r := range trace {
		d, next, err := Decide(nil, &s, state, r.t, r.cost)
		if err != nil {
			t.Fatalf("Decide(t=%d): %v", r.t, err)
		}
		if d.Allowed {
			n++
		}
		state = next
	}
	return n
}

// TestIssueTable is the table from the issue (limit 10 per 60 s). The leaky
// bucket row is not in the issue; it admits what the token bucket admits.
func TestIssueTable(t *testing.T) {
	tests := []struct {
		alg         Algorithm
		edge, early int
	}{
		{FixedWindow, 20, 20},
		{SlidingLog, 10, 20},
		{SlidingWindow, 10, 15},
		{TokenBucket, 10, 20},
		{LeakyBucket, 10, 20},
	}
	for _, tt := range tests {
		t.Run(tt.alg.String(), func(t *testing.T) {
			s, err := Spec{Algorithm: tt.alg, Limit: 10, Window: 60 * time.Second}.Validate()
			if err != nil {
				t.Fatal(err)
			}
			if got := admitted(t, s, edgeTrace()); got != tt.edge {
				t.Errorf("edge: admitted %d, want %d", got, tt.edge)
			}
			if got := admitted(t, s, earlyThenLaterTrace()); got != tt.early {
				t.Errorf("early_then_later: admitted %d, want %d", got, tt.early)
			}
		})
	}
}
