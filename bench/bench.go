// Package bench owns closed-loop load generation, key distributions, latency
// recording and the result table.
//
// It is shared by `limitd bench` and by the Redis driver in scripts/redisbench,
// so both systems are measured by the same workers, the same key sequence and
// the same report. A system under test is a Target (one check per call) and,
// for batched runs, a BatchTarget. Nothing here knows limitd's internals: the
// HTTP target speaks the public JSON API only.
package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
)

// Target is a system under test. Do asks whether key number keyIndex may spend
// one check's cost now. It is called concurrently by every worker.
type Target interface {
	Do(ctx context.Context, keyIndex int) (allowed bool, err error)
}

// BatchTarget decides several independent checks in one round trip. out has
// len(keys) entries; DoBatch fills every one of them unless it returns an
// error, in which case the whole request failed and every check counts as an
// error of that error's class.
type BatchTarget interface {
	Target
	DoBatch(ctx context.Context, keys []int, out []Outcome) error
}

// Outcome is one check's answer inside a batch: allowed, refused, or an error
// confined to that slot.
type Outcome struct {
	Allowed bool
	Err     error
}

// ErrorClass groups errors for the report.
type ErrorClass uint8

const (
	Err4xx       ErrorClass = iota // the server rejected the request (4xx or a 4xx-like slot error)
	Err5xx                         // the server failed (5xx: no leader, outcome unknown, internal)
	ErrTimeout                     // no answer within the request timeout
	ErrTransport                   // connection refused, reset, DNS, ...
	ErrOther                       // anything else, e.g. a malformed response
	numErrorClasses
)

var errorClassNames = [numErrorClasses]string{"4xx", "5xx", "timeout", "transport", "other"}

func (c ErrorClass) String() string {
	if c < numErrorClasses {
		return errorClassNames[c]
	}
	return "class" + strconv.Itoa(int(c))
}

// StatusError is an error answered by the server: an HTTP status other than 200
// (Status set) or an error in one slot of a batch (Status 0; Code decides the
// class).
type StatusError struct {
	Status  int
	Code    string
	Message string
}

func (e *StatusError) Error() string {
	var s string
	if e.Status != 0 {
		s = "HTTP " + strconv.Itoa(e.Status)
	} else {
		s = "slot error"
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Class reports 4xx or 5xx from the status, or from the error code for a slot
// error (codes that mean "the cluster could not decide" count as 5xx).
func (e *StatusError) Class() ErrorClass {
	switch {
	case e.Status >= 500:
		return Err5xx
	case e.Status >= 400:
		return Err4xx
	case e.Status != 0:
		return ErrOther
	}
	switch e.Code {
	case "unavailable", "outcome_unknown", "internal":
		return Err5xx
	}
	return Err4xx
}

// Classify maps an error from a Target to its report class.
func Classify(err error) ErrorClass {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Class()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return ErrTimeout
		}
		return ErrTransport
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return ErrTransport
	}
	return ErrOther
}

// ErrMalformed marks a response the target could not understand.
var ErrMalformed = errors.New("malformed response")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}
