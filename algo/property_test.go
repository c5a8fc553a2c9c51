package algo

import (
	"bytes"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genSpec draws a small spec: windows of a few nanoseconds so that random
// traces hit every boundary instant and the references can scan time.
func genSpec(t *rapid.T, a Algorithm) Spec {
	s := Spec{
		Algorithm: a,
		Limit:     rapid.Int64Range(1, 6).Draw(t, "limit"),
		Window:    time.Duration(rapid.Int64Range(1, 12).Draw(t, "window")),
	}
	switch a {
	case SlidingLog:
		s.CountRefused = rapid.Bool().Draw(t, "count_refused")
	case TokenBucket, LeakyBucket:
		s.Burst = rapid.Int64Range(1, 8).Draw(t, "burst")
	}
	s, err := s.Validate()
	if err != nil {
		t.Fatalf("generated spec: %v", err)
	}
	return s
}

// genTrace draws requests in time order, often several at the same instant
// and often exactly a window apart.
func genTrace(t *rapid.T, s Spec, n int) []request {
	tm := rapid.Int64Range(0, 3*int64(s.Window)).Draw(t, "start")
	rs := make([]request, 0, n)
	for i := 0; i < n; i++ {
		tm += rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Just(int64(s.Window)),
			rapid.Int64Range(0, 2*int64(s.Window)+1),
		).Draw(t, "dt")
		cost := rapid.OneOf(rapid.Just(int64(1)), rapid.Int64Range(0, s.burst()+1)).Draw(t, "cost")
		rs = append(rs, request{tm, cost})
	}
	return rs
}

// decision is one request with what Decide answered.
type decision struct {
	request
	Decision
}

// replay runs a trace through Decide, checking at every step that it matches
// the reference model decision for decision, and that the state
// round-trips through its encoding.
func replay(t *rapid.T, s Spec, trace []request) []decision {
	ref := newRef(s)
	var state []byte
	out := make([]decision, 0, len(trace))
	for i, r := range trace {
		d, next, err := Decide(nil, &s, state, r.t, r.cost)
		if err != nil {
			t.Fatalf("request %d %+v: %v", i, r, err)
		}
		want := refDecide(ref, r.t, r.cost)
		want.Limit = s.Limit
		if d != want {
			t.Fatalf("request %d (t=%d cost=%d) under %+v:\n got %+v\nwant %+v", i, r.t, r.cost, s, d, want)
		}
		if (next == nil) != (d.ResetAfter == 0) {
			t.Fatalf("request %d: next %x, ResetAfter %d", i, next, d.ResetAfter)
		}
		if next != nil {
			if again := reencode(t, s.Algorithm, next); !bytes.Equal(again, next) {
				t.Fatalf("request %d: state %x re-encodes as %x", i, next, again)
			}
		}
		state = next
		out = append(out, decision{r, d})
	}
	return out
}

// reencode decodes a state and encodes it again.
func reencode(t *rapid.T, a Algorithm, state []byte) []byte {
	var b []byte
	var err error
	switch a {
	case FixedWindow:
		var st fixedState
		st, err = decodeFixed(state)
		b = st.appendTo(nil)
	case SlidingLog:
		var v logView
		v, err = decodeLog(state)
		b = v.appendTo(nil)
	case SlidingWindow:
		var st windowState
		st, err = decodeWindow(state)
		b = st.appendTo(nil)
	default:
		var st bucketState
		st, err = decodeBucket(a, state)
		b = st.appendTo(nil, a)
	}
	if err != nil {
		t.Fatalf("decode %x: %v", state, err)
	}
	return b
}

func TestMatchesReference(t *testing.T) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				s := genSpec(t, a)
				replay(t, s, genTrace(t, s, rapid.IntRange(1, 40).Draw(t, "n")))
			})
		})
	}
}

// admittedCost sums the cost admitted in [from, to].
func admittedCost(ds []decision, from, to int64) int64 {
	var n int64
	for _, d := range ds {
		if d.Allowed && d.t >= from && d.t <= to {
			n += d.cost
		}
	}
	return n
}

func TestSlidingLogNeverExceedsLimit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSpec(t, SlidingLog)
		ds := replay(t, s, genTrace(t, s, rapid.IntRange(1, 60).Draw(t, "n")))
		// Every half-open interval (a − W, a] holding admitted cost has one
		// ending at an admitted request.
		for _, d := range ds {
			if n := admittedCost(ds, d.t-int64(s.Window)+1, d.t); n > s.Limit {
				t.Fatalf("%d admitted in (%d, %d], limit %d", n, d.t-int64(s.Window), d.t, s.Limit)
			}
		}
	})
}

