package algo

import "fmt"

// Costs known later: a charge that always applies (Debit, an overdraft) and
// a credit of units a request spent but did not use (Credit), both exact.
//
// CanOverdraw is the set Debit supports: the algorithms whose state can hold
// a debt exactly. fixed_window and sliding_window count the window's units,
// and a count may exceed the limit (the key is then refused until the debt
// rolls out of the window, which Decide's RetryAfter already computes from
// the count). The buckets hold a debt past their capacity by moving the
// state's clock ahead: a deficit of capacity + X at now is the same bucket as
// capacity − (k×limit − X) at now + k with k = ⌈X/limit⌉, since the level
// falls by exactly limit per nanosecond; Decide already reads a state whose
// time is ahead of now, so RetryAfter is exactly the time the debt takes to
// refill. sliding_log is not offered: a debt there would be entries
// timestamped at times that never happened. concurrency counts slots, not
// units.
func (a Algorithm) CanOverdraw() bool { return a.CanAdjust() }

// Debit charges units to the key at now whatever its state: the returned
// state may hold more than the limit (a debt). It returns the new state
// (appended to dst as Decide does) and the key's decision after the charge
// (a peek: Allowed tells whether a cost-1 check would pass). The debt is
// bounded so that the state stays encodable: a count at most MaxLimit, a
// bucket's clock at most MaxFillTime ahead of now and never past MaxTime;
// beyond that the charge is refused as an overflow of the cost field and
// nothing changes.
func Debit(dst []byte, s *Spec, state []byte, now, units int64) ([]byte, Decision, error) {
	if !s.Algorithm.CanOverdraw() {
		return nil, Decision{}, &FieldError{Field: "overdraft", Message: fmt.Sprintf(
			"%s cannot hold a debt exactly (fixed_window, sliding_window, token_bucket and leaky_bucket can)", s.Algorithm)}
	}
	if units < 0 || units > MaxLimit {
		return nil, Decision{}, &FieldError{Field: "cost", Message: fmt.Sprintf("must be within [0, %d]", MaxLimit)}
	}
	if now < 0 || now > MaxTime {
		return nil, Decision{}, fmt.Errorf("algo: time %d outside [0, %d]", now, MaxTime)
	}
	// The state as of now (nil: fresh).
	_, cur, err := Decide(nil, s, state, now, 0)
	if err != nil {
		return nil, Decision{}, err
	}
	overflow := &FieldError{Field: "cost", Message: "the charge would take the key's debt past what its state can hold exactly (overflow): nothing was charged"}
	var next []byte
	switch s.Algorithm {
	case FixedWindow:
		var st fixedState
		if cur != nil {
			if st, err = decodeFixed(cur); err != nil {
				return nil, Decision{}, err
			}
		} else if st.start, _, err = s.windowAt(now); err != nil {
			return nil, Decision{}, err
		}
		if st.count > MaxLimit-units {
			return nil, Decision{}, overflow
		}
		st.count += units
		if st.count > 0 {
			next = st.appendTo(dst)
		}
	case SlidingWindow:
		w := int64(s.Window)
		st := windowState{start: now - now%w}
		if cur != nil {
			if st, err = decodeWindow(cur); err != nil {
				return nil, Decision{}, err
			}
		}
		if st.cur > MaxLimit-units {
			return nil, Decision{}, overflow
		}
		st.cur += units
		if st.cur > 0 || st.prev > 0 {
			next = st.appendTo(dst)
		}
	case TokenBucket, LeakyBucket:
		total, err := bucketDeficit(s, cur, now)
		if err != nil {
			return nil, Decision{}, err
		}
		total = total.add(mul(units, int64(s.Window)))
		var ok bool
		if next, ok = appendBucketDeficit(dst, s, now, total); !ok {
			return nil, Decision{}, overflow
		}
	}
	d, _, err := Decide(nil, s, next, now, 0)
	return next, d, err
}

