package algo

import (
	"fmt"
	"math"
	"time"
)

// Quota leases. A node reserves part of what remains of a key's budget
// through the log and then spends it from memory. What is leased is consumed
// in the replicated state at once, exactly as a check of the same cost would
// be, so the sum of what every node may allow never exceeds the limit, and a
// holder that crashes only loses what it had not spent (under-admission,
// never over-admission).
//
// Which algorithms can lease, and why:
//
//   - fixed_window (calendar windows included): the units are counted in the
//     window they were granted in, and a lease never outlives that window
//     (Valid ≤ the time to its end). Unspent units are credited back only in
//     the same window.
//   - sliding_window: the units are counted in the current window, a lease
//     never outlives it, and unspent units are credited back only while that
//     window is still the current one. The weighting of the previous window
//     then treats leased units as admitted at the grant, which is what the
//     counter assumes of any admitted request in the window.
//   - token_bucket: the tokens are taken at the grant and spent within Valid
//     = max_ttl; unspent tokens go back, capped at burst. Because spending may
//     lag the take by up to max_ttl, the bound becomes ≤ burst + limit ×
//     (T + max_ttl)/window in any interval of length T.
//   - leaky_bucket: no leases. Its answer is a delay that makes admitted
//     requests leave at a steady rate; a node spending from memory cannot
//     know the queue ahead of it on other nodes, so it could not compute one.
//   - sliding_log: no leases. It is exact over every interval because it
//     records each admitted request's timestamp; a batch of units reserved
//     at one instant and spent later would have to be logged at times nobody
//     knows yet.

// Bounds and defaults of a lease option; the only place they are defined.
const (
	// LeaseShareScale is the denominator of Lease.Share: shares are kept in
	// millionths so that the replicated arithmetic is exact integers.
	LeaseShareScale int64 = 1_000_000
	// DefaultLeaseShare is the share (in millionths) when none is given: 5%.
	DefaultLeaseShare int64 = 50_000
	// DefaultLeaseTTL is max_ttl when none is given.
	DefaultLeaseTTL = 2 * time.Second
	// MaxLeaseTTL bounds max_ttl: what a crashed holder can take out of a
	// window (under-admission) lasts at most this long.
	MaxLeaseTTL = 10 * time.Minute
)

// Lease is a policy's lease option. The zero Lease means "no leases".
type Lease struct {
	// Share is the part of what remains that one grant takes, in millionths
	// (LeaseShareScale), in [1, LeaseShareScale]. At least one unit is
	// granted when anything remains.
	Share int64
	// MaxTTL bounds how long a grant may be spent, in (0, MaxLeaseTTL].
	MaxTTL time.Duration
	// NoStrict is "strict": false. Strict (the default, so the zero value)
	// means a check refused through the log while leases on its key are
	// outstanding makes their holders give them back, and is tried again
	// once: it is refused only if the key has nothing left once they have
	// (service/lease.go). Without it the refusal is answered at once, with
	// a retry_after no later than the first of those leases ends.
	NoStrict bool
}

// Enabled reports whether l is a lease option (not the zero Lease).
func (l Lease) Enabled() bool { return l.Share != 0 || l.MaxTTL != 0 }

// Strict reports the "strict" field (see NoStrict).
func (l Lease) Strict() bool { return !l.NoStrict }

// LeaseConfig is the JSON form of a Lease:
// {"share": 0.05, "max_ttl": "2s", "strict": true}. Omitted fields take
// DefaultLeaseShare, DefaultLeaseTTL and strict.
type LeaseConfig struct {
	Share  *float64 `json:"share,omitempty"`
	MaxTTL string   `json:"max_ttl,omitempty"`
	Strict *bool    `json:"strict,omitempty"`
}

// Lease validates the config and returns the Lease, or a *FieldError whose
// field is "lease.share" or "lease.max_ttl".
func (c LeaseConfig) Lease() (Lease, error) {
	l := Lease{Share: DefaultLeaseShare, MaxTTL: DefaultLeaseTTL}
	if c.Share != nil {
		s := *c.Share
		if math.IsNaN(s) || s <= 0 || s > 1 {
			return Lease{}, &FieldError{Field: "lease.share", Message: "must be greater than 0 and at most 1"}
		}
		l.Share = int64(math.Round(s * float64(LeaseShareScale)))
		if l.Share < 1 {
			return Lease{}, &FieldError{Field: "lease.share", Message: fmt.Sprintf("must be at least %g", 1/float64(LeaseShareScale))}
		}
	}
	if c.MaxTTL != "" {
		d, err := ParseWindow(c.MaxTTL)
		if err != nil {
			return Lease{}, &FieldError{Field: "lease.max_ttl", Message: err.(*FieldError).Message}
		}
		l.MaxTTL = d
	}
	if c.Strict != nil {
		l.NoStrict = !*c.Strict
	}
	return l, l.validTTL()
}

