package algo

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

func mustSpec(t testing.TB, c Config) Spec {
	t.Helper()
	s, err := c.Spec()
	if err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	return s
}

// step is one request in a scripted scenario and the decision it must get.
type step struct {
	t, cost int64
	want    Decision // Limit is filled in from the spec
}

func runSteps(t *testing.T, s Spec, steps []step) {
	t.Helper()
	var state []byte
	for i, st := range steps {
		d, next, err := Decide(nil, &s, state, st.t, st.cost)
		if err != nil {
			t.Fatalf("step %d (t=%d cost=%d): %v", i, st.t, st.cost, err)
		}
		want := st.want
		want.Limit = s.Limit
		if d != want {
			t.Fatalf("step %d (t=%d cost=%d):\n got %+v\nwant %+v", i, st.t, st.cost, d, want)
		}
		if (next == nil) != (d.ResetAfter == 0) {
			t.Fatalf("step %d: next = %x but ResetAfter = %d", i, next, d.ResetAfter)
		}
		state = next
	}
}

func TestFixedWindowBoundaries(t *testing.T) {
	s := mustSpec(t, Config{Algorithm: "fixed_window", Limit: 2, Window: "10s"})
	runSteps(t, s, []step{
		{0, 1, Decision{Allowed: true, Remaining: 1, ResetAfter: 10 * time.Second}},
		{10*sec - 1, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 1}},
		{10*sec - 1, 1, Decision{RetryAfter: 1, ResetAfter: 1}},
		// The window [10 s, 20 s) starts empty at exactly 10 s.
		{10 * sec, 2, Decision{Allowed: true, ResetAfter: 10 * time.Second}},
		{15 * sec, 0, Decision{RetryAfter: 5 * time.Second, ResetAfter: 5 * time.Second}}, // peek
		{15 * sec, 3, Decision{RetryAfter: Never, ResetAfter: 5 * time.Second}},
		// A window that was skipped leaves nothing behind.
		{35 * sec, 0, Decision{Allowed: true, Remaining: 2}},
	})
}

func TestSlidingLogBoundaries(t *testing.T) {
	s := mustSpec(t, Config{Algorithm: "sliding_log", Limit: 3, Window: "10s"})
	runSteps(t, s, []step{
		// Many requests at the same nanosecond each count.
		{sec, 1, Decision{Allowed: true, Remaining: 2, ResetAfter: 10 * time.Second}},
		{sec, 1, Decision{Allowed: true, Remaining: 1, ResetAfter: 10 * time.Second}},
		{4 * sec, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 10 * time.Second}},
		// Full: the two at 1 s age out at exactly 11 s.
		{5 * sec, 1, Decision{RetryAfter: 6 * time.Second, ResetAfter: 9 * time.Second}},
		{5 * sec, 2, Decision{RetryAfter: 6 * time.Second, ResetAfter: 9 * time.Second}},
		{5 * sec, 3, Decision{RetryAfter: 9 * time.Second, ResetAfter: 9 * time.Second}},
		{11*sec - 1, 1, Decision{RetryAfter: 1, ResetAfter: 3*time.Second + 1}},
		// Exactly one window after the 1 s requests: (1 s, 11 s] excludes them.
		{11 * sec, 2, Decision{Allowed: true, Remaining: 0, ResetAfter: 10 * time.Second}},
		{11 * sec, 0, Decision{RetryAfter: 3 * time.Second, ResetAfter: 10 * time.Second}},
		{11 * sec, 4, Decision{RetryAfter: Never, ResetAfter: 10 * time.Second}},
		{21 * sec, 0, Decision{Allowed: true, Remaining: 3}},
	})
}

func TestSlidingLogCountRefused(t *testing.T) {
	s := mustSpec(t, Config{Algorithm: "sliding_log", Limit: 2, Window: "10s", CountRefused: true})
	runSteps(t, s, []step{
		{0, 1, Decision{Allowed: true, Remaining: 1, ResetAfter: 10 * time.Second}},
		{sec, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 10 * time.Second}},
		// Refused and logged: the retry time counts this request, so it is
		// when the one at 1 s ages out, not the one at 0.
		{5 * sec, 1, Decision{RetryAfter: 6 * time.Second, ResetAfter: 10 * time.Second}},
		// A client that keeps sending too fast gets nothing through: each
		// refusal pushes the retry time later.
		{10 * sec, 1, Decision{RetryAfter: 5 * time.Second, ResetAfter: 10 * time.Second}},
		{14 * sec, 1, Decision{RetryAfter: 6 * time.Second, ResetAfter: 10 * time.Second}},
		// A peek is not logged.
		{19 * sec, 0, Decision{RetryAfter: time.Second, ResetAfter: 5 * time.Second}},
		// An impossible cost is not logged either.
		{19 * sec, 3, Decision{RetryAfter: Never, ResetAfter: 5 * time.Second}},
		// After pausing for a window it gets through again.
		{24 * sec, 1, Decision{Allowed: true, Remaining: 1, ResetAfter: 10 * time.Second}},
	})
}