// Credit returns up to units a request spent in window (the start of the
// window it was decided in: WindowStart at that time) to the key at now, and
// only where that is exact: fixed_window and sliding_window while window is
// still the key's current window (a unit spent in a window that has rolled no
// longer counts against anything, so crediting it would admit it twice), the
// buckets always, at most back to full (a bucket forgets nothing: what was
// spent has been refilling since, and the credit takes back only what is
// still missing). It returns the units credited, the new state (nil: fresh;
// appended to dst) and whether anything changed; sliding_log and concurrency
// credit nothing.
func Credit(dst []byte, s *Spec, state []byte, now, window, units int64) (credited int64, next []byte, changed bool, err error) {
	switch s.Algorithm {
	case FixedWindow, SlidingWindow:
		return ReturnLease(dst, s, state, now, window, units)
	case TokenBucket, LeakyBucket:
	default:
		return 0, nil, false, nil
	}
	if units <= 0 || len(state) == 0 || state[0] != stateTag(s.Algorithm) || now < 0 || now > MaxTime {
		return 0, nil, false, nil
	}
	if err := s.decidable(); err != nil {
		return 0, nil, false, err
	}
	total, err := bucketDeficit(s, state, now)
	if err != nil {
		return 0, nil, false, err
	}
	w := int64(s.Window)
	back := mul(units, w)
	if back.cmp(total) > 0 {
		back = mul(total.divFloor(w), w) // whole units only
	}
	credited = back.divFloor(w)
	if credited == 0 {
		return 0, nil, false, nil
	}
	next, ok := appendBucketDeficit(dst, s, now, total.sub(back))
	if !ok { // smaller than what was stored: cannot overflow
		return 0, nil, false, fmt.Errorf("algo: credit re-encoding failed")
	}
	return credited, next, true, nil
}

// WindowStart is the start of the window a windowed algorithm decides in at
// now given the key's state (Credit's window); for the other algorithms, now.
func (s *Spec) WindowStart(state []byte, now int64) (int64, error) {
	if s.Algorithm != FixedWindow && s.Algorithm != SlidingWindow {
		return now, nil
	}
	start, _, err := s.leaseWindow(state, now)
	return start, err
}

// bucketDeficit is a bucket's deficit at now, scaled by window, including a
// debt held as a clock ahead of now: level + (t − now) × limit.
func bucketDeficit(s *Spec, state []byte, now int64) (u128, error) {
	if len(state) == 0 {
		return u128{}, nil
	}
	st, err := decodeBucket(s.Algorithm, state)
	if err != nil {
		return u128{}, err
	}
	if st.t <= now {
		capacity := mul(s.burst(), int64(s.Window))
		return minU128(st.level.subFloor(mul(now-st.t, s.Limit)), capacity), nil
	}
	return st.level.add(mul(st.t-now, s.Limit)), nil
}

// appendBucketDeficit encodes a bucket whose deficit at now is total
// (scaled): at now when it fits the capacity, else with its clock moved
// ahead by ⌈excess/limit⌉ (see CanOverdraw). ok is false when the debt is
// too large to hold. A zero deficit is the fresh state (nil).
func appendBucketDeficit(dst []byte, s *Spec, now int64, total u128) ([]byte, bool) {
	if total.isZero() {
		return nil, true
	}
	capacity := mul(s.burst(), int64(s.Window))
	if total.cmp(capacity) <= 0 {
		return bucketState{t: now, level: total}.appendTo(dst, s.Algorithm), true
	}
	excess := total.sub(capacity)
	if excess.cmp(mul(int64(MaxFillTime), s.Limit)) > 0 {
		return nil, false
	}
	k := excess.divCeil(s.Limit) // ≤ MaxFillTime
	if now > MaxTime-k {
		return nil, false
	}
	// At now + k the deficit is total − k×limit = capacity − (k×limit − excess).
	level := capacity.sub(mul(k, s.Limit).sub(excess))
	return bucketState{t: now + k, level: level}.appendTo(dst, s.Algorithm), true
}

// Debt is how many units the key at now holds past its limit (0 without a
// debt): a count over the limit, or a bucket's deficit past its capacity,
// rounded up to whole units.
func Debt(s *Spec, state []byte, now int64) (int64, error) {
	if len(state) == 0 || !s.Algorithm.CanOverdraw() || state[0] != stateTag(s.Algorithm) {
		return 0, nil
	}
	_, cur, err := Decide(nil, s, state, now, 0)
	if err != nil || cur == nil {
		return 0, err
	}
	switch s.Algorithm {
	case FixedWindow:
		st, err := decodeFixed(cur)
		return max(st.count-s.Limit, 0), err
	case SlidingWindow:
		st, err := decodeWindow(cur)
		return max(st.cur-s.Limit, 0), err
	}
	total, err := bucketDeficit(s, cur, now)
	if err != nil {
		return 0, err
	}
	capacity := mul(s.burst(), int64(s.Window))
	if total.cmp(capacity) <= 0 {
		return 0, nil
	}
	return total.sub(capacity).divCeil(int64(s.Window)), nil
}
