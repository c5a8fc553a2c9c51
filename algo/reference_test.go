package algo

import (
	"math/big"
	"time"
)

// Brute-force reference models of the five algorithms, written from the
// algorithms' definitions with no shared code: they keep every request (or an
// exact rational level), answer "would cost c be allowed at t?" directly, and
// find retry and reset times by trying every nanosecond. Windows in the
// property tests are a few nanoseconds long so that scanning is cheap.
type refModel interface {
	// fits reports whether cost c would be allowed at t (nothing is recorded).
	fits(t, c int64) bool
	// record applies a request of cost at t, allowed or not.
	record(t, cost int64, allowed bool)
	remaining(t int64) int64
	// fresh reports whether the model at t decides like a fresh key from
	// then on.
	fresh(t int64) bool
	// delay is the leaky bucket's wait for an admitted cost-c request at t.
	delay(t, c int64) int64
	capacity() int64 // the largest cost that can ever be allowed
}

func newRef(s Spec) refModel {
	switch s.Algorithm {
	case FixedWindow:
		return &refFixed{s: s, counts: map[int64]int64{}}
	case SlidingLog:
		return &refLog{s: s}
	case SlidingWindow:
		return &refWindow{s: s, counts: map[int64]int64{}}
	default:
		return newRefBucket(s)
	}
}

// refDecide computes the decision the reference expects for a request and
// records it.
func refDecide(m refModel, t, cost int64) Decision {
	c := effectiveCost(cost)
	var d Decision
	switch {
	case c > m.capacity():
		d.RetryAfter = Never
	case m.fits(t, c):
		d.Allowed = true
		d.Delay = time.Duration(m.delay(t, c))
	}
	if cost > 0 && d.RetryAfter != Never {
		m.record(t, cost, d.Allowed)
	}
	if !d.Allowed && d.RetryAfter != Never {
		r := t
		for !m.fits(r, c) {
			r++
		}
		d.RetryAfter = time.Duration(r - t)
	}
	d.Remaining = m.remaining(t)
	r := t
	for !m.fresh(r) {
		r++
	}
	d.ResetAfter = time.Duration(r - t)
	return d
}

type refFixed struct {
	s      Spec
	counts map[int64]int64 // by window index
}

func (m *refFixed) capacity() int64        { return m.s.Limit }
func (m *refFixed) delay(_, _ int64) int64 { return 0 }
func (m *refFixed) fits(t, c int64) bool   { return m.counts[t/int64(m.s.Window)]+c <= m.s.Limit }
func (m *refFixed) record(t, cost int64, allowed bool) {
	if allowed {
		m.counts[t/int64(m.s.Window)] += cost
	}
}
func (m *refFixed) remaining(t int64) int64 { return max(m.s.Limit-m.counts[t/int64(m.s.Window)], 0) }
func (m *refFixed) fresh(t int64) bool {
	for k, n := range m.counts {
		if k >= t/int64(m.s.Window) && n > 0 {
			return false
		}
	}
	return true
}

type refLog struct {
	s    Spec
	reqs []request // every logged request, never trimmed
}

func (m *refLog) capacity() int64        { return m.s.Limit }
func (m *refLog) delay(_, _ int64) int64 { return 0 }
func (m *refLog) inWindow(t int64) int64 {
	var n int64
	for _, r := range m.reqs {
		if r.t > t-int64(m.s.Window) && r.t <= t {
			n += r.cost
		}
	}
	return n
}
func (m *refLog) fits(t, c int64) bool { return m.inWindow(t)+c <= m.s.Limit }
func (m *refLog) record(t, cost int64, allowed bool) {
	if allowed || m.s.CountRefused {
		m.reqs = append(m.reqs, request{t, cost})
	}
}
func (m *refLog) remaining(t int64) int64 { return max(m.s.Limit-m.inWindow(t), 0) }
func (m *refLog) fresh(t int64) bool {
	for _, r := range m.reqs {
		if r.t > t-int64(m.s.Window) {
			return false
		}
	}
	return true
}

type refWindow struct {
	s      Spec
	counts map[int64]int64 // admitted cost by window index
}

