package algo

import (
	"testing"
	"time"
)

func TestAdjust(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []Config{
		{Algorithm: "fixed_window", Limit: 10, Window: "1h"},
		{Algorithm: "fixed_window", Limit: 10, Calendar: "day"},
		{Algorithm: "sliding_window", Limit: 10, Window: "1h"},
		{Algorithm: "token_bucket", Limit: 10, Window: "1h"},
		{Algorithm: "leaky_bucket", Limit: 10, Window: "1h"},
	} {
		s, err := c.Spec()
		if err != nil {
			t.Fatal(err)
		}
		_, st, _ := Decide(nil, &s, nil, now, 6) // 4 remain
		applied, st2, d, err := Adjust(nil, &s, st, now, 3)
		if err != nil || applied != 3 || d.Remaining != 7 {
			t.Fatalf("%s: credit 3: applied %d remaining %d %v", c.Algorithm, applied, d.Remaining, err)
		}
		applied, _, d, err = Adjust(nil, &s, st2, now, 100)
		if err != nil || applied != 3 || d.Remaining != 10 {
			t.Fatalf("%s: credit beyond empty: applied %d remaining %d %v", c.Algorithm, applied, d.Remaining, err)
		}
		applied, st3, d, err := Adjust(nil, &s, st2, now, -2)
		if err != nil || applied != -2 || d.Remaining != 5 {
			t.Fatalf("%s: debit 2: applied %d remaining %d %v", c.Algorithm, applied, d.Remaining, err)
		}
		if dd, _, _ := Decide(nil, &s, st3, now, 5); !dd.Allowed {
			t.Fatalf("%s: the adjusted state does not admit what it reports", c.Algorithm)
		}
		applied, _, d, err = Adjust(nil, &s, nil, now, -4)
		if err != nil || applied != -4 || d.Remaining != 6 {
			t.Fatalf("%s: debit a fresh key: applied %d remaining %d %v", c.Algorithm, applied, d.Remaining, err)
		}
	}
	s, _ := Config{Algorithm: "sliding_log", Limit: 10, Window: "1h"}.Spec()
	if _, _, _, err := Adjust(nil, &s, nil, now, 1); err == nil {
		t.Fatal("sliding_log adjusted")
	}
}
