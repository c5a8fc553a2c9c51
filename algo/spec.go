package algo

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds on specs and times. They keep every product and sum the algorithms
// form (limit × window, burst × window, time + window, ...) inside 128-bit
// intermediate and 64-bit final values, so arithmetic stays exact.
const (
	// MaxLimit bounds limit and burst.
	MaxLimit int64 = 1_000_000_000_000
	// MaxSlidingLogLimit bounds limit for sliding_log: the log may hold up to
	// limit entries (~3 bytes each), so its size is capped at a few
	// megabytes. Decide copies the log (~0.3 ms at this bound); DecideInPlace
	// does not (~200 ns). sliding_window approximates it in O(1) for larger
	// limits.
	MaxSlidingLogLimit int64 = 1_000_000
	// MaxWindow bounds window: 3650 days.
	MaxWindow time.Duration = 3650 * day
	// MaxFillTime bounds burst/limit × window for the buckets: the time an
	// empty token bucket takes to fill (or a full leaky bucket to drain).
	MaxFillTime time.Duration = 36500 * day
	// MaxTime is the latest time Decide accepts (2^62 ns, in the year 2116).
	// Together with the bounds above it keeps now + any reported duration
	// below 2^63.
	MaxTime int64 = 1 << 62
)

const day = 24 * time.Hour

var algorithmNames = [...]string{
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	SlidingWindow: "sliding_window",
	TokenBucket:   "token_bucket",
	LeakyBucket:   "leaky_bucket",
	Concurrency:   "concurrency",
}

var calendarNames = [...]string{
	CalendarDay:   "day",
	CalendarWeek:  "week",
	CalendarMonth: "month",
}

// Algorithms lists the rate algorithms in numeric order: those Decide
// decides for any cost. Concurrency is not among them: its acquires need a
// slot id (Acquire), and code that replays costs against every algorithm
// (simulate, the property tests) has nothing to release.
var Algorithms = []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, LeakyBucket}

func (a Algorithm) valid() bool { return a >= FixedWindow && a <= Concurrency }

// String returns the JSON name ("fixed_window", ...).
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm maps "fixed_window" etc. to an Algorithm. The error is a
// *FieldError for field "algorithm".
func ParseAlgorithm(name string) (Algorithm, error) {
	for _, a := range append(Algorithms[:len(Algorithms):len(Algorithms)], Concurrency) {
		if algorithmNames[a] == name {
			return a, nil
		}
	}
	return 0, &FieldError{Field: "algorithm", Message: fmt.Sprintf(
		"unknown algorithm %q (want fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket or concurrency)", name)}
}

func (c Calendar) valid() bool { return c >= CalendarDay && c <= CalendarMonth }

// String returns the JSON name ("day", "week", "month"), or "" for CalendarNone.
func (c Calendar) String() string {
	if c == CalendarNone {
		return ""
	}
	if c.valid() {
		return calendarNames[c]
	}
	return fmt.Sprintf("calendar(%d)", uint8(c))
}

// ParseCalendar maps "day", "week" or "month" to a Calendar ("" is CalendarNone).
// The error is a *FieldError for field "calendar".
func ParseCalendar(name string) (Calendar, error) {
	if name == "" {
		return CalendarNone, nil
	}
	for c := CalendarDay; c <= CalendarMonth; c++ {
		if calendarNames[c] == name {
			return c, nil
		}
	}
	return 0, &FieldError{Field: "calendar", Message: fmt.Sprintf("unknown calendar %q (want day, week or month)", name)}
}

// ParseWindow parses a window: a Go duration ("60s", "1h30m", "500ms"),
// optionally preceded by whole days ("7d", "1d12h"). It must be positive and
// at most MaxWindow. The error is a *FieldError for field "window".
func ParseWindow(s string) (time.Duration, error) {
	bad := func(msg string) (time.Duration, error) {
		return 0, &FieldError{Field: "window", Message: msg}
	}
	if s == "" {
		return bad("required (a duration such as 60s, 1h30m or 7d)")
	}
	var days int64
	rest := s
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		digits := s[:i]
		if digits == "" || strings.Trim(digits, "0123456789") != "" {
			return bad(fmt.Sprintf("invalid duration %q (days must be a whole number before the other units, e.g. 1d12h)", s))
		}
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || n > int64(MaxWindow/day) {
			return bad(fmt.Sprintf("%q exceeds the maximum of %s", s, FormatWindow(MaxWindow)))
		}
		days, rest = n, s[i+1:]
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return bad(fmt.Sprintf("invalid duration %q (want e.g. 60s, 1h30m, 500ms or 7d)", s))
		}
	}
	if d < 0 {
		return bad(fmt.Sprintf("%q must be positive", s))
	}
	if d > MaxWindow || time.Duration(days)*day > MaxWindow-d {
		return bad(fmt.Sprintf("%q exceeds the maximum of %s", s, FormatWindow(MaxWindow)))
	}
	w := time.Duration(days)*day + d
	if w <= 0 {
		return bad(fmt.Sprintf("%q must be positive", s))
	}
	return w, nil
}