func (l Lease) validTTL() error {
	if l.MaxTTL <= 0 || l.MaxTTL > MaxLeaseTTL {
		return &FieldError{Field: "lease.max_ttl", Message: fmt.Sprintf("must be positive and at most %s", FormatWindow(MaxLeaseTTL))}
	}
	return nil
}

// Config returns the JSON form of l (inverse of LeaseConfig.Lease).
func (l Lease) Config() LeaseConfig {
	s := float64(l.Share) / float64(LeaseShareScale)
	strict := l.Strict()
	return LeaseConfig{Share: &s, MaxTTL: FormatWindow(l.MaxTTL), Strict: &strict}
}

// CanLease reports whether an algorithm has a sound leased form (see above).
func (a Algorithm) CanLease() bool {
	return a == FixedWindow || a == SlidingWindow || a == TokenBucket
}

// ValidateLease checks a lease option for a spec, or returns a *FieldError
// naming "lease", "lease.share" or "lease.max_ttl". The zero Lease is valid.
func ValidateLease(s Spec, l Lease) error {
	if !l.Enabled() {
		return nil
	}
	if !s.Algorithm.CanLease() {
		return &FieldError{Field: "lease", Message: fmt.Sprintf(
			"not available for %s (only fixed_window, sliding_window and token_bucket have an exact leased form)", s.Algorithm)}
	}
	if l.Share < 1 || l.Share > LeaseShareScale {
		return &FieldError{Field: "lease.share", Message: "must be greater than 0 and at most 1"}
	}
	return l.validTTL()
}

// Grant is the answer to a lease request.
type Grant struct {
	// Units is what the holder may spend; 0 when nothing remains.
	Units int64
	// Valid is how long from now the units may be spent: max_ttl, and for
	// the windowed algorithms never past the end of the window they are
	// counted in.
	Valid time.Duration
	// Window identifies the window the units are counted in (its start, ns;
	// the time of the grant for token_bucket). A return passes it back.
	Window int64
	// Remaining is what remains unleased after the grant; RetryAfter, when
	// Units is 0, is when a unit may be free again (Never: the cost can
	// never pass).
	Remaining  int64
	RetryAfter time.Duration
	// ResetAfter is the key's new Decision.ResetAfter (its state's expiry
	// from now) after a grant.
	ResetAfter time.Duration
}

// GrantLease takes max(1, ⌊share × remaining⌋) of what remains for the key at
// now (what a check could still spend) and consumes it exactly as a check of
// that cost would, appending the new state to dst as Decide does. With
// nothing remaining it grants nothing (Units 0, next nil): the caller stores
// nothing.
func GrantLease(dst []byte, s *Spec, l Lease, state []byte, now int64) (g Grant, next []byte, err error) {
	if !l.Enabled() {
		return g, nil, fmt.Errorf("algo: no lease option")
	}
	if err := ValidateLease(*s, l); err != nil {
		return g, nil, fmt.Errorf("algo: invalid lease %+v for %s: %w", l, s.Algorithm, err)
	}
	peek, _, err := Decide(dst, s, state, now, 0)
	if err != nil {
		return g, nil, err
	}
	if !peek.Allowed || peek.Remaining < 1 {
		g.RetryAfter = peek.RetryAfter
		if g.RetryAfter == 0 {
			g.RetryAfter = 1 // nothing left but no wait known: never 0 for "no grant"
		}
		return g, nil, nil
	}
	n := mul(peek.Remaining, l.Share).divFloor(LeaseShareScale)
	n = max(n, 1)
	d, next, err := Decide(dst, s, state, now, n)
	if err != nil {
		return Grant{}, nil, err
	}
	if !d.Allowed {
		// Remaining is the largest cost that passes; this is unreachable
		// unless an algorithm's Remaining lies. Grant nothing rather than
		// consume what the answer would not admit.
		return Grant{}, nil, fmt.Errorf("algo: lease of %d refused with %d remaining", n, peek.Remaining)
	}
	g = Grant{Units: n, Valid: l.MaxTTL, Window: now, Remaining: d.Remaining, ResetAfter: d.ResetAfter}
	if s.Algorithm != TokenBucket {
		start, end, err := s.leaseWindow(state, now)
		if err != nil {
			return Grant{}, nil, err
		}
		g.Window = start
		g.Valid = min(g.Valid, time.Duration(end-now))
	}
	return g, next, nil
}

// leaseWindow is the window [start, end) a windowed algorithm decides in at
// now, given the stored state (whose time may be ahead of now).
func (s *Spec) leaseWindow(state []byte, now int64) (start, end int64, err error) {
	te := now
	if len(state) > 0 && state[0] == stateTag(s.Algorithm) {
		switch s.Algorithm {
		case FixedWindow:
			st, err := decodeFixed(state)
			if err != nil {
				return 0, 0, err
			}
			te = max(te, st.start)
		case SlidingWindow:
			st, err := decodeWindow(state)
			if err != nil {
				return 0, 0, err
			}
			te = max(te, st.start)
		}
	}
	if s.Algorithm == SlidingWindow {
		w := int64(s.Window)
		start = te - te%w
		return start, start + w, nil
	}
	return s.windowAt(te)
}