func TestSlidingWindowBoundaries(t *testing.T) {
	s := mustSpec(t, Config{Algorithm: "sliding_window", Limit: 10, Window: "60s"})
	steps := []step{{0, 10, Decision{Allowed: true, ResetAfter: 120 * time.Second}}}
	// In [60 s, 120 s) the previous window weighs (60 − r)/60 × 10; a request
	// fits once that is ≤ 9, i.e. from r = 6 s on.
	steps = append(steps,
		step{60 * sec, 1, Decision{RetryAfter: 6 * time.Second, ResetAfter: 60 * time.Second}},
		step{66*sec - 1, 1, Decision{RetryAfter: 1, ResetAfter: 54*time.Second + 1}},
		step{66 * sec, 1, Decision{Allowed: true, ResetAfter: 114 * time.Second}},
		// weighted = 9 + 1 = 10: the next fits once the previous share ≤ 8.
		step{66 * sec, 0, Decision{RetryAfter: 6 * time.Second, ResetAfter: 114 * time.Second}},
		step{90 * sec, 0, Decision{Allowed: true, Remaining: 4, ResetAfter: 90 * time.Second}},
		// A cost that cannot fit in this window waits for the next one, where
		// this window's 1 weighs (60 − r)/60: 9 fits at its start, 10 only
		// when the weight reaches 0, at the start of the window after.
		step{90 * sec, 9, Decision{Remaining: 4, RetryAfter: 30 * time.Second, ResetAfter: 90 * time.Second}},
		step{90 * sec, 10, Decision{Remaining: 4, RetryAfter: 90 * time.Second, ResetAfter: 90 * time.Second}},
		step{100 * sec, 11, Decision{Remaining: 5, RetryAfter: Never, ResetAfter: 80 * time.Second}},
		// Only the current window counted: it expires at the end of the next.
		step{179*sec + 1, 0, Decision{Allowed: true, Remaining: 9, ResetAfter: time.Second - 1}},
		step{240 * sec, 0, Decision{Allowed: true, Remaining: 10}},
	)
	runSteps(t, s, steps)

	// A fraction that does not divide: limit 3 per 7 ns, previous window full.
	// (7 − r) × 3 ≤ 2 × 7 first holds at r = 3.
	s = mustSpec(t, Config{Algorithm: "sliding_window", Limit: 3, Window: "7ns"})
	runSteps(t, s, []step{
		{0, 3, Decision{Allowed: true, ResetAfter: 14}},
		{7, 1, Decision{RetryAfter: 3, ResetAfter: 7}},
		{9, 1, Decision{RetryAfter: 1, ResetAfter: 5}},
		{10, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 11}},
	})
}

func TestTokenBucketBoundaries(t *testing.T) {
	s := mustSpec(t, Config{Algorithm: "token_bucket", Limit: 10, Window: "60s", Burst: 2})
	runSteps(t, s, []step{
		{0, 0, Decision{Allowed: true, Remaining: 2}}, // starts full
		{0, 2, Decision{Allowed: true, Remaining: 0, ResetAfter: 12 * time.Second}},
		// One token every 6 s, exactly.
		{6*sec - 1, 1, Decision{RetryAfter: 1, ResetAfter: 6*time.Second + 1}},
		{6 * sec, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 12 * time.Second}},
		{9 * sec, 2, Decision{RetryAfter: 9 * time.Second, ResetAfter: 9 * time.Second}},
		{9 * sec, 3, Decision{RetryAfter: Never, ResetAfter: 9 * time.Second}},
		{18 * sec, 0, Decision{Allowed: true, Remaining: 2}},
	})
	// 3 tokens per 7 ns: after taking one token, the bucket is full again
	// after 7/3 ns, i.e. from the 3rd nanosecond.
	s = mustSpec(t, Config{Algorithm: "token_bucket", Limit: 3, Window: "7ns", Burst: 1})
	runSteps(t, s, []step{
		{100, 1, Decision{Allowed: true, ResetAfter: 3}},
		{102, 1, Decision{RetryAfter: 1, ResetAfter: 1}},
		{103, 1, Decision{Allowed: true, ResetAfter: 3}},
	})
}