// FormatWindow formats d compactly in a form ParseWindow reads back:
// "1d12h", "1m", "1s500ms". Unlike time.Duration.String it counts whole days
// and never prints a fraction, so every window round-trips exactly.
func FormatWindow(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	units := []struct {
		name string
		d    time.Duration
	}{{"d", day}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second},
		{"ms", time.Millisecond}, {"us", time.Microsecond}, {"ns", time.Nanosecond}}
	var b strings.Builder
	for _, u := range units {
		if n := d / u.d; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10))
			b.WriteString(u.name)
			d -= n * u.d
		}
	}
	return b.String()
}

// Config is the JSON form of a Spec, shared by the HTTP API, policy files and
// `limitd simulate`. Window is a duration string such as "60s", "1h30m" or "7d".
type Config struct {
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Window       string `json:"window,omitempty"`
	Burst        int64  `json:"burst,omitempty"`
	CountRefused bool   `json:"count_refused,omitempty"`
	Calendar     string `json:"calendar,omitempty"`
	Timezone     string `json:"timezone,omitempty"`
	// Hold and MaxHold: concurrency only (durations like Window).
	Hold    string `json:"hold,omitempty"`
	MaxHold string `json:"max_hold,omitempty"`
}

// Spec validates the config and returns the normalized Spec, or a *FieldError.
func (c Config) Spec() (Spec, error) {
	a, err := ParseAlgorithm(c.Algorithm)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{Algorithm: a, Limit: c.Limit, Burst: c.Burst, CountRefused: c.CountRefused, Timezone: c.Timezone}
	if s.Calendar, err = ParseCalendar(c.Calendar); err != nil {
		return Spec{}, err
	}
	if a == Concurrency || c.Hold != "" || c.MaxHold != "" {
		return c.concurrencySpec(s)
	}
	switch {
	case s.Calendar != CalendarNone && c.Window != "":
		return Spec{}, &FieldError{Field: "window", Message: "must be empty when calendar is set (the calendar defines the window)"}
	case s.Calendar == CalendarNone:
		if s.Window, err = ParseWindow(c.Window); err != nil {
			return Spec{}, err
		}
	}
	return s.Validate()
}

// Config returns the JSON form of a spec (inverse of Config.Spec).
func (s Spec) Config() Config {
	c := Config{
		Algorithm:    s.Algorithm.String(),
		Limit:        s.Limit,
		Burst:        s.Burst,
		CountRefused: s.CountRefused,
		Calendar:     s.Calendar.String(),
		Timezone:     s.Timezone,
	}
	switch {
	case s.Algorithm == Concurrency:
		c.Hold, c.MaxHold = FormatWindow(s.Window), FormatWindow(s.normalized().MaxHold)
	case s.Calendar == CalendarNone:
		c.Window = FormatWindow(s.Window)
	}
	return c
}

// HasBurst reports whether the algorithm takes a burst (a bucket capacity
// above the limit): token_bucket and leaky_bucket. Validate refuses a
// non-zero Burst for the others.
func (a Algorithm) HasBurst() bool { return a == TokenBucket || a == LeakyBucket }

// HasCountRefused reports whether the algorithm has the count_refused
// (penalty) variant: sliding_log only. Validate refuses CountRefused for the
// others.
func (a Algorithm) HasCountRefused() bool { return a == SlidingLog }

