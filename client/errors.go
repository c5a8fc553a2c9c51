package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Error codes the server sends (docs/API.md, "Errors"). Switch on Code, not
// on Message, whose wording may change.
const (
	CodeInvalidArgument  = "invalid_argument"
	CodeUnauthenticated  = "unauthenticated"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodePayloadTooLarge  = "payload_too_large"
	CodeUnavailable      = "unavailable"
	CodeOutcomeUnknown   = "outcome_unknown"
	CodeInternal         = "internal"
)

// Sentinel errors for errors.Is. An *Error matches the sentinel of its code;
// transport failures and deadlines reached while the cluster did not answer
// match ErrUnavailable.
var (
	// ErrUnavailable: no node answered with a decision before the deadline
	// (no leader, connection refused, timeouts). Nothing may be assumed about a
	// check that failed this way unless it also matches ErrOutcomeUnknown's
	// negation; the client already retried it with the same request_id.
	ErrUnavailable = errors.New("limitd: unavailable")
	// ErrOutcomeUnknown: the last attempt may have been counted (leadership
	// changed while it was in flight, or the connection was lost after sending)
	// and the deadline passed before a retry with the same request_id could
	// tell. It also matches ErrUnavailable.
	ErrOutcomeUnknown = errors.New("limitd: outcome unknown")
	// ErrInvalidArgument: the request is malformed; *Error.Field names what.
	ErrInvalidArgument = errors.New("limitd: invalid argument")
	// ErrNotFound: unknown policy, key route or node.
	ErrNotFound = errors.New("limitd: not found")
	// ErrUnauthenticated: an admin call without the right token (WithToken).
	ErrUnauthenticated = errors.New("limitd: unauthenticated")
	// ErrConflict: a request_id reused for a different request (another key,
	// policy, limit, cost or number of checks); Error.Field names what differs.
	ErrConflict = errors.New("limitd: conflict")
)

// Error is an error answered by a limitd node: its HTTP status and the
// `{"error":{"code","field","message"}}` body.
type Error struct {
	Status  int    // HTTP status, e.g. 400
	Code    string // e.g. CodeInvalidArgument
	Field   string // JSON path of the offending value, e.g. "limit.window"; may be empty
	Message string
	// RetryAfter is the server's Retry-After on 503s.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("limitd: ")
	b.WriteString(e.Code)
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnavailable:
		return e.Code == CodeUnavailable || e.Code == CodeOutcomeUnknown
	case ErrOutcomeUnknown:
		return e.Code == CodeOutcomeUnknown
	case ErrInvalidArgument:
		return e.Code == CodeInvalidArgument || e.Code == CodePayloadTooLarge
	case ErrNotFound:
		return e.Code == CodeNotFound
	case ErrUnauthenticated:
		return e.Code == CodeUnauthenticated
	case ErrConflict:
		return e.Code == CodeConflict
	}
	return false
}

// retryable reports whether err may be retried with the same request_id:
// the server said 503, or the request did not get an answer.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == CodeUnavailable || e.Code == CodeOutcomeUnknown || e.Status == http.StatusServiceUnavailable ||
			e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout
	}
	var te *transportError
	return errors.As(err, &te)
}

// transportError is a request that got no HTTP answer. sent says whether the
// request may have reached the server (then its outcome is unknown).
type transportError struct {
	addr string
	sent bool
	err  error
}

func (e *transportError) Error() string { return fmt.Sprintf("limitd: %s: %v", e.addr, e.err) }
func (e *transportError) Unwrap() error { return e.err }
func (e *transportError) Is(target error) bool {
	return target == ErrUnavailable || (e.sent && target == ErrOutcomeUnknown)
}

// mayHaveCounted reports whether a failed attempt may have been applied.
func mayHaveCounted(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == CodeOutcomeUnknown || (e.Status >= 500 && e.Code != CodeUnavailable)
	}
	var te *transportError
	if errors.As(err, &te) {
		return te.sent
	}
	return false
}

// deadlineError is returned when the caller's deadline ends the retries: it
// wraps the context error and the last failure, and matches ErrUnavailable
// (and ErrOutcomeUnknown when some attempt may have been counted).
type deadlineError struct {
	ctxErr  error
	last    error
	unknown bool
}

func (e *deadlineError) Error() string {
	s := "limitd: unavailable: " + e.ctxErr.Error()
	if e.last != nil {
		s += " (last attempt: " + strings.TrimPrefix(e.last.Error(), "limitd: ") + ")"
	}
	if e.unknown {
		s += "; it may have been counted"
	}
	return s
}

func (e *deadlineError) Unwrap() []error {
	if e.last != nil {
		return []error{e.ctxErr, e.last}
	}
	return []error{e.ctxErr}
}

func (e *deadlineError) Is(target error) bool {
	return target == ErrUnavailable || (e.unknown && target == ErrOutcomeUnknown)
}