// ReturnLease credits unspent units of a lease granted in window back to the
// key's state, where that is sound: fixed_window and sliding_window only
// while window is still the key's current window, token_bucket always (the
// bucket capped at burst). Otherwise, or for a state of another algorithm, it
// credits nothing. It returns the units credited and the new state (nil when
// the key is then fresh), and appends to dst as Decide does; with nothing
// credited next is nil and changed false (store nothing).
func ReturnLease(dst []byte, s *Spec, state []byte, now, window, unspent int64) (credited int64, next []byte, changed bool, err error) {
	if err := s.decidable(); err != nil {
		return 0, nil, false, err
	}
	if unspent <= 0 || len(state) == 0 || state[0] != stateTag(s.Algorithm) || now < 0 || now > MaxTime {
		return 0, nil, false, nil
	}
	switch s.Algorithm {
	case FixedWindow:
		st, err := decodeFixed(state)
		if err != nil {
			return 0, nil, false, err
		}
		start, _, err := s.windowAt(max(now, st.start))
		if err != nil {
			return 0, nil, false, err
		}
		if st.start != start || start != window {
			return 0, nil, false, nil
		}
		credited = min(unspent, st.count)
		st.count -= credited
		if st.count == 0 {
			return credited, nil, true, nil
		}
		return credited, st.appendTo(dst), true, nil
	case SlidingWindow:
		st, err := decodeWindow(state)
		if err != nil {
			return 0, nil, false, err
		}
		te := max(now, st.start)
		w := int64(s.Window)
		if st.start != te-te%w || st.start != window {
			return 0, nil, false, nil
		}
		credited = min(unspent, st.cur)
		st.cur -= credited
		if st.cur == 0 && st.prev == 0 {
			return credited, nil, true, nil
		}
		return credited, st.appendTo(dst), true, nil
	case TokenBucket:
		st, err := decodeBucket(s.Algorithm, state)
		if err != nil {
			return 0, nil, false, err
		}
		te := max(now, st.t)
		capacity := mul(s.burst(), int64(s.Window))
		level := minU128(st.level.subFloor(mul(te-st.t, s.Limit)), capacity)
		back := mul(unspent, int64(s.Window))
		if back.cmp(level) > 0 {
			back = level
		}
		credited = back.divFloor(int64(s.Window))
		level = level.sub(back)
		if level.isZero() {
			return credited, nil, true, nil
		}
		return credited, bucketState{t: te, level: level}.appendTo(dst, s.Algorithm), true, nil
	}
	return 0, nil, false, nil
}

// LeasedUnits is what a lease outstanding on a key holds: units counted in
// Window (Grant.Window).
type LeasedUnits struct {
	Window, Units int64
}

// HoldLeased returns the state of a key just reset that still has leases
// outstanding: a fresh key with the units of those counted in the current
// window consumed (for token_bucket, every outstanding lease, at most burst),
// so a holder that has not yet heard of the reset cannot spend them on top
// of a renewed budget, and the key's ResetAfter. It returns nil (fresh) when
// nothing is outstanding in the current window. The units may exceed the
// limit (a policy lowered since the grant): they are counted as they are,
// since they may all still be spent (before the lowering is acknowledged:
// fsm/leasefence.go).
func HoldLeased(dst []byte, s *Spec, now int64, held []LeasedUnits) ([]byte, time.Duration, error) {
	if err := s.decidable(); err != nil {
		return nil, 0, err
	}
	if now < 0 || now > MaxTime {
		return nil, 0, fmt.Errorf("algo: time %d outside [0, %d]", now, MaxTime)
	}
	var start, end int64
	switch s.Algorithm {
	case FixedWindow:
		var err error
		if start, end, err = s.windowAt(now); err != nil {
			return nil, 0, err
		}
	case SlidingWindow:
		w := int64(s.Window)
		start = now - now%w
		end = start + 2*w // the current count matters until the end of the next window
	case TokenBucket:
	default:
		return nil, 0, nil
	}
	var units int64
	for _, h := range held {
		if h.Units > 0 && (s.Algorithm == TokenBucket || h.Window == start) {
			units = min(units+min(h.Units, MaxLimit), MaxLimit) // a state counts at most MaxLimit
		}
	}
	if units == 0 {
		return nil, 0, nil
	}
	switch s.Algorithm {
	case FixedWindow:
		return fixedState{start: start, count: units}.appendTo(dst), time.Duration(end - now), nil
	case SlidingWindow:
		return windowState{start: start, cur: units}.appendTo(dst), time.Duration(end - now), nil
	default:
		capacity := mul(s.burst(), int64(s.Window))
		level := minU128(mul(min(units, s.burst()), int64(s.Window)), capacity)
		return bucketState{t: now, level: level}.appendTo(dst, s.Algorithm), time.Duration(level.divCeil(s.Limit)), nil
	}
}
