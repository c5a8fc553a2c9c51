package simulate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// TestParseTraceBound: a caller's bound on the requests is enforced exactly
// (blank and comment lines do not count), and 0 means none.
func TestParseTraceBound(t *testing.T) {
	trace := "# three\n1 a\n\n2 a\n3 a 0\n"
	if got, err := ParseTrace(strings.NewReader(trace), 3); err != nil || len(got) != 3 {
		t.Fatalf("bound 3: %v, %v", got, err)
	}
	if got, err := ParseTrace(strings.NewReader(trace), 0); err != nil || len(got) != 3 {
		t.Fatalf("no bound: %v, %v", got, err)
	}
	var tl *TooLongError
	if _, err := ParseTrace(strings.NewReader(trace), 2); !errors.As(err, &tl) || tl.Max != 2 {
		t.Fatalf("bound 2: %v, want a TooLongError", err)
	}
}

// TestSpecsCompareOptions: burst goes to the buckets only and count_refused
// to sliding_log only; spec errors name the JSON field.
func TestSpecsCompareOptions(t *testing.T) {
	specs, err := Specs(algo.Config{Limit: 2, Window: "1s", Burst: 5, CountRefused: true}, algo.Algorithms)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Algorithm.HasBurst() != (s.Burst == 5) || s.CountRefused != (s.Algorithm == algo.SlidingLog) {
			t.Errorf("%s: burst %d count_refused %v", s.Algorithm, s.Burst, s.CountRefused)
		}
	}
	var fe *algo.FieldError
	if _, err := Specs(algo.Config{Limit: 2}, algo.Algorithms[:1]); !errors.As(err, &fe) || fe.Field != "window" {
		t.Fatalf("no window: %v, want a field error naming window", err)
	}
}

// TestReplayAndSummary: one state per key, peeks counted as neither.
func TestReplayAndSummary(t *testing.T) {
	s, err := algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "10s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	trace := []Request{{0, "a", 1}, {0, "b", 1}, {1e9, "a", 1}, {2e9, "a", 0}}
	run, err := Replay(s, trace)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, false, false}
	for i, d := range run.Decisions {
		if d.Allowed != want[i] {
			t.Errorf("request %d allowed %v, want %v", i, d.Allowed, want[i])
		}
	}
	got := run.Summary(trace)
	if len(got) != 2 || got[0] != (KeyCounts{"a", 1, 1}) || got[1] != (KeyCounts{"b", 1, 0}) {
		t.Errorf("summary %+v", got)
	}
}

// Under concurrency every admitted request of a trace holds its slot for the
// hold: the third of three requests within the hold of limit 2 is refused
// until the first slot ends.
func TestReplayConcurrency(t *testing.T) {
	s, err := algo.Config{Algorithm: "concurrency", Limit: 2, Hold: "10s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	sec := int64(time.Second)
	run, err := Replay(s, []Request{{Time: 0, Key: "k", Cost: 1}, {Time: 1 * sec, Key: "k", Cost: 1}, {Time: 2 * sec, Key: "k", Cost: 1}, {Time: 10 * sec, Key: "k", Cost: 1}})
	if err != nil {
		t.Fatal(err)
	}
	got := []bool{}
	for _, d := range run.Decisions {
		got = append(got, d.Allowed)
	}
	if fmt.Sprint(got) != "[true true false true]" || run.Decisions[2].RetryAfter != 8*time.Second {
		t.Fatalf("decisions %v, retry_after %v", got, run.Decisions[2].RetryAfter)
	}
}