func TestFixedWindowNeverExceedsLimit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSpec(t, FixedWindow)
		ds := replay(t, s, genTrace(t, s, rapid.IntRange(1, 60).Draw(t, "n")))
		for _, d := range ds {
			start := d.t - d.t%int64(s.Window)
			if n := admittedCost(ds, start, start+int64(s.Window)-1); n > s.Limit {
				t.Fatalf("%d admitted in window [%d, %d), limit %d", n, start, start+int64(s.Window), s.Limit)
			}
		}
	})
}

func TestBucketsNeverExceedRate(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, LeakyBucket} {
		t.Run(a.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				s := genSpec(t, a)
				ds := replay(t, s, genTrace(t, s, rapid.IntRange(1, 60).Draw(t, "n")))
				// In any interval of length T: at most burst + limit × T/window,
				// compared multiplied out by window.
				for _, from := range ds {
					for _, to := range ds {
						if to.t < from.t {
							continue
						}
						n := admittedCost(ds, from.t, to.t)
						if n*int64(s.Window) > s.Burst*int64(s.Window)+s.Limit*(to.t-from.t) {
							t.Fatalf("%d admitted in [%d, %d]: more than %d + %d × %d/%d",
								n, from.t, to.t, s.Burst, s.Limit, to.t-from.t, int64(s.Window))
						}
					}
				}
			})
		})
	}
}

// TestLeakyBucketShapes: admitted requests, each leaving after its delay,
// leave in order and no faster than the rate: one of cost c occupies the
// output for c × window/limit.
func TestLeakyBucketShapes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSpec(t, LeakyBucket)
		ds := replay(t, s, genTrace(t, s, rapid.IntRange(1, 60).Draw(t, "n")))
		var prev *decision
		for i := range ds {
			d := &ds[i]
			if !d.Allowed || d.cost == 0 {
				continue
			}
			if prev != nil {
				gap := (d.t + int64(d.Delay)) - (prev.t + int64(prev.Delay))
				// Departures are rounded up to whole nanoseconds, so the gap
				// may be up to 1 ns short of the exact c × W/L.
				if (gap+1)*s.Limit <= prev.cost*int64(s.Window) {
					t.Fatalf("request at %d leaves %d ns after the one at %d (cost %d): faster than %d per %d",
						d.t, gap, prev.t, prev.cost, s.Limit, int64(s.Window))
				}
			}
			prev = d
		}
	})
}

// TestRetryAndResetAreExact checks RetryAfter and ResetAfter through Decide
// itself, at realistic time scales where the references cannot scan: the
// request is refused 1 ns before now + RetryAfter and allowed at it; the
// state is fresh at now + ResetAfter and not 1 ns before.
func TestRetryAndResetAreExact(t *testing.T) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				s := genSpec(t, a)
				scale := rapid.SampledFrom([]int64{1_000, 1_000_003, 999_999_937}).Draw(t, "scale")
				s.Window *= time.Duration(scale)
				trace := genTrace(t, s, rapid.IntRange(1, 30).Draw(t, "n"))
				// Jitter odd requests forward: times at realistic scales, and
				// sometimes a request earlier than the one before (a lagging
				// leader clock), which must stay exact too.
				for i := range trace {
					trace[i].t += rapid.Int64Range(0, scale).Draw(t, "jitter") * int64(i%2)
				}
				var state []byte
				for _, r := range trace {
					d, next, err := Decide(nil, &s, state, r.t, r.cost)
					if err != nil {
						t.Fatal(err)
					}
					c := effectiveCost(r.cost)
					if !d.Allowed && d.RetryAfter != Never {
						at := func(dt time.Duration) bool {
							d2, _, err := Decide(nil, &s, next, r.t+int64(dt), c)
							if err != nil {
								t.Fatal(err)
							}
							return d2.Allowed
						}
						if !at(d.RetryAfter) || (d.RetryAfter > 0 && at(d.RetryAfter-1)) {
							t.Fatalf("t=%d cost=%d: RetryAfter %d is not the first allowed instant", r.t, r.cost, d.RetryAfter)
						}
					}
					if d.ResetAfter > 0 {
						fresh := func(dt time.Duration) bool {
							_, n, err := Decide(nil, &s, next, r.t+int64(dt), 0)
							if err != nil {
								t.Fatal(err)
							}
							return n == nil
						}
						if !fresh(d.ResetAfter) || fresh(d.ResetAfter-1) {
							t.Fatalf("t=%d cost=%d: ResetAfter %d is not the instant the state expires", r.t, r.cost, d.ResetAfter)
						}
					}
					state = next
				}
			})
		})
	}
}
