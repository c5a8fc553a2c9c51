package algo

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestDecideInPlaceMatchesDecide: on any trace, DecideInPlace answers what
// Decide answers and leaves the same encoded state, for every algorithm. The
// sliding_log traces are long (limits up to 400, so the middle entries
// exceed inPlaceMin and are kept in place) and mix bursts at one instant,
// ageing out, peeks, costs, and a clock that runs backwards.
func TestDecideInPlaceMatchesDecide(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.SampledFrom(Algorithms).Draw(t, "algorithm")
		s := Spec{Algorithm: a, Limit: rapid.Int64Range(1, 400).Draw(t, "limit")}
		w := rapid.Int64Range(1, 5000).Draw(t, "window")
		// Dense logs: up to 400 distinct timestamps in a window.
		step := 2*w/s.Limit + 1
		if a == SlidingLog {
			s.CountRefused = rapid.Bool().Draw(t, "count_refused")
			s.Limit = rapid.Int64Range(100, 400).Draw(t, "log limit")
			w = 1_000_000
			step = w / s.Limit
		}
		s.Window = time.Duration(w)
		s, err := s.Validate()
		if err != nil {
			t.Fatal(err)
		}
		now := epoch2025 + rapid.Int64Range(0, 1e9).Draw(t, "start")
		var want, got []byte
		n := 200 + rapid.IntRange(0, 2000).Draw(t, "n")
		for i := 0; i < n; i++ {
			var dt int64
			switch rapid.IntRange(0, 20).Draw(t, "kind") {
			case 0:
				dt = rapid.Int64Range(-w, w).Draw(t, "jump") // incl. a lagging clock
			case 1, 2:
				dt = 0 // several at one instant
			default:
				dt = rapid.Int64Range(1, step).Draw(t, "dt")
			}
			now += dt
			cost := int64(1)
			if rapid.IntRange(0, 10).Draw(t, "odd cost") == 0 {
				cost = rapid.Int64Range(0, s.Limit+1).Draw(t, "cost")
			}
			dw, nextW, errW := Decide(nil, &s, want, now, cost)
			dg, nextG, errG := DecideInPlace(&s, got, now, cost)
			if (errW == nil) != (errG == nil) || dw != dg {
				t.Fatalf("request %d (t=%d cost=%d): Decide %+v %v, DecideInPlace %+v %v", i, now, cost, dw, errW, dg, errG)
			}
			if !bytes.Equal(nextW, nextG) {
				t.Fatalf("request %d: states differ:\nDecide        %x\nDecideInPlace %x", i, nextW, nextG)
			}
			want, got = nextW, nextG
		}
	})
}

// TestDecideInPlaceLongLogs drives logs of hundreds of entries, so that the
// middle entries stay in place, the header is rewritten in front of them
// with and without room, and the buffer outgrows its capacity.
func TestDecideInPlaceLongLogs(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		s, err := Spec{Algorithm: SlidingLog, Limit: 100 + rng.Int64N(900), Window: time.Duration(1_000_000 + rng.Int64N(1e9)),
			CountRefused: seed%2 == 1}.Validate()
		if err != nil {
			t.Fatal(err)
		}
		w := int64(s.Window)
		step := 2 * w / s.Limit
		now := epoch2025
		var want, got []byte
		for i := 0; i < 4000; i++ {
			switch r := rng.IntN(100); {
			case r == 0:
				now += rng.Int64N(2*w) - w // a jump, incl. a lagging clock
			case r < 10: // same instant
			default:
				now += 1 + rng.Int64N(step)
			}
			cost := int64(1)
			if rng.IntN(20) == 0 {
				cost = rng.Int64N(s.Limit / 4)
			}
			dw, nextW, errW := Decide(nil, &s, want, now, cost)
			dg, nextG, errG := DecideInPlace(&s, got, now, cost)
			if errW != nil || errG != nil || dw != dg || !bytes.Equal(nextW, nextG) {
				t.Fatalf("seed %d request %d (t=%d cost=%d): Decide %+v %v (%d bytes), DecideInPlace %+v %v (%d bytes)",
					seed, i, now, cost, dw, errW, len(nextW), dg, errG, len(nextG))
			}
			want, got = nextW, nextG
		}
	}
}
