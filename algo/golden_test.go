package algo

import (
	"encoding/hex"
	"testing"
	"time"
)

// TestGoldenEncodings pins the storage encodings of specs and states, and the
// decisions that produce them, to bytes written by the release before
// Spec.Window and the decision's durations became time.Duration. Stored keys
// and states (bbolt, Raft log, snapshots) must keep decoding to the same
// values: any change here is a change of on-disk format and needs a new
// version byte, not an edit of these strings.
func TestGoldenEncodings(t *testing.T) {
	type want struct {
		dt, cost                     int64
		allowed                      bool
		remaining                    int64
		resetAfter, retryAfter, wait time.Duration
		state                        string
	}
	t0 := int64(1_735_689_600)*int64(time.Second) + 123_456_789
	for _, tc := range []struct {
		spec  Spec
		bytes string
		steps []want
	}{
		{Spec{Algorithm: FixedWindow, Limit: 3, Window: 60 * time.Second}, "01010380b09dc2df0100000000", []want{
			{0, 1, true, 2, 59876543211, 0, 0, "118080dc82ec8f9a8b1801"},
			{1, 1, true, 1, 59876543210, 0, 0, "118080dc82ec8f9a8b1802"},
			{2, 5, false, 1, 59876543209, Never, 0, "118080dc82ec8f9a8b1802"},
			{400000000, 1, true, 0, 59476543211, 0, 0, "118080dc82ec8f9a8b1803"},
			{5000000000, 1, false, 0, 54876543211, 54876543211, 0, "118080dc82ec8f9a8b1803"},
			{5000000000, 1, false, 0, 54876543211, 54876543211, 0, "118080dc82ec8f9a8b1803"},
			{5000000001, 1, false, 0, 54876543210, 54876543210, 0, "118080dc82ec8f9a8b1803"},
		}},
		{Spec{Algorithm: FixedWindow, Limit: 1000, Calendar: CalendarDay, Timezone: "Europe/Paris"}, "0101e807000000010c4575726f70652f5061726973", []want{
			{0, 1, true, 999, 82799876543211, 0, 0, "1180c0f9fc88a7998b1801"},
			{1, 1, true, 998, 82799876543210, 0, 0, "1180c0f9fc88a7998b1802"},
			{2, 5, true, 993, 82799876543209, 0, 0, "1180c0f9fc88a7998b1807"},
			{400000000, 1, true, 992, 82799476543211, 0, 0, "1180c0f9fc88a7998b1808"},
			{5000000000, 1, true, 991, 82794876543211, 0, 0, "1180c0f9fc88a7998b1809"},
			{5000000000, 1, true, 990, 82794876543211, 0, 0, "1180c0f9fc88a7998b180a"},
			{5000000001, 1, true, 989, 82794876543210, 0, 0, "1180c0f9fc88a7998b180b"},
		}},
		{Spec{Algorithm: SlidingLog, Limit: 3, Window: 10 * time.Second, CountRefused: true}, "01020380c8afa02500010000", []want{
			{0, 1, true, 2, 10000000000, 0, 0, "2101959acbbdec8f9a8b1800010100"},
			{1, 1, true, 1, 10000000000, 0, 0, "2102959acbbdec8f9a8b180102010002"},
			{2, 5, false, 1, 9999999999, Never, 0, "2102959acbbdec8f9a8b180102010002"},
			{400000000, 1, true, 0, 10000000000, 0, 0, "2103959acbbdec8f9a8b188088debe0107050002fe8fbcfd02"},
			{5000000000, 1, false, 0, 10000000000, 5000000001, 0, "2103969acbbdec8f9a8b18ffe397d0120b0500fe8fbcfd0280b8f3a222"},
			{5000000000, 1, false, 0, 10000000000, 5400000000, 0, "210395a2a9fced8f9a8b1880dcb9911107060081b8f3a22202"},
			{5000000001, 1, false, 0, 10000000000, 9999999999, 0, "210395fee28dff8f9a8b18010301010202"},
		}},
		{Spec{Algorithm: SlidingWindow, Limit: 3, Window: 90 * time.Minute}, "01030380e0d3c8949d0100000000", []want{
			{0, 1, true, 2, 10799876543211, 0, 0, "318080dc82ec8f9a8b180100"},
			{1, 1, true, 1, 10799876543210, 0, 0, "318080dc82ec8f9a8b180200"},
			{2, 5, false, 1, 10799876543209, Never, 0, "318080dc82ec8f9a8b180200"},
			{400000000, 1, true, 0, 10799476543211, 0, 0, "318080dc82ec8f9a8b180300"},
			{5000000000, 1, false, 0, 10794876543211, 7194876543211, 0, "318080dc82ec8f9a8b180300"},
			{5000000000, 1, false, 0, 10794876543211, 7194876543211, 0, "318080dc82ec8f9a8b180300"},
			{5000000001, 1, false, 0, 10794876543210, 7194876543210, 0, "318080dc82ec8f9a8b180300"},
		}},
		{Spec{Algorithm: TokenBucket, Limit: 2, Window: time.Second, Burst: 3}, "0104028094ebdc0303000000", []want{
			{0, 1, true, 2, 500000000, 0, 0, "41959acbbdec8f9a8b188094ebdc03"},
			{1, 1, true, 1, 999999999, 0, 0, "41969acbbdec8f9a8b18fea7d6b907"},
			{2, 5, false, 1, 999999998, Never, 0, "41979acbbdec8f9a8b18fca7d6b907"},
			{400000000, 1, true, 0, 1100000000, 0, 0, "4195a2a9fced8f9a8b1880ac859908"},
			{5000000000, 1, true, 2, 500000000, 0, 0, "4195fee28dff8f9a8b188094ebdc03"},
			{5000000000, 1, true, 1, 1000000000, 0, 0, "4195fee28dff8f9a8b1880a8d6b907"},
			{5000000001, 1, true, 0, 1499999999, 0, 0, "4196fee28dff8f9a8b18febbc1960b"},
		}},
		{Spec{Algorithm: LeakyBucket, Limit: 2, Window: 1500 * time.Millisecond, Burst: 3}, "01050280dea0cb0503000000", []want{
			{0, 1, true, 2, 750000000, 0, 0, "51959acbbdec8f9a8b1880dea0cb05"},
			{1, 1, true, 1, 1499999999, 0, 749999999, "51969acbbdec8f9a8b18febbc1960b"},
			{2, 5, false, 1, 1499999998, Never, 0, "51979acbbdec8f9a8b18fcbbc1960b"},
			{400000000, 1, true, 0, 1850000000, 0, 1100000000, "5195a2a9fced8f9a8b18808aa6e40d"},
			{5000000000, 1, true, 2, 750000000, 0, 0, "5195fee28dff8f9a8b1880dea0cb05"},
			{5000000000, 1, true, 1, 1500000000, 0, 750000000, "5195fee28dff8f9a8b1880bcc1960b"},
			{5000000001, 1, true, 0, 2249999999, 0, 1499999999, "5196fee28dff8f9a8b18fe99e2e110"},
		}},
	} {
		s, err := tc.spec.Validate()
		if err != nil {
			t.Fatalf("%+v: %v", tc.spec, err)
		}
		if got := hex.EncodeToString(AppendSpec(nil, s)); got != tc.bytes {
			t.Errorf("AppendSpec(%+v) = %s, want %s", s, got, tc.bytes)
		}
		if back, _, err := DecodeSpec(AppendSpec(nil, s)); err != nil || back != s {
			t.Errorf("DecodeSpec(AppendSpec(%+v)) = %+v, %v", s, back, err)
		}
		var state []byte
		for i, w := range tc.steps {
			d, next, err := Decide(nil, &s, state, t0+w.dt, w.cost)
			if err != nil {
				t.Fatalf("%v step %d: %v", s.Algorithm, i, err)
			}
			wd := Decision{Allowed: w.allowed, Limit: s.Limit, Remaining: w.remaining, ResetAfter: w.resetAfter, RetryAfter: w.retryAfter, Delay: w.wait}
			if d != wd {
				t.Errorf("%v step %d: decision %+v, want %+v", s.Algorithm, i, d, wd)
			}
			if got := hex.EncodeToString(next); got != w.state {
				t.Errorf("%v step %d: state %s, want %s", s.Algorithm, i, got, w.state)
			}
			state = next
		}
	}
}
