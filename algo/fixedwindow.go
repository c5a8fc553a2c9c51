package algo

import "time"

// fixedState is a fixed window's state: the admitted cost in the window that
// starts at start. Version 1 encoding: [tag] uvarint(start) uvarint(count).
type fixedState struct{ start, count int64 }

func decodeFixed(state []byte) (fixedState, error) {
	r := reader{b: state, off: 1}
	st := fixedState{start: r.time(), count: r.count()}
	return st, r.done("fixed_window")
}

func (st fixedState) appendTo(dst []byte) []byte {
	dst = append(dst, stateTag(FixedWindow))
	dst = appendUvarint(dst, st.start)
	return appendUvarint(dst, st.count)
}

func decideFixedWindow(dst []byte, s *Spec, state []byte, now, cost int64) (Decision, []byte, error) {
	var st fixedState
	te := now
	if len(state) > 0 {
		var err error
		if st, err = decodeFixed(state); err != nil {
			return Decision{}, nil, err
		}
		te = max(te, st.start)
	}
	start, end, err := s.windowAt(te)
	if err != nil {
		return Decision{}, nil, err
	}
	if st.start != start {
		st = fixedState{start: start} // a new window: the stored one has ended
	}

	d := Decision{Limit: s.Limit}
	c := effectiveCost(cost)
	switch {
	case c > s.Limit:
		d.RetryAfter = Never
	case st.count+c <= s.Limit:
		d.Allowed = true
		st.count += cost
	default:
		d.RetryAfter = time.Duration(end - now) // the next window starts empty
	}
	d.Remaining = max(s.Limit-st.count, 0)
	if st.count == 0 {
		return d, nil, nil
	}
	d.ResetAfter = time.Duration(end - now)
	return d, st.appendTo(dst), nil
}
