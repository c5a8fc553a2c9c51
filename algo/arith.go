package algo

import (
	"errors"
	"math"
	"math/bits"
)

// u128 is an unsigned 128-bit integer. Products such as limit × window
// (up to 1e12 × 3.2e17) do not fit in 64 bits, and rounding them away would
// make decisions at exact boundary instants wrong.
type u128 struct{ hi, lo uint64 }

// mul returns a × b for non-negative a and b.
func mul(a, b int64) u128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

// sub returns x − y; callers ensure x ≥ y.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

// subFloor returns max(x − y, 0).
func (x u128) subFloor(y u128) u128 {
	if x.cmp(y) <= 0 {
		return u128{}
	}
	return x.sub(y)
}

func (x u128) cmp(y u128) int {
	switch {
	case x.hi < y.hi:
		return -1
	case x.hi > y.hi:
		return 1
	case x.lo < y.lo:
		return -1
	case x.lo > y.lo:
		return 1
	}
	return 0
}

func (x u128) isZero() bool { return x.hi == 0 && x.lo == 0 }

func minU128(x, y u128) u128 {
	if x.cmp(y) <= 0 {
		return x
	}
	return y
}

// divmod returns x / d and x mod d for d > 0.
func (x u128) divmod(d int64) (u128, int64) {
	dd := uint64(d)
	qhi, r := x.hi/dd, x.hi%dd
	qlo, r := bits.Div64(r, x.lo, dd)
	return u128{qhi, qlo}, int64(r)
}

// toInt64 saturates at math.MaxInt64. Validation bounds keep every quotient
// the algorithms report far below it; saturation only guards garbled input.
func (x u128) toInt64() int64 {
	if x.hi != 0 || x.lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(x.lo)
}

// divFloor returns floor(x / d) for d > 0, saturated to int64.
func (x u128) divFloor(d int64) int64 {
	q, _ := x.divmod(d)
	return q.toInt64()
}

// divCeil returns ceil(x / d) for d > 0, saturated to int64.
func (x u128) divCeil(d int64) int64 {
	q, r := x.divmod(d)
	if r != 0 {
		q = q.add(u128{lo: 1})
	}
	return q.toInt64()
}

// appendUvarint128 appends x in the same 7-bits-per-byte little-endian form as
// encoding/binary's uvarint, extended to 128 bits (at most 19 bytes).
func appendUvarint128(dst []byte, x u128) []byte {
	for x.hi != 0 || x.lo >= 0x80 {
		dst = append(dst, byte(x.lo)|0x80)
		x.lo = x.lo>>7 | x.hi<<57
		x.hi >>= 7
	}
	return append(dst, byte(x.lo))
}

var errVarint = errors.New("malformed varint")

// uvarint128 decodes a value written by appendUvarint128 and returns the bytes read.
func uvarint128(b []byte) (u128, int, error) {
	var x u128
	for i := 0; i < len(b) && i < 19; i++ {
		c := uint64(b[i] & 0x7f)
		s := uint(7 * i)
		if s < 64 {
			x.lo |= c << s
			if s > 57 {
				x.hi |= c >> (64 - s)
			}
		} else {
			x.hi |= c << (s - 64)
		}
		if b[i] < 0x80 {
			// The 19th byte may carry at most 2 significant bits (7×18 = 126).
			if i == 18 && b[i] > 3 {
				return u128{}, 0, errVarint
			}
			return x, i + 1, nil
		}
	}
	return u128{}, 0, errVarint
}