func (m *refWindow) capacity() int64        { return m.s.Limit }
func (m *refWindow) delay(_, _ int64) int64 { return 0 }

// weighted is (1 − x) × previous + current with x = (t mod W)/W, as a rational.
func (m *refWindow) weighted(t int64) *big.Rat {
	k := t / int64(m.s.Window)
	x := big.NewRat(t%int64(m.s.Window), int64(m.s.Window))
	w := new(big.Rat).Sub(big.NewRat(1, 1), x)
	w.Mul(w, big.NewRat(m.counts[k-1], 1))
	return w.Add(w, big.NewRat(m.counts[k], 1))
}
func (m *refWindow) fits(t, c int64) bool {
	sum := new(big.Rat).Add(m.weighted(t), big.NewRat(c, 1))
	return sum.Cmp(big.NewRat(m.s.Limit, 1)) <= 0
}
func (m *refWindow) record(t, cost int64, allowed bool) {
	if allowed {
		m.counts[t/int64(m.s.Window)] += cost
	}
}
func (m *refWindow) remaining(t int64) int64 {
	left := new(big.Rat).Sub(big.NewRat(m.s.Limit, 1), m.weighted(t))
	q := new(big.Int).Div(left.Num(), left.Denom()) // floor (Euclidean, denominator > 0)
	return max(q.Int64(), 0)
}
func (m *refWindow) fresh(t int64) bool {
	k := t / int64(m.s.Window)
	for i, n := range m.counts {
		if i >= k-1 && n > 0 {
			return false
		}
	}
	return true
}

// refBucket holds tokens (token bucket) or queue content (leaky bucket) as
// an exact rational, updated at each request time.
type refBucket struct {
	s     Spec
	leaky bool
	last  int64
	level *big.Rat // tokens, or the leaky queue's content
}

func newRefBucket(s Spec) *refBucket {
	m := &refBucket{s: s, leaky: s.Algorithm == LeakyBucket, level: new(big.Rat)}
	if !m.leaky {
		m.level.SetInt64(s.burst()) // a token bucket starts full
	}
	return m
}

func (m *refBucket) capacity() int64 { return m.s.burst() }

func (m *refBucket) at(t int64) *big.Rat {
	flow := big.NewRat((t-m.last)*m.s.Limit, int64(m.s.Window))
	l := new(big.Rat)
	if m.leaky {
		l.Sub(m.level, flow)
		if l.Sign() < 0 {
			l.SetInt64(0)
		}
		return l
	}
	l.Add(m.level, flow)
	if b := big.NewRat(m.s.burst(), 1); l.Cmp(b) > 0 {
		l.Set(b)
	}
	return l
}

func (m *refBucket) fits(t, c int64) bool {
	l := m.at(t)
	if m.leaky {
		return l.Add(l, big.NewRat(c, 1)).Cmp(big.NewRat(m.s.burst(), 1)) <= 0
	}
	return l.Cmp(big.NewRat(c, 1)) >= 0
}

func (m *refBucket) record(t, cost int64, allowed bool) {
	m.level = m.at(t)
	m.last = t
	if !allowed {
		return
	}
	if m.leaky {
		m.level.Add(m.level, big.NewRat(cost, 1))
	} else {
		m.level.Sub(m.level, big.NewRat(cost, 1))
	}
}

func (m *refBucket) remaining(t int64) int64 {
	l := m.at(t)
	if m.leaky {
		l.Sub(big.NewRat(m.s.burst(), 1), l)
	}
	return new(big.Int).Div(l.Num(), l.Denom()).Int64()
}

func (m *refBucket) fresh(t int64) bool {
	l := m.at(t)
	if m.leaky {
		return l.Sign() == 0
	}
	return l.Cmp(big.NewRat(m.s.burst(), 1)) == 0
}

// delay: the queue ahead of the request drains at limit per window; the
// request may leave once it is empty. Called before record.
func (m *refBucket) delay(t, _ int64) int64 {
	if !m.leaky {
		return 0
	}
	l := m.at(t)
	l.Mul(l, big.NewRat(int64(m.s.Window), m.s.Limit)) // time to drain, in ns
	q, r := new(big.Int).QuoRem(l.Num(), l.Denom(), new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}