// Validate checks a spec and returns it normalized (Burst defaulted to Limit for
// the buckets, zero elsewhere; Timezone "UTC" written as ""), or a *FieldError.
func (s Spec) Validate() (Spec, error) {
	bad := func(field, format string, args ...any) (Spec, error) {
		return Spec{}, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	}
	s = s.normalized()
	if !s.Algorithm.valid() {
		return bad("algorithm", "unknown algorithm %d", uint8(s.Algorithm))
	}
	if s.Algorithm == Concurrency {
		return s.validateConcurrency()
	}
	if s.MaxHold != 0 {
		return bad("max_hold", "only allowed with concurrency")
	}
	maxLimit := MaxLimit
	if s.Algorithm == SlidingLog {
		maxLimit = MaxSlidingLogLimit
	}
	if s.Limit < 1 || s.Limit > maxLimit {
		if s.Algorithm == SlidingLog && s.Limit > maxLimit {
			return bad("limit", "must be at most %d for sliding_log, whose state grows with the limit (use sliding_window for larger limits)", maxLimit)
		}
		return bad("limit", "must be between 1 and %d", maxLimit)
	}
	switch {
	case s.Calendar != CalendarNone:
		if s.Algorithm != FixedWindow {
			return bad("calendar", "only allowed with fixed_window")
		}
		if !s.Calendar.valid() {
			return bad("calendar", "unknown calendar %d", uint8(s.Calendar))
		}
		if s.Window != 0 {
			return bad("window", "must be empty when calendar is set (the calendar defines the window)")
		}
		if _, err := location(s.Timezone); err != nil {
			return bad("timezone", "%v", err)
		}
	default:
		if s.Window < 1 || s.Window > MaxWindow {
			return bad("window", "must be positive and at most %s", FormatWindow(MaxWindow))
		}
		if s.Timezone != "" {
			return bad("timezone", "only allowed with calendar")
		}
	}
	switch {
	case s.Algorithm.HasBurst():
		if s.Burst < 1 || s.Burst > MaxLimit {
			return bad("burst", "must be between 1 and %d", MaxLimit)
		}
		// burst/limit × window is the time to fill an empty token bucket.
		if mul(s.Burst, int64(s.Window)).cmp(mul(int64(MaxFillTime), s.Limit)) > 0 {
			return bad("burst", "burst/limit × window (the time to refill an empty bucket) must be at most %s", FormatWindow(MaxFillTime))
		}
	case s.Burst != 0:
		return bad("burst", "only allowed with token_bucket and leaky_bucket")
	}
	if s.CountRefused && !s.Algorithm.HasCountRefused() {
		return bad("count_refused", "only allowed with sliding_log")
	}
	return s, nil
}

// normalized writes the defaults out: a bucket's burst defaults to its limit,
// and the zone "UTC" is written "" (the default).
func (s Spec) normalized() Spec {
	if s.Algorithm.HasBurst() && s.Burst == 0 {
		s.Burst = s.Limit
	}
	if s.Timezone == "UTC" {
		s.Timezone = ""
	}
	if s.Algorithm == Concurrency && s.MaxHold == 0 && s.Window > 0 {
		s.MaxHold = min(DefaultMaxHoldFactor*s.Window, MaxWindow)
		if s.Window > MaxWindow/DefaultMaxHoldFactor {
			s.MaxHold = MaxWindow
		}
	}
	return s
}

// decidable is the cheap subset of Validate that Decide needs so that no
// spec, however wrong, can make it divide by zero or overflow.
func (s *Spec) decidable() error {
	ok := s.Algorithm.valid() && s.Limit >= 1 && s.Limit <= MaxLimit
	if ok && s.Algorithm == Concurrency {
		ok = s.concurrencyDecidable()
	} else if ok && s.Calendar != CalendarNone {
		ok = s.Algorithm == FixedWindow && s.Calendar.valid()
	} else if ok {
		ok = s.Window >= 1 && s.Window <= MaxWindow
	}
	if ok && s.Algorithm.HasBurst() {
		b := s.burst()
		ok = b >= 1 && b <= MaxLimit && mul(b, int64(s.Window)).cmp(mul(int64(MaxFillTime), s.Limit)) <= 0
	}
	if !ok {
		return fmt.Errorf("algo: invalid spec %+v (not validated)", *s)
	}
	return nil
}

// burst is the bucket capacity, defaulting to the limit.
func (s *Spec) burst() int64 {
	if s.Burst == 0 {
		return s.Limit
	}
	return s.Burst
}
