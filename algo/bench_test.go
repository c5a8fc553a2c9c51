package algo

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// epoch2025 keeps benchmark timestamps at realistic magnitudes (9-byte varints).
const epoch2025 = int64(1_735_689_600) * sec

// steadyState drives one key with requests every window/limit × 0.95 (just
// above the rate, so some are refused) for two windows and returns the state.
func steadyState(tb testing.TB, s Spec) (state []byte, now, step int64) {
	step = int64(s.Window) / s.Limit * 95 / 100
	now = epoch2025
	for i := int64(0); i < 2*s.Limit; i++ {
		var err error
		if _, state, err = Decide(nil, &s, state, now, 1); err != nil {
			tb.Fatal(err)
		}
		now += step
	}
	return state, now, step
}

// BenchmarkDecide: ns per decision for one key under steady traffic at about
// the limit, and the key's state size. sliding_log_limit10 and
// sliding_log_limit10000 see the same traffic shape; their ns/op stay within a
// small factor because only the aged-out entry is decoded and the appended
// one encoded (the rest is one memcpy).
func BenchmarkDecide(b *testing.B) {
	cases := []struct {
		name string
		c    Config
	}{
		{"fixed_window", Config{Algorithm: "fixed_window", Limit: 100, Window: "1s"}},
		{"fixed_window_calendar_day", Config{Algorithm: "fixed_window", Limit: 100, Calendar: "day", Timezone: "Europe/Paris"}},
		{"sliding_log_limit10", Config{Algorithm: "sliding_log", Limit: 10, Window: "1s"}},
		{"sliding_log_limit10000", Config{Algorithm: "sliding_log", Limit: 10000, Window: "1s"}},
		{"sliding_log_count_refused_limit10000", Config{Algorithm: "sliding_log", Limit: 10000, Window: "1s", CountRefused: true}},
		{"sliding_window", Config{Algorithm: "sliding_window", Limit: 100, Window: "1s"}},
		{"token_bucket", Config{Algorithm: "token_bucket", Limit: 100, Window: "1s"}},
		{"leaky_bucket", Config{Algorithm: "leaky_bucket", Limit: 100, Window: "1s"}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			s := mustSpec(b, tc.c)
			if tc.c.Calendar != "" {
				s.Window = time.Second // for the traffic rate only
				defer func() { s.Window = 0 }()
			}
			state, now, step := steadyState(b, s)
			if tc.c.Calendar != "" {
				s.Window = 0
			}
			// Two buffers, alternately dst and state: dst must not overlap state.
			bufs := [2][]byte{make([]byte, 0, 2*len(state)+64), make([]byte, 0, 2*len(state)+64)}
			size := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, next, err := Decide(bufs[i&1][:0], &s, state, now, 1)
				if err != nil {
					b.Fatal(err)
				}
				if next != nil {
					bufs[i&1] = next
				}
				state = next
				size = len(state)
				now += step
			}
			b.ReportMetric(float64(size), "bytes/key")
		})
	}
}

// BenchmarkSlidingLogSize reports the encoded size per logged request for
// 1,000 requests about 1 ms apart (target: ≤ 4 bytes).
func BenchmarkSlidingLogSize(b *testing.B) {
	var perRequest float64
	for i := 0; i < b.N; i++ {
		perRequest = slidingLogBytesPerRequest(b, int64(i))
	}
	b.ReportMetric(perRequest, "bytes/request")
}

func slidingLogBytesPerRequest(tb testing.TB, seed int64) float64 {
	s := mustSpec(tb, Config{Algorithm: "sliding_log", Limit: 1000, Window: "10s"})
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	var state []byte
	now := epoch2025
	for i := 0; i < 1000; i++ {
		d, next, err := Decide(nil, &s, state, now, 1)
		if err != nil || !d.Allowed {
			tb.Fatalf("request %d: %+v, %v", i, d, err)
		}
		state = next
		now += int64(time.Millisecond) + rng.Int64N(int64(200*time.Microsecond)) - int64(100*time.Microsecond)
	}
	return float64(len(state)) / 1000
}