func TestLeakyBucketDelays(t *testing.T) {
	s := mustSpec(t, Config{Algorithm: "leaky_bucket", Limit: 10, Window: "60s", Burst: 3})
	runSteps(t, s, []step{
		// Admitted requests leave 6 s apart.
		{0, 1, Decision{Allowed: true, Remaining: 2, ResetAfter: 6 * time.Second}},
		{0, 1, Decision{Allowed: true, Remaining: 1, ResetAfter: 12 * time.Second, Delay: 6 * time.Second}},
		{sec, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 17 * time.Second, Delay: 11 * time.Second}},
		// The queue is full until the first request has drained.
		{2 * sec, 1, Decision{RetryAfter: 4 * time.Second, ResetAfter: 16 * time.Second}},
		{2 * sec, 0, Decision{RetryAfter: 4 * time.Second, ResetAfter: 16 * time.Second}},
		{6 * sec, 0, Decision{Allowed: true, Remaining: 1, ResetAfter: 12 * time.Second, Delay: 12 * time.Second}},
		{6 * sec, 4, Decision{Remaining: 1, RetryAfter: Never, ResetAfter: 12 * time.Second}},
		{18 * sec, 0, Decision{Allowed: true, Remaining: 3}},
	})
}

// TestClockBackwards: a now earlier than the key's latest time (a new leader
// whose clock lags) is decided as of that time, never rewinding the state.
func TestClockBackwards(t *testing.T) {
	for _, s := range validSpecs(t) {
		if s.Calendar != CalendarNone {
			continue
		}
		// The key is first filled completely (the next request is refused)
		// and partly (it is allowed, and a leaky bucket delays it).
		for _, fill := range []int64{s.burst(), max(s.burst()-1, 1), 1} {
			t.Run(fmt.Sprintf("%s/fill=%d", s.Algorithm, fill), func(t *testing.T) {
				t0 := 1000 * int64(s.Window)
				_, state, err := Decide(nil, &s, nil, t0, fill)
				if err != nil {
					t.Fatal(err)
				}
				ahead, _, err := Decide(nil, &s, state, t0, 1)
				if err != nil {
					t.Fatal(err)
				}
				behind, _, err := Decide(nil, &s, state, t0-int64(s.Window)/2, 1)
				if err != nil {
					t.Fatal(err)
				}
				lag := s.Window / 2
				ahead.ResetAfter += lag
				if ahead.RetryAfter > 0 {
					ahead.RetryAfter += lag
				}
				// An admitted request leaves the leaky bucket after the queue
				// ahead of it, counted from the key's (later) time.
				if ahead.Allowed && s.Algorithm == LeakyBucket {
					ahead.Delay += lag
				}
				if behind != ahead {
					t.Fatalf("decided at t0−%d: %+v; at t0, shifted: %+v", lag, behind, ahead)
				}
			})
		}
	}
}

func TestDecideErrors(t *testing.T) {
	s := mustSpec(t, Config{Algorithm: "fixed_window", Limit: 1, Window: "1s"})
	tests := []struct {
		name      string
		s         *Spec
		now, cost int64
	}{
		{"nil spec", nil, 0, 1},
		{"negative cost", &s, 0, -1},
		{"negative time", &s, -1, 1},
		{"time too late", &s, MaxTime + 1, 1},
		{"unvalidated spec", &Spec{Algorithm: SlidingWindow, Limit: 1}, 0, 1},
		{"unknown algorithm", &Spec{Algorithm: 9, Limit: 1, Window: 1}, 0, 1},
		{"unknown zone", &Spec{Algorithm: FixedWindow, Limit: 1, Calendar: CalendarDay, Timezone: "Nowhere/Land"}, 0, 1},
	}
	for _, tt := range tests {
		if d, next, err := Decide(nil, tt.s, nil, tt.now, tt.cost); err == nil {
			t.Errorf("%s: Decide = %+v, %x; want an error", tt.name, d, next)
		}
	}
}

