package algo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Spec encoding, version 1:
//
//	[1] [algorithm] uvarint(limit) uvarint(window) uvarint(burst)
//	[flags: bit 0 = count_refused, bit 1 = max_hold follows] [calendar] uvarint(len(timezone)) timezone
//	[uvarint(max_hold): concurrency only, always written (flag bit 1)]
//
// Flag bit 1 is set by concurrency specs only, so every other spec encodes as
// before it existed; a binary older than it refuses such a spec (an unknown
// algorithm stops it anyway).
const specVersion1 = 1

const maxTimezoneLen = 255

// specFlagMaxHold: the spec's max_hold follows its timezone (concurrency).
const specFlagMaxHold = 2

// AppendSpec appends the canonical, versioned binary encoding of a validated
// spec to dst. Equal specs encode to equal bytes (used as the identity of
// inline limits in storage keys); defaults are written out first, so a spec
// and its normalized form (as Validate returns it) encode alike.
func AppendSpec(dst []byte, s Spec) []byte {
	s = s.normalized()
	dst = append(dst, specVersion1, byte(s.Algorithm))
	dst = binary.AppendUvarint(dst, uint64(s.Limit))
	dst = binary.AppendUvarint(dst, uint64(s.Window))
	dst = binary.AppendUvarint(dst, uint64(s.Burst))
	var flags byte
	if s.CountRefused {
		flags |= 1
	}
	if s.Algorithm == Concurrency {
		flags |= specFlagMaxHold
	}
	dst = append(dst, flags, byte(s.Calendar))
	dst = binary.AppendUvarint(dst, uint64(len(s.Timezone)))
	dst = append(dst, s.Timezone...)
	if flags&specFlagMaxHold != 0 {
		dst = binary.AppendUvarint(dst, uint64(s.MaxHold))
	}
	return dst
}

// DecodeSpec decodes a spec written by AppendSpec and returns the bytes read.
// It rejects truncated input, unknown versions, invalid specs and non-canonical
// encodings, so a decoded spec is always valid and normalized.
func DecodeSpec(b []byte) (Spec, int, error) {
	r := reader{b: b}
	if v := r.byte(); r.err == nil && v != specVersion1 {
		return Spec{}, 0, fmt.Errorf("decode spec: unknown version %d", v)
	}
	var s Spec
	s.Algorithm = Algorithm(r.byte())
	s.Limit = r.int63()
	s.Window = time.Duration(r.int63())
	s.Burst = r.int63()
	flags := r.byte()
	s.Calendar = Calendar(r.byte())
	n := r.int63()
	if r.err == nil && n > maxTimezoneLen {
		return Spec{}, 0, fmt.Errorf("decode spec: timezone length %d", n)
	}
	tz := r.bytes(int(n))
	if flags&specFlagMaxHold != 0 {
		s.MaxHold = time.Duration(r.int63())
	}
	if r.err != nil {
		return Spec{}, 0, fmt.Errorf("decode spec: %w", r.err)
	}
	if flags > 1|specFlagMaxHold {
		return Spec{}, 0, fmt.Errorf("decode spec: unknown flags %#x", flags)
	}
	if (flags&specFlagMaxHold != 0) != (s.Algorithm == Concurrency) {
		return Spec{}, 0, fmt.Errorf("decode spec: flags %#x for %v", flags, s.Algorithm)
	}
	s.CountRefused = flags&1 != 0
	if s.Algorithm != Concurrency {
		s.MaxHold = 0
	}
	s.Timezone = string(tz)
	if _, err := s.Validate(); err != nil {
		return Spec{}, 0, fmt.Errorf("decode spec: %w", err)
	}
	// Specs are identities in storage keys: accept only the one encoding
	// AppendSpec writes (defaults written out, no overlong varints).
	if !bytes.Equal(AppendSpec(nil, s), b[:r.off]) {
		return Spec{}, 0, errors.New("decode spec: not in canonical form")
	}
	return s, r.off, nil
}

// State encodings start with a tag byte: algorithm << 4 | version. A state
// whose tag is not the current algorithm's is treated as a fresh key, so a
// policy may switch algorithms and old states simply restart.
const stateVersion1 = 1

func stateTag(a Algorithm) byte { return byte(a)<<4 | stateVersion1 }

var errTruncated = errors.New("truncated")

// reader decodes varints and bytes, remembering the first error so decoders
// can read a whole header and check once.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail(errTruncated)
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			r.fail(errTruncated)
		} else {
			r.fail(errVarint)
		}
		return 0
	}
	r.off += n
	return v
}

// int63 reads a uvarint that must fit in a non-negative int64.
func (r *reader) int63() int64 {
	v := r.uvarint()
	if v > 1<<63-1 {
		r.fail(errors.New("value out of range"))
		return 0
	}
	return int64(v)
}

// time reads a timestamp, which must lie in [0, MaxTime].
func (r *reader) time() int64 { return r.upTo(MaxTime, "time") }

// count reads a count, which must lie in [0, MaxLimit].
func (r *reader) count() int64 { return r.upTo(MaxLimit, "count") }

// upTo reads a uvarint that must not exceed max.
func (r *reader) upTo(max int64, what string) int64 {
	v := r.uvarint()
	if v > uint64(max) {
		r.fail(fmt.Errorf("%s %d out of range", what, v))
		return 0
	}
	return int64(v)
}

func (r *reader) u128() u128 {
	if r.err != nil {
		return u128{}
	}
	v, n, err := uvarint128(r.b[r.off:])
	if err != nil {
		r.fail(err)
		return u128{}
	}
	r.off += n
	return v
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail(errTruncated)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

// done reports an error unless the whole input was consumed without error.
func (r *reader) done(what string) error {
	if r.err == nil && r.off != len(r.b) {
		r.fail(fmt.Errorf("%d trailing bytes", len(r.b)-r.off))
	}
	if r.err != nil {
		return fmt.Errorf("algo: decode %s state: %w", what, r.err)
	}
	return nil
}

// appendUvarint appends a non-negative time or count.
func appendUvarint(dst []byte, v int64) []byte { return binary.AppendUvarint(dst, uint64(v)) }