// TestStateSizes holds the encodings to their targets: the largest possible
// O(1) state fits in 32 bytes, a sliding log of 1,000 requests ~1 ms apart
// costs at most 4 bytes per request, and same-nanosecond requests share an
// entry.
func TestStateSizes(t *testing.T) {
	worst := map[Algorithm][]byte{
		FixedWindow:   fixedState{start: MaxTime, count: MaxLimit}.appendTo(nil),
		SlidingWindow: windowState{start: MaxTime, cur: MaxLimit, prev: MaxLimit}.appendTo(nil),
		TokenBucket:   bucketState{t: MaxTime, level: mul(MaxLimit, int64(MaxWindow)*10)}.appendTo(nil, TokenBucket),
		LeakyBucket:   bucketState{t: MaxTime, level: mul(MaxLimit, int64(MaxWindow)*10)}.appendTo(nil, LeakyBucket),
	}
	for a, b := range worst {
		if len(b) > 32 {
			t.Errorf("%v: worst-case state is %d bytes, want ≤ 32", a, len(b))
		}
	}
	for seed := int64(0); seed < 3; seed++ {
		if got := slidingLogBytesPerRequest(t, seed); got > 4 {
			t.Errorf("sliding_log: %.2f bytes per request, want ≤ 4", got)
		}
	}
	s := mustSpec(t, Config{Algorithm: "sliding_log", Limit: 1000, Window: "1s"})
	var one, many []byte
	_, one, _ = Decide(nil, &s, nil, epoch2025, 1)
	for i := 0; i < 500; i++ {
		_, many, _ = Decide(nil, &s, many, epoch2025, 1)
	}
	if len(many) > len(one)+3 {
		t.Errorf("500 requests at one instant take %d bytes, one takes %d: want one entry", len(many), len(one))
	}
}

func ExampleDecide() {
	s, err := Config{Algorithm: "token_bucket", Limit: 10, Window: "60s"}.Spec()
	if err != nil {
		panic(err)
	}
	var state []byte
	now := int64(0)
	for i := 0; i < 11; i++ {
		var d Decision
		d, state, _ = Decide(nil, &s, state, now, 1)
		if !d.Allowed {
			fmt.Printf("request %d refused, retry after %v\n", i+1, time.Duration(d.RetryAfter))
		}
	}
	d, _, _ := Decide(nil, &s, state, now+int64(6*time.Second), 1)
	fmt.Println("after 6s allowed:", d.Allowed, "remaining:", d.Remaining)
	// Output:
	// request 11 refused, retry after 6s
	// after 6s allowed: true remaining: 0
}

// BenchmarkSlidingLogLimit: one key under steady traffic at about its limit,
// limit 10 vs 10^6 (a 3 MB log), per decision and per batch of 1,000 checks
// on the key, with Decide (copies the log into dst) and DecideInPlace (keeps
// it in the caller's buffer). The steady state is built with DecideInPlace:
// building 10^6 entries with Decide copies the log 2×10^6 times.
func BenchmarkSlidingLogLimit(b *testing.B) {
	for _, limit := range []int64{10, MaxSlidingLogLimit} {
		s, err := Spec{Algorithm: SlidingLog, Limit: limit, Window: time.Second}.Validate()
		if err != nil {
			b.Fatal(err)
		}
		step := int64(s.Window) / s.Limit * 95 / 100
		now := epoch2025
		var state []byte
		for i := int64(0); i < 2*s.Limit; i++ {
			if _, state, err = DecideInPlace(&s, state, now, 1); err != nil {
				b.Fatal(err)
			}
			now += step
		}
		for _, batch := range []int{1, 1000} {
			for _, inPlace := range []bool{false, true} {
				name := fmt.Sprintf("limit=%d/batch=%d/decide", limit, batch)
				if inPlace {
					name = fmt.Sprintf("limit=%d/batch=%d/in_place", limit, batch)
				}
				b.Run(name, func(b *testing.B) {
					st := append(make([]byte, 0, len(state)*5/4), state...)
					bufs := [2][]byte{make([]byte, 0, 2*len(state)+64), make([]byte, 0, 2*len(state)+64)}
					t := now
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						for j := 0; j < batch; j++ {
							var next []byte
							var err error
							if inPlace {
								_, next, err = DecideInPlace(&s, st, t, 1)
							} else {
								k := (i*batch + j) & 1
								if _, next, err = Decide(bufs[k][:0], &s, st, t, 1); next != nil {
									bufs[k] = next
								}
							}
							if err != nil {
								b.Fatal(err)
							}
							st = next
							t += step
						}
					}
					b.ReportMetric(float64(len(st)), "bytes/key")
				})
			}
		}
	}
}
