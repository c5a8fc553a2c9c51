package algo

import (
	"testing"
	"time"
)

// A debt is refused until exactly the RetryAfter Decide reports from it, for
// every algorithm that can overdraw: fails if a bucket's debt were clamped
// to its capacity (the refusal would end early) or the retry were not exact.
func TestDebitRefusesUntilTheDebtHasRefilledExactly(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 7, 0, time.UTC).UnixNano()
	for _, c := range []Config{
		{Algorithm: "fixed_window", Limit: 10, Window: "1m"},
		{Algorithm: "sliding_window", Limit: 10, Window: "1m"},
		{Algorithm: "token_bucket", Limit: 10, Window: "1m"},
		{Algorithm: "token_bucket", Limit: 7, Window: "1m", Burst: 3},
		{Algorithm: "leaky_bucket", Limit: 10, Window: "1m"},
	} {
		s := mustSpec(t, c)
		_, st, _ := Decide(nil, &s, nil, now, 4)
		next, d, err := Debit(nil, &s, st, now, 25) // 4 + 25 of 10 (or burst 3)
		if err != nil {
			t.Fatalf("%s: %v", c.Algorithm, err)
		}
		if d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("%s: a key in debt answered %+v", c.Algorithm, d)
		}
		debt, err := Debt(&s, next, now)
		if err != nil || debt <= 0 {
			t.Fatalf("%s: debt %d %v", c.Algorithm, debt, err)
		}
		at := now + int64(d.RetryAfter)
		if dd, _, _ := Decide(nil, &s, next, at-1, 1); dd.Allowed {
			t.Fatalf("%s: allowed 1ns before the retry_after the debt gave", c.Algorithm)
		}
		if dd, _, _ := Decide(nil, &s, next, at, 1); !dd.Allowed {
			t.Fatalf("%s: still refused at the retry_after the debt gave (%v)", c.Algorithm, d.RetryAfter)
		}
		// Two debits are one of their sum.
		a, _, _ := Debit(nil, &s, st, now, 10)
		b, _, _ := Debit(nil, &s, a, now, 15)
		for _, dt := range []int64{0, int64(time.Second), int64(40 * time.Second), int64(3 * time.Minute)} {
			x, _, _ := Decide(nil, &s, b, now+dt, 1)
			y, _, _ := Decide(nil, &s, next, now+dt, 1)
			if x != y {
				t.Fatalf("%s at +%v: debits of 10 then 15 answer %+v, one of 25 %+v", c.Algorithm, time.Duration(dt), x, y)
			}
		}
	}
}

func TestDebitRefusesWhatCannotHoldADebt(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: "sliding_log", Limit: 10, Window: "1m"},
		{Algorithm: "concurrency", Limit: 10, Hold: "1m"},
	} {
		s := mustSpec(t, c)
		if _, _, err := Debit(nil, &s, nil, 1, 1); err == nil {
			t.Fatalf("%s: debit accepted", c.Algorithm)
		}
	}
	s := mustSpec(t, Config{Algorithm: "fixed_window", Limit: 10, Window: "1m"})
	st, _, _ := Debit(nil, &s, nil, 1, MaxLimit)
	if _, _, err := Debit(nil, &s, st, 1, 1); err == nil {
		t.Fatal("a count past MaxLimit was accepted")
	}
}

// A credit returns at most what is still spent, and nothing once the window
// it was spent in has rolled (fails if it credited the new window).
func TestCreditIsBoundedByTheWindowItWasSpentIn(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 7, 0, time.UTC).UnixNano()
	for _, c := range []Config{
		{Algorithm: "fixed_window", Limit: 10, Window: "1m"},
		{Algorithm: "sliding_window", Limit: 10, Window: "1m"},
		{Algorithm: "token_bucket", Limit: 10, Window: "1m"},
		{Algorithm: "leaky_bucket", Limit: 10, Window: "1m"},
	} {
		s := mustSpec(t, c)
		win, _ := s.WindowStart(nil, now)
		_, st, _ := Decide(nil, &s, nil, now, 6)
		n, next, changed, err := Credit(nil, &s, st, now, win, 4)
		if err != nil || n != 4 || !changed {
			t.Fatalf("%s: credit 4 of 6: %d %v %v", c.Algorithm, n, changed, err)
		}
		if d, _, _ := Decide(nil, &s, next, now, 0); d.Remaining != 8 {
			t.Fatalf("%s: remaining %d after the credit, want 8", c.Algorithm, d.Remaining)
		}
		n, _, _, _ = Credit(nil, &s, st, now, win, 100)
		if n != 6 {
			t.Fatalf("%s: credited %d of the 6 spent", c.Algorithm, n)
		}
		later := now + int64(time.Minute)
		n, _, _, _ = Credit(nil, &s, st, later, win, 4)
		switch c.Algorithm {
		case "fixed_window", "sliding_window":
			if n != 0 {
				t.Fatalf("%s: credited %d into the next window", c.Algorithm, n)
			}
		default:
			if n != 0 { // the bucket has refilled by then
				t.Fatalf("%s: credited %d to a full bucket", c.Algorithm, n)
			}
		}
	}
}
