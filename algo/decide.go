package algo

import (
	"errors"
	"fmt"
)

// Decide applies a request of cost at time now (ns since the epoch, in
// [0, MaxTime]) to the encoded state (nil or empty = a fresh key) under the
// validated spec s.
//
// It appends the new encoded state to dst and returns it as next; next is nil
// when the state is equivalent to a fresh key (the caller may delete it).
// Decide never modifies state (it may be read-only mmap'd memory) and next
// never aliases it; dst must not overlap state. A state written for another
// algorithm, or by an unknown encoding version, is treated as fresh; a
// truncated or garbled state of the right algorithm is an error.
//
// cost 0 is a peek: nothing is consumed and next is the (pruned) state; the
// peek's Allowed, RetryAfter and Delay are those a request of cost 1 would
// get. A cost above the limit (the burst for the buckets) can never be
// allowed: it is refused with RetryAfter = Never and consumes nothing, even
// with count_refused. A negative cost is an error.
//
// The state expires (is equivalent to fresh) at now + d.ResetAfter; when next
// is nil, ResetAfter is 0.
//
// Time never runs backwards for a key: if now is earlier than the latest time
// recorded in the state (a new leader whose clock lags), the decision is made
// as of that recorded time, and RetryAfter, ResetAfter and Delay still count
// from now.
func Decide(dst []byte, s *Spec, state []byte, now, cost int64) (d Decision, next []byte, err error) {
	return decide(dst, s, state, now, cost, false)
}

// DecideInPlace is Decide for a caller that owns state: state must be
// writable and not read by anyone else, and after the call its contents are
// undefined. next may share state's array (it may be a sub-slice starting
// after state's first byte, or reuse its spare capacity); pass next back as
// the state of the following decision on the key.
//
// The decision is the same as Decide's. For sliding_log the work per
// decision does not grow with the log: no copy of the logged entries, only
// those that age out are visited (amortised O(1) otherwise), where Decide
// copies the whole log. For the other algorithms the states are at most 32
// bytes and the two cost the same.
func DecideInPlace(s *Spec, state []byte, now, cost int64) (d Decision, next []byte, err error) {
	return decide(state[:0:cap(state)], s, state, now, cost, true)
}

// decide is Decide; with inPlace, dst is state[:0] (every algorithm but
// sliding_log decodes its whole state before it writes dst).
func decide(dst []byte, s *Spec, state []byte, now, cost int64, inPlace bool) (d Decision, next []byte, err error) {
	if s == nil {
		return d, nil, errors.New("algo: nil spec")
	}
	if cost < 0 {
		return d, nil, fmt.Errorf("algo: negative cost %d", cost)
	}
	if now < 0 || now > MaxTime {
		return d, nil, fmt.Errorf("algo: time %d outside [0, %d]", now, MaxTime)
	}
	if err := s.decidable(); err != nil {
		return d, nil, err
	}
	if len(state) > 0 && state[0] != stateTag(s.Algorithm) {
		state = nil
	}
	switch s.Algorithm {
	case FixedWindow:
		return decideFixedWindow(dst, s, state, now, cost)
	case SlidingLog:
		return decideSlidingLog(dst, s, state, now, cost, inPlace)
	case SlidingWindow:
		return decideSlidingWindow(dst, s, state, now, cost)
	case TokenBucket, LeakyBucket:
		return decideBucket(dst, s, state, now, cost)
	case Concurrency:
		if cost != 0 {
			// An acquire needs its slot's id: Acquire.
			return d, nil, &FieldError{Field: "cost", Message: "a concurrency check acquires a slot through algo.Acquire; Decide only peeks (cost 0)"}
		}
		d, _, next, err = Acquire(dst, s, state, now, 0, nil)
		return d, next, err
	default:
		// Unreachable while decidable checks Algorithm.valid; an algorithm
		// added without a case here must not be decided as some other one.
		return d, nil, fmt.Errorf("algo: no decision for algorithm %v", s.Algorithm)
	}
}

// effectiveCost is the cost a decision is made for: a peek decides for 1.
func effectiveCost(cost int64) int64 {
	if cost == 0 {
		return 1
	}
	return cost
}
