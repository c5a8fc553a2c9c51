package algo

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

func genTime(t *rapid.T, label string) int64 {
	return rapid.OneOf(rapid.Int64Range(0, 1<<20), rapid.Int64Range(0, MaxTime), rapid.Just(MaxTime)).Draw(t, label)
}

func genCount(t *rapid.T, label string) int64 {
	return rapid.OneOf(rapid.Int64Range(0, 200), rapid.Int64Range(0, MaxLimit)).Draw(t, label)
}

// TestStateRoundTrip: every state value encodes to bytes that decode to the
// same value.
func TestStateRoundTrip(t *testing.T) {
	t.Run("fixed_window", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			st := fixedState{start: genTime(t, "start"), count: genCount(t, "count")}
			got, err := decodeFixed(st.appendTo(nil))
			if err != nil || got != st {
				t.Fatalf("%+v → %+v, %v", st, got, err)
			}
		})
	})
	t.Run("sliding_window", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			st := windowState{start: genTime(t, "start"), cur: genCount(t, "cur"), prev: genCount(t, "prev")}
			got, err := decodeWindow(st.appendTo(nil))
			if err != nil || got != st {
				t.Fatalf("%+v → %+v, %v", st, got, err)
			}
		})
	})
	t.Run("buckets", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			a := rapid.SampledFrom([]Algorithm{TokenBucket, LeakyBucket}).Draw(t, "algorithm")
			st := bucketState{t: genTime(t, "t"), level: mul(genCount(t, "burst"), rapid.Int64Range(0, int64(MaxWindow)).Draw(t, "window"))}
			b := st.appendTo(nil, a)
			got, err := decodeBucket(a, b)
			if err != nil || got != st {
				t.Fatalf("%+v → %+v, %v", st, got, err)
			}
			if len(b) > 32 {
				t.Fatalf("%+v takes %d bytes", st, len(b))
			}
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			type entry struct{ t, count int64 }
			var want []entry
			tm := genTime(t, "base")
			n := rapid.IntRange(1, 50).Draw(t, "entries")
			for i := 0; i < n; i++ {
				if i > 0 {
					tm += rapid.OneOf(rapid.Int64Range(1, 100), rapid.Int64Range(1, int64(MaxWindow))).Draw(t, "delta")
				}
				if tm > MaxTime {
					break
				}
				want = append(want, entry{tm, rapid.OneOf(rapid.Just(int64(1)), rapid.Int64Range(1, 1000)).Draw(t, "count")})
			}
			// Build it as Decide does, through decode/add/encode cycles.
			var b []byte
			for _, e := range want {
				v := logView{empty: true}
				if b != nil {
					var err error
					if v, err = decodeLog(b); err != nil {
						t.Fatal(err)
					}
				}
				v.add(e.t, e.count)
				b = v.appendTo(nil)
			}
			v, err := decodeLog(b)
			if err != nil {
				t.Fatal(err)
			}
			var got []entry
			for !v.empty {
				got = append(got, entry{v.front.t, v.front.count})
				if err := v.popFront(); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("decoded %d entries, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("entry %d: %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	})
}

func TestUvarint128(t *testing.T) {
	values := []u128{{}, {lo: 127}, {lo: 128}, {lo: math.MaxUint64}, {hi: 1}, {hi: 1 << 40, lo: 12345},
		{hi: math.MaxUint64, lo: math.MaxUint64}}
	for _, v := range values {
		b := appendUvarint128(nil, v)
		got, n, err := uvarint128(b)
		if err != nil || got != v || n != len(b) {
			t.Errorf("%+v: %x → %+v, %d, %v", v, b, got, n, err)
		}
		if _, _, err := uvarint128(b[:len(b)-1]); err == nil {
			t.Errorf("%+v: truncated encoding decoded", v)
		}
	}
	// 19 bytes of continuation and a final byte above 2 bits overflow.
	over := append(appendUvarint128(nil, u128{hi: math.MaxUint64, lo: math.MaxUint64})[:18], 4)
	if _, _, err := uvarint128(over); err == nil {
		t.Errorf("overflowing varint decoded")
	}
}
