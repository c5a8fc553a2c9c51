package algo

import "time"

// Token and leaky bucket share one exact representation. Levels are kept in
// units of 1/window of a token ("scaled"), so refilling (or draining) for dt
// nanoseconds changes the level by exactly dt × limit and a request of cost c
// is c × window: no rounding anywhere.
//
// For the token bucket the level is the deficit (capacity − tokens): a full
// bucket, the fresh state, is level 0. For the leaky bucket the level is the
// queue's content: an empty queue, the fresh state, is level 0. Both admit a
// request when level + cost × window ≤ burst × window, so they admit exactly
// the same traffic (the leaky bucket as a meter is the token bucket, as GCRA
// shows); the leaky bucket additionally tells the caller how long to wait so
// that admitted requests leave at the steady rate.
//
// bucketState is the level (scaled) at time t. Version 1 encoding:
// [tag] uvarint(t) uvarint128(level). A level is at most burst × window
// < 2^99, so a state is at most 24 bytes.
type bucketState struct {
	t     int64
	level u128
}

func decodeBucket(a Algorithm, state []byte) (bucketState, error) {
	r := reader{b: state, off: 1}
	st := bucketState{t: r.time(), level: r.u128()}
	return st, r.done(a.String())
}

func (st bucketState) appendTo(dst []byte, a Algorithm) []byte {
	dst = append(dst, stateTag(a))
	dst = appendUvarint(dst, st.t)
	return appendUvarint128(dst, st.level)
}

func decideBucket(dst []byte, s *Spec, state []byte, now, cost int64) (Decision, []byte, error) {
	burst := s.burst()
	capacity := mul(burst, int64(s.Window))
	te := now
	var level u128
	if len(state) > 0 {
		st, err := decodeBucket(s.Algorithm, state)
		if err != nil {
			return Decision{}, nil, err
		}
		te = max(te, st.t)
		level = st.level.subFloor(mul(te-st.t, s.Limit))
		// A smaller burst than the state was written under: a bucket holds
		// no more than its capacity.
		level = minU128(level, capacity)
	}
	late := te - now // how far this key's clock is ahead of now

	d := Decision{Limit: s.Limit}
	c := effectiveCost(cost)
	switch cw := mul(c, int64(s.Window)); {
	case c > burst:
		d.RetryAfter = Never
	case level.add(cw).cmp(capacity) <= 0:
		d.Allowed = true
		if s.Algorithm == LeakyBucket {
			// Admitted requests leave in order at limit per window: this one
			// leaves once the queue ahead of it has drained.
			d.Delay = time.Duration(late + level.divCeil(s.Limit))
		}
		if cost > 0 {
			level = level.add(cw)
		}
	default:
		d.RetryAfter = time.Duration(late + level.add(cw).sub(capacity).divCeil(s.Limit))
	}
	d.Remaining = capacity.sub(level).divFloor(int64(s.Window))
	if level.isZero() {
		return d, nil, nil
	}
	d.ResetAfter = time.Duration(late + level.divCeil(s.Limit))
	return d, bucketState{t: te, level: level}.appendTo(dst, s.Algorithm), nil
}
