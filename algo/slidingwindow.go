package algo

import "time"

// Sliding window counter: two aligned fixed windows, the current one and the
// one before it, with the previous count weighted by the part of it still
// inside the sliding window: weighted = (1 − x) × previous + current, where
// x = (t − start)/window. Every comparison is multiplied out by window so it
// is exact:  (window − r) × previous + (current + cost) × window ≤ limit × window.
//
// windowState is a sliding window counter's state: the admitted cost in the
// window that starts at start and in the window just before it. Version 1
// encoding: [tag] uvarint(start) uvarint(cur) uvarint(prev).
type windowState struct{ start, cur, prev int64 }

func decodeWindow(state []byte) (windowState, error) {
	r := reader{b: state, off: 1}
	st := windowState{start: r.time(), cur: r.count(), prev: r.count()}
	return st, r.done("sliding_window")
}

func (st windowState) appendTo(dst []byte) []byte {
	dst = append(dst, stateTag(SlidingWindow))
	dst = appendUvarint(dst, st.start)
	dst = appendUvarint(dst, st.cur)
	return appendUvarint(dst, st.prev)
}

func decideSlidingWindow(dst []byte, s *Spec, state []byte, now, cost int64) (Decision, []byte, error) {
	w := int64(s.Window)
	te := now
	var st windowState
	if len(state) > 0 {
		var err error
		if st, err = decodeWindow(state); err != nil {
			return Decision{}, nil, err
		}
		te = max(te, st.start)
	}
	start := te - te%w
	cur, prev := st.cur, st.prev
	switch {
	case len(state) > 0 && st.start == start:
	case len(state) > 0 && st.start == start-w:
		cur, prev = 0, cur
	default:
		// The previous window was not the one immediately before.
		cur, prev = 0, 0
	}
	elapsed := te - start // r in the formula

	d := Decision{Limit: s.Limit}
	c := effectiveCost(cost)
	// weighted × window of the previous window's share at te.
	prevShare := mul(w-elapsed, prev)
	switch {
	case c > s.Limit:
		d.RetryAfter = Never
	case prevShare.add(mul(cur+c, w)).cmp(mul(s.Limit, w)) <= 0:
		d.Allowed = true
		cur += cost
	default:
		d.RetryAfter = time.Duration(slidingWindowRetry(w, s.Limit, start, elapsed, cur, prev, c) - now)
	}
	// Remaining: the largest k with prevShare + (cur + k) × w ≤ limit × w.
	d.Remaining = max(s.Limit-cur-prevShare.divCeil(w), 0)
	switch {
	case cur > 0:
		// The current window's count matters until the end of the next one.
		d.ResetAfter = time.Duration(start + 2*w - now)
	case prev > 0:
		d.ResetAfter = time.Duration(start + w - now)
	default:
		return d, nil, nil
	}
	return d, windowState{start: start, cur: cur, prev: prev}.appendTo(dst), nil
}

// slidingWindowRetry returns the earliest time ≥ start+elapsed at which a
// request of cost c (≤ limit) would be allowed if nothing else arrives. The
// weighted count only falls with time, so it is the first instant, in the
// current window, the next one, or the one after (which starts empty), at
// which (w − r) × p ≤ (limit − c − current) × w.
func slidingWindowRetry(w, limit, start, elapsed, cur, prev, c int64) int64 {
	if t, ok := firstFit(w, limit-c-cur, prev, elapsed); ok {
		return start + t
	}
	// In the next window the current count becomes the previous one.
	if t, ok := firstFit(w, limit-c, cur, 0); ok {
		return start + w + t
	}
	return start + 2*w
}

// firstFit returns the least r in [from, w) with (w − r) × p ≤ a × w.
func firstFit(w, a, p, from int64) (int64, bool) {
	if a < 0 {
		return 0, false
	}
	if p <= a {
		return from, true // (w − r) × p ≤ w × p ≤ a × w for every r
	}
	// p > a ≥ 0: need w − r ≤ floor(a × w / p) < w.
	r := w - mul(a, w).divFloor(p)
	if r >= w {
		return 0, false
	}
	return max(r, from), true
}
