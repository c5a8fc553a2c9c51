package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Breaker defaults (see Breaker).
const (
	// DefaultBreakerFailures: consecutive calls that reached no node before
	// the breaker opens.
	DefaultBreakerFailures = 3
	// DefaultBreakerInterval: while open, how often one call probes the
	// cluster.
	DefaultBreakerInterval = time.Second
	// DefaultBreakerProbeTimeout bounds a probe.
	DefaultBreakerProbeTimeout = time.Second
)

// Breaker configures the client's circuit breaker, which bounds what a call
// costs while no node can be reached.
//
// A call whose attempts all fail without an HTTP answer (connection refused,
// a dial or read timeout, a connection reset) is a transport failure. A
// connection that was refused or never established sent nothing, so the
// call fails over to the next known node at once, and when every known node
// refused it, the call ends at once with an error matching ErrUnavailable
// (instead of retrying until its deadline). After Failures consecutive
// transport failures the breaker opens: calls end at once, without a
// connection attempt, with an error matching ErrUnavailable (so a fail mode
// answers at once), except one call every Interval, the probe, which tries
// the cluster for at most ProbeTimeout. Any HTTP answer (even a 503 during
// an election) closes the breaker.
//
// The cost in an outage: at most one probe per Interval reaches the
// network; every other call returns in microseconds.
type Breaker struct {
	// Disabled turns the breaker off: every call retries until its deadline.
	Disabled bool
	// Failures is how many consecutive transport failures open the breaker
	// (default DefaultBreakerFailures).
	Failures int
	// Interval is how often an open breaker lets one call probe (default
	// DefaultBreakerInterval).
	Interval time.Duration
	// ProbeTimeout bounds a probe (default DefaultBreakerProbeTimeout).
	ProbeTimeout time.Duration
}

// WithBreaker configures the circuit breaker (on by default, see Breaker).
func WithBreaker(b Breaker) Option { return func(o *options) { o.breaker = b } }

func (b Breaker) withDefaults() Breaker {
	if b.Failures <= 0 {
		b.Failures = DefaultBreakerFailures
	}
	if b.Interval <= 0 {
		b.Interval = DefaultBreakerInterval
	}
	if b.ProbeTimeout <= 0 {
		b.ProbeTimeout = DefaultBreakerProbeTimeout
	}
	return b
}

// breaker is the state of Breaker. The closed path (no failure since the
// last answer) costs three atomic loads per call, no lock.
type breaker struct {
	cfg   Breaker
	now   func() time.Time // time.Now; a test's clock
	fails atomic.Int64     // consecutive calls that ended as transport failures
	open  atomic.Bool

	mu        sync.Mutex
	openedAt  time.Time
	nextProbe time.Time
	last      error // the failure that opened (or kept open) the breaker
}

func newBreaker(cfg Breaker) *breaker {
	return &breaker{cfg: cfg.withDefaults(), now: time.Now}
}

// admit says whether a call may go to the network: nil and probe=false when
// closed, probe=true for the one call per Interval an open breaker lets
// through, else an error matching ErrUnavailable.
func (b *breaker) admit() (probe bool, err error) {
	if b.cfg.Disabled || !b.open.Load() {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return false, nil
	}
	now := b.now()
	if now.Before(b.nextProbe) {
		return false, &breakerOpenError{since: now.Sub(b.openedAt), next: b.nextProbe.Sub(now), last: b.last}
	}
	b.nextProbe = now.Add(b.cfg.Interval)
	return true, nil
}

// answered records that a node answered over HTTP: the breaker closes.
func (b *breaker) answered() {
	if b.fails.Load() == 0 && !b.open.Load() {
		return
	}
	b.mu.Lock()
	b.fails.Store(0)
	b.open.Store(false)
	b.last = nil
	b.mu.Unlock()
}

// failed records a call that ended without any HTTP answer.
func (b *breaker) failed(err error) {
	if b.cfg.Disabled {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = err
	if b.fails.Add(1) >= int64(b.cfg.Failures) && !b.open.Load() {
		now := b.now()
		b.openedAt, b.nextProbe = now, now.Add(b.cfg.Interval)
		b.open.Store(true)
	}
}

// breakerOpenError is a call the open breaker answered without trying.
type breakerOpenError struct {
	since, next time.Duration
	last        error
}

func (e *breakerOpenError) Error() string {
	s := "limitd: unavailable: no node reachable for " + e.since.Round(time.Millisecond).String() +
		" (breaker open, next probe in " + e.next.Round(time.Millisecond).String() + ")"
	if e.last != nil {
		s += ": " + strings.TrimPrefix(strings.TrimPrefix(e.last.Error(), "limitd: "), "unavailable: ")
	}
	return s
}
func (e *breakerOpenError) Unwrap() error        { return e.last }
func (e *breakerOpenError) Is(target error) bool { return target == ErrUnavailable }

// unreachableError ends a call in which every known node failed to
// connect: nothing was sent, so there is nothing to retry with the same
// request_id, and waiting out the deadline would only delay the fail mode.
type unreachableError struct {
	addrs []string
	errs  []error
	// unknown: an earlier attempt of the call may have been counted.
	unknown  bool
	notCheck bool // as deadlineError's
}

func (e *unreachableError) Error() string {
	var b strings.Builder
	b.WriteString("limitd: unavailable: ")
	for i, a := range e.addrs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(dialFailure(e.errs[i]))
		b.WriteString(" to ")
		b.WriteString(a)
	}
	if e.unknown {
		b.WriteString("; ")
		b.WriteString(mayHave(e.notCheck))
	}
	return b.String()
}
func (e *unreachableError) Unwrap() []error { return e.errs }
func (e *unreachableError) Is(target error) bool {
	return target == ErrUnavailable || (e.unknown && target == ErrOutcomeUnknown)
}

// dialFailure names why a connection failed in the words an operator
// searches for.
func dialFailure(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "connection timed out"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	}
	var te *transportError
	if errors.As(err, &te) {
		err = unwrapURL(te.err)
	}
	return "cannot connect (" + err.Error() + ")"
}

// notConnected reports an attempt that failed before a request was sent.
func notConnected(err error) bool {
	var te *transportError
	return errors.As(err, &te) && !te.sent
}
