package algo

import "fmt"

// CanAdjust reports whether an algorithm's current window can be credited or
// debited exactly: fixed_window (calendar windows too) and sliding_window
// hold a count for the current window, the buckets a level. A sliding_log
// holds timestamped entries: a credit would have to pick which to forget and
// a debit invent when it was spent, so it is not offered.
func (a Algorithm) CanAdjust() bool {
	return a == FixedWindow || a == SlidingWindow || a == TokenBucket || a == LeakyBucket
}

// Adjust credits add units to the key's current window (a negative add
// debits them): the count of a fixed or sliding window goes down by add (at
// least 0, at most MaxLimit), a token bucket gains add tokens (a leaky
// bucket's queue drains by add), within [empty, burst]. It returns the units
// actually applied (signed, like add), the new state (nil: the key is fresh)
// and the key's decision after it (a peek), appending to dst as Decide does.
func Adjust(dst []byte, s *Spec, state []byte, now, add int64) (applied int64, next []byte, d Decision, err error) {
	if !s.Algorithm.CanAdjust() {
		return 0, nil, d, &FieldError{Field: "limit", Message: fmt.Sprintf(
			"%s cannot be adjusted exactly (fixed_window, sliding_window, token_bucket and leaky_bucket can)", s.Algorithm)}
	}
	if add < -MaxLimit || add > MaxLimit {
		return 0, nil, d, &FieldError{Field: "add", Message: fmt.Sprintf("must be within ±%d", MaxLimit)}
	}
	// The state as of now, in the current window (nil: fresh).
	_, cur, err := Decide(nil, s, state, now, 0)
	if err != nil {
		return 0, nil, d, err
	}
	switch s.Algorithm {
	case FixedWindow:
		var st fixedState
		if cur != nil {
			if st, err = decodeFixed(cur); err != nil {
				return 0, nil, d, err
			}
		} else if st.start, _, err = s.windowAt(now); err != nil {
			return 0, nil, d, err
		}
		n := min(max(st.count-add, 0), MaxLimit)
		applied, st.count = st.count-n, n
		if n > 0 {
			next = st.appendTo(dst)
		}
	case SlidingWindow:
		w := int64(s.Window)
		st := windowState{start: now - now%w}
		if cur != nil {
			if st, err = decodeWindow(cur); err != nil {
				return 0, nil, d, err
			}
		}
		n := min(max(st.cur-add, 0), MaxLimit)
		applied, st.cur = st.cur-n, n
		if st.cur > 0 || st.prev > 0 {
			next = st.appendTo(dst)
		}
	case TokenBucket, LeakyBucket:
		st := bucketState{t: now}
		if cur != nil {
			if st, err = decodeBucket(s.Algorithm, cur); err != nil {
				return 0, nil, d, err
			}
		}
		w := int64(s.Window)
		capacity := mul(s.burst(), w)
		level := st.level
		if add >= 0 {
			back := mul(add, w)
			if back.cmp(level) > 0 {
				back = level
			}
			applied = back.divFloor(w)
			level = level.sub(mul(applied, w))
		} else {
			room := capacity.sub(level).divFloor(w)
			applied = -min(-add, room)
			level = level.add(mul(-applied, w))
		}
		if !level.isZero() {
			next = bucketState{t: st.t, level: level}.appendTo(dst, s.Algorithm)
		}
	}
	d, _, err = Decide(nil, s, next, now, 0)
	return applied, next, d, err
}