// TestStateHandling: states are never written, next never aliases them, dst
// is appended to, a state of another algorithm is fresh, a garbled state of
// the right algorithm is an error.
func TestStateHandling(t *testing.T) {
	specs := validSpecs(t)
	for _, s := range specs {
		t.Run(s.Config().Algorithm, func(t *testing.T) {
			now := int64(1_700_000_000) * sec
			_, state, err := Decide(nil, &s, nil, now, 1)
			if err != nil || state == nil {
				t.Fatalf("first request: %x, %v", state, err)
			}
			// Grow the state a little (sliding_log gets several entries).
			for i := int64(1); i < 3; i++ {
				if _, state, err = Decide(nil, &s, state, now+i, 1); err != nil {
					t.Fatal(err)
				}
			}
			orig := bytes.Clone(state)
			dst := make([]byte, 3, 256)
			d, next, err := Decide(dst, &s, state, now+3, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(state, orig) {
				t.Fatalf("Decide modified its input state")
			}
			if len(next) < 3 || &next[0] != &dst[0] {
				t.Fatalf("next was not appended to dst")
			}
			// A peek leaves a state that decides everything later the same
			// (the buckets re-base it to now; the logs prune it).
			for _, later := range []int64{now + 3, now + int64(s.Window)/2 + 7, now + int64(s.Window)} {
				for _, cost := range []int64{0, 1, 2, s.Limit} {
					a, _, err1 := Decide(nil, &s, state, later, cost)
					b, _, err2 := Decide(nil, &s, next[3:], later, cost)
					if a != b || err1 != nil || err2 != nil {
						t.Fatalf("at +%d cost %d: before the peek %+v, %v; after %+v, %v", later-now, cost, a, err1, b, err2)
					}
				}
			}

			// A state written by another algorithm is a fresh key.
			for _, other := range specs {
				if other.Algorithm == s.Algorithm {
					continue
				}
				_, foreign, err := Decide(nil, &other, nil, now, 1)
				if err != nil {
					t.Fatal(err)
				}
				got, _, err := Decide(nil, &s, foreign, now+3, 0)
				want, _, _ := Decide(nil, &s, nil, now+3, 0)
				if err != nil || got != want {
					t.Fatalf("state of %v: %+v, %v; want fresh %+v", other.Algorithm, got, err, want)
				}
			}
			// An unknown version of the same algorithm is fresh too.
			newer := append([]byte{byte(s.Algorithm)<<4 | 2}, state[1:]...)
			want, _, _ := Decide(nil, &s, nil, now+3, 0)
			if got, _, err := Decide(nil, &s, newer, now+3, 0); err != nil || got != want {
				t.Fatalf("unknown version: %+v, %v; want fresh %+v", got, err, want)
			}
			if d == want {
				t.Fatalf("the test state is indistinguishable from a fresh one: %+v", d)
			}

			// Every truncation of a valid state is an error.
			for i := 1; i < len(state); i++ {
				if _, _, err := Decide(nil, &s, state[:i], now+3, 1); err == nil {
					t.Fatalf("state truncated to %d of %d bytes: no error", i, len(state))
				}
			}
			// So are trailing bytes.
			if _, _, err := Decide(nil, &s, append(bytes.Clone(state), 0), now+3, 1); err == nil {
				t.Fatalf("state with a trailing byte: no error")
			}
		})
	}
}

func FuzzDecide(f *testing.F) {
	specs := validSpecs(f)
	now := int64(1_700_000_000) * sec
	for i, s := range specs {
		var state []byte
		for j := int64(0); j < 4; j++ {
			_, state, _ = Decide(nil, &s, state, now+j*int64(time.Millisecond), 1)
		}
		f.Add(uint8(i), state, int64(0), int64(1))
		f.Add(uint8(i), state, int64(time.Hour), int64(0))
	}
	f.Fuzz(func(t *testing.T, which uint8, state []byte, dt, cost int64) {
		s := specs[int(which)%len(specs)]
		if len(state) > 0 {
			state[0] = stateTag(s.Algorithm) // reach the decoder
		}
		at := now + dt%(10*int64(time.Hour))
		orig := bytes.Clone(state)
		d, next, err := Decide(nil, &s, state, at, cost)
		if !bytes.Equal(state, orig) {
			t.Fatal("Decide modified its input state")
		}
		if err != nil {
			return
		}
		if (next == nil) != (d.ResetAfter == 0) {
			t.Fatalf("next %x with ResetAfter %d", next, d.ResetAfter)
		}
		// Whatever Decide writes, it reads back. Not so for sliding_log: its
		// middle entries are only decoded as they age out (the price of a
		// per-decision cost independent of the limit), so a garbled middle
		// passes through and is reported when it reaches the oldest end.
		if _, _, err := Decide(nil, &s, next, at, 0); err != nil && s.Algorithm != SlidingLog {
			t.Fatalf("Decide cannot read its own state %x: %v", next, err)
		}
	})
}

// A bucket written under a larger burst and read under a smaller one holds
// no more than the new capacity: nothing remains (not a wrapped-around
// count), and the retry and reset times are the new capacity's.
func TestBucketBurstShrinkClampsLevel(t *testing.T) {
	for _, a := range []string{"token_bucket", "leaky_bucket"} {
		t.Run(a, func(t *testing.T) {
			wide := mustSpec(t, Config{Algorithm: a, Limit: 10, Burst: 20, Window: "10s"})
			narrow := mustSpec(t, Config{Algorithm: a, Limit: 10, Burst: 5, Window: "10s"})
			d, full, err := Decide(nil, &wide, nil, 0, 20) // the whole burst of 20
			if err != nil || !d.Allowed || d.Remaining != 0 {
				t.Fatalf("drain the wide bucket: %+v %v", d, err)
			}
			d, _, err = Decide(nil, &narrow, full, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := Decision{Limit: 10, Remaining: 0, RetryAfter: time.Second, ResetAfter: 5 * time.Second}
			if d != want {
				t.Fatalf("peek under burst 5 of a bucket drained under burst 20:\n got %+v\nwant %+v", d, want)
			}
		})
	}
}
