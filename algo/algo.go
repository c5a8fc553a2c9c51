// Package algo owns the rate-limiting algorithms: pure, deterministic functions of
// (limit spec, encoded state, time, cost) → (decision, new encoded state).
//
// Nothing here reads a clock, the network or the disk: the instant of a
// decision arrives as int64 nanoseconds since the Unix epoch, stamped by the
// Raft leader, so every replica that applies the same command reaches the same
// decision (an int64 has no monotonic reading or zone to differ). Lengths of time — the
// window, RetryAfter, ResetAfter, Delay — are time.Duration. All arithmetic on
// counts and time is exact integer arithmetic (128-bit where products can
// overflow) on the nanosecond counts; floats appear only in what is printed.
//
// The five algorithms, their guarantees, memory and burst behaviour are
// compared in docs/ALGORITHMS.md. In short: fixed_window counts per aligned (or
// calendar) window; sliding_log is exact over every interval of one window;
// sliding_window approximates it in O(1); token_bucket allows bursts up to
// burst and refills continuously; leaky_bucket admits like token_bucket but
// reports the delay that makes admitted requests leave at a steady rate.
//
// Entry points: Config.Spec (or Spec.Validate) to get a normalized Spec,
// Decide to apply a request, AppendSpec/DecodeSpec to store a spec.
package algo

import (
	"fmt"
	"time"
)

// Algorithm names one of the five limiter algorithms. The numeric values are
// part of the on-disk and on-log encodings: never renumber.
type Algorithm uint8

const (
	FixedWindow   Algorithm = 1
	SlidingLog    Algorithm = 2
	SlidingWindow Algorithm = 3
	TokenBucket   Algorithm = 4
	LeakyBucket   Algorithm = 5
	// Concurrency bounds work in flight rather than a rate: at most Limit
	// slots held per key, each for Window (the "hold"), renewable up to
	// MaxHold after its acquisition (concurrency.go).
	Concurrency Algorithm = 6
)

// Calendar selects calendar-aligned fixed windows (fixed_window only). The
// numeric values are part of the encodings.
type Calendar uint8

const (
	CalendarNone  Calendar = 0
	CalendarDay   Calendar = 1
	CalendarWeek  Calendar = 2 // weeks start on Monday 00:00 local time (ISO 8601)
	CalendarMonth Calendar = 3
)

// Never is Decision.RetryAfter for a request that can never succeed because its
// cost exceeds the limit (or the burst for the buckets).
const Never time.Duration = -1

// Spec is a limit: which algorithm, how much, over how long.
type Spec struct {
	Algorithm    Algorithm
	Limit        int64         // positive
	Window       time.Duration // positive, at most MaxWindow; 0 for calendar windows
	Burst        int64         // token_bucket and leaky_bucket only; 0 means "= Limit"
	CountRefused bool          // sliding_log only: refused requests are logged too (penalty variant)
	Calendar     Calendar
	Timezone     string // IANA name for calendar windows; "" means UTC
	// MaxHold: concurrency only, the longest a slot may be held from its
	// acquisition, however often it is renewed (normalized: 10 × hold,
	// capped at MaxWindow). Window is the hold of one acquire or renewal.
	MaxHold time.Duration
}

// Decision is the answer to one check.
type Decision struct {
	Allowed    bool
	Limit      int64
	Remaining  int64         // what could still be spent right now (after this request)
	ResetAfter time.Duration // until the state is back to empty/full if nothing more arrives
	RetryAfter time.Duration // until the same request would be allowed; 0 when allowed; Never when it never can
	Delay      time.Duration // how long the caller should wait before proceeding (leaky_bucket only)
}

// FieldError is a validation error that names the offending field using the
// JSON field names ("limit", "window", "timezone", ...).
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Message) }
