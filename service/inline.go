package service

import (
	"math"
	"time"

	"github.com/limitd/limitd/algo"
)

// DefaultMaxInlineWindow is limitd serve's bound on how long an inline limit
// may keep a key's state (--max-inline-window). An inline limit is chosen by
// whoever sends the check: without a bound an anonymous client could make
// every replica keep each of its keys for the longest window algo accepts
// (3,650 days). A day keeps daily quotas inline; longer ones take a policy,
// which an admin creates.
const DefaultMaxInlineWindow = 24 * time.Hour

// inlineLifetime is the longest an inline limit keeps a key's state after its
// last check, and the field that sets it: the window (a sliding window
// counter also keeps the previous one), the calendar period, or for buckets
// the time to refill from empty (window × burst / limit).
func inlineLifetime(s *algo.Spec) (time.Duration, string) {
	switch {
	case s.Calendar == algo.CalendarDay:
		return 24 * time.Hour, "calendar"
	case s.Calendar == algo.CalendarWeek:
		return 7 * 24 * time.Hour, "calendar"
	case s.Calendar != algo.CalendarNone:
		return 31 * 24 * time.Hour, "calendar"
	}
	switch s.Algorithm {
	case algo.Concurrency:
		// A renewed slot ends by acquisition + max_hold; its tombstone
		// (which answers a repeated release) lasts max_hold more.
		return 2 * s.MaxHold, "max_hold"
	case algo.SlidingWindow:
		return 2 * s.Window, "window"
	case algo.TokenBucket, algo.LeakyBucket:
		burst := s.Burst
		if burst <= 0 {
			burst = s.Limit
		}
		if burst <= s.Limit || s.Limit <= 0 {
			return s.Window, "window"
		}
		d := float64(s.Window) * float64(burst) / float64(s.Limit)
		if d >= math.MaxInt64 {
			return time.Duration(math.MaxInt64), "burst"
		}
		return time.Duration(d), "burst"
	}
	return s.Window, "window"
}

// checkInline applies the node's rules for inline limits (Config.NoInlineLimits,
// Config.MaxInlineWindow) to a check's limit. Fields are named under "limit".
func (s *Service) checkInline(spec *algo.Spec) *Error {
	if s.cfg.NoInlineLimits {
		return Invalid("limit", "inline limits are off on this node (--no-inline-limits): name a policy instead")
	}
	if max := s.cfg.MaxInlineWindow; max > 0 {
		if d, field := inlineLifetime(spec); d > max {
			return Invalid("limit."+field, "an inline limit may keep a key at most "+max.String()+" (--max-inline-window), this one "+d.String()+": use a policy for longer windows")
		}
	}
	return nil
}
