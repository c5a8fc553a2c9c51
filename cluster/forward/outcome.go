package forward

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/limitd/limitd/nodeapi"
)

// ErrRetry marks a failure that happened before anything was proposed (this
// node is not the leader, or the leader's address is not known yet): the
// caller may try again, with the new leader, without any risk of double counting.
var ErrRetry = errors.New("not proposed: retry with the current leader")

// UnavailableError carries the cause of an ErrUnavailable (nodeapi): a node
// that cannot serve, or a leader that refused this node's credentials.
type UnavailableError struct{ Cause error }

func (e *UnavailableError) Error() string { return "node unavailable: " + e.Cause.Error() }
func (e *UnavailableError) Unwrap() error { return e.Cause }
func (e *UnavailableError) Is(target error) bool {
	return target == nodeapi.ErrUnavailable || target == nodeapi.ErrNoLeader
}

// outcome is how a node-to-node request ended, as the leader tells the
// follower that forwarded it. It is the whole contract between them on the
// one question that matters for counting: was anything proposed? A follower
// retries only outcomes that say "not proposed" (outcomeNotLeader,
// outcomeNoLeader); everything else, and anything it cannot read, it returns
// to its caller — an unreadable answer as nodeapi.ErrOutcomeUnknown.
//
// On the wire an outcome is the response's status code and its
// X-Limitd-Error header, both written by writeOutcome and read by
// decodeOutcome; the values are fixed, a new outcome takes a new one. On the
// check stream (stream.go) it is one byte, outcomeWire's code, read by
// decodeStreamOutcome.
type outcome uint8

const (
	// outcomeOK: done; the body is the answer.
	outcomeOK outcome = iota
	// outcomeNotLeader: not proposed, the node is not the leader; retry
	// with the current one.
	outcomeNotLeader
	// outcomeNoLeader: not proposed, the node has no leader, cannot serve,
	// or withdrew the request from its queue before proposing it; retry.
	outcomeNoLeader
	// outcomeUnknown: proposed, or may have been, without a confirmed
	// result. Never retried: a retry could count the request twice.
	outcomeUnknown
	// outcomeTooLarge: refused before proposing, over a size bound.
	outcomeTooLarge
	// outcomeBadRequest: refused before proposing, malformed.
	outcomeBadRequest
	// outcomeUnauthenticated: refused before proposing, the sender's
	// credentials (admin token or client certificate) were not accepted.
	outcomeUnauthenticated
	// outcomeFailed: decided, with an error (the state machine refused the
	// command, or the leader failed it knowingly); not retried.
	outcomeFailed

	numOutcomes = iota
)

// errHeader carries the outcome of a failed node-to-node request.
const errHeader = "X-Limitd-Error"

// outcomeWire is each outcome's header value and status code, and its code
// on the check stream. The codes are fixed: a new outcome takes a new one.
var outcomeWire = [numOutcomes]struct {
	name   string
	status int
	code   byte
}{
	outcomeOK:              {"", http.StatusOK, 0},
	outcomeNotLeader:       {"not_leader", http.StatusServiceUnavailable, 1},
	outcomeNoLeader:        {"no_leader", http.StatusServiceUnavailable, 2},
	outcomeUnknown:         {"outcome_unknown", http.StatusServiceUnavailable, 3},
	outcomeTooLarge:        {"too_large", http.StatusRequestEntityTooLarge, 4},
	outcomeBadRequest:      {"bad_request", http.StatusBadRequest, 5},
	outcomeUnauthenticated: {"unauthenticated", http.StatusUnauthorized, 6},
	outcomeFailed:          {"failed", http.StatusInternalServerError, 7},
}

func (o outcome) String() string {
	if int(o) >= numOutcomes {
		return fmt.Sprintf("outcome(%d)", o)
	}
	if o == outcomeOK {
		return "ok"
	}
	return outcomeWire[o].name
}

// retryable says whether nothing was proposed, so the request may go again
// (to the current leader) without any risk of double counting.
func (o outcome) retryable() bool { return o == outcomeNotLeader || o == outcomeNoLeader }

// outcomeOf is the leader's side of the contract: how a request that ended
// with err ended. Order matters: an error that says the outcome is unknown
// is unknown whatever else it wraps.
func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, nodeapi.ErrOutcomeUnknown):
		return outcomeUnknown
	case errors.Is(err, ErrRetry):
		return outcomeNotLeader
	case errors.Is(err, nodeapi.ErrNoLeader), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// nodeapi.ErrNoLeader covers nodeapi.ErrUnavailable. A context error that is not
		// nodeapi.ErrOutcomeUnknown is a unit withdrawn from the queue when the
		// forwarding follower gave up: nothing was proposed.
		return outcomeNoLeader
	case errors.Is(err, nodeapi.ErrTooLarge):
		return outcomeTooLarge
	}
	return outcomeFailed
}

// writeOutcome writes a failed node-to-node request's answer: the status
// and header of o, and msg as the body.
func writeOutcome(w http.ResponseWriter, o outcome, msg string) {
	if o == outcomeOK || int(o) >= numOutcomes {
		// A failure without a name would read as unknown; say so here.
		o = outcomeUnknown
	}
	w.Header().Set(errHeader, outcomeWire[o].name)
	http.Error(w, msg, outcomeWire[o].status)
}

// decodeOutcome is the follower's side of the contract: the outcome of an
// answer with this status and X-Limitd-Error header. A header value it does
// not know, or one that contradicts the status, is an error matching
// nodeapi.ErrOutcomeUnknown (never retried). Without the header (an answer of
// the HTTP layer itself: the identity check's 400 and 403, a 404) the status
// decides, and a failure it cannot place is outcome unknown too.
func decodeOutcome(status int, header string) (outcome, error) {
	if header == "" {
		switch status {
		case http.StatusOK:
			return outcomeOK, nil
		case http.StatusUnauthorized:
			return outcomeUnauthenticated, nil
		case http.StatusRequestEntityTooLarge:
			return outcomeTooLarge, nil
		case http.StatusBadRequest:
			return outcomeBadRequest, nil
		}
		return outcomeUnknown, fmt.Errorf("%w: an answer with status %d and no outcome", nodeapi.ErrOutcomeUnknown, status)
	}
	for o := outcomeNotLeader; o < numOutcomes; o++ {
		if outcomeWire[o].name != header {
			continue
		}
		if outcomeWire[o].status != status {
			return outcomeUnknown, fmt.Errorf("%w: outcome %s with status %d (want %d)", nodeapi.ErrOutcomeUnknown, header, status, outcomeWire[o].status)
		}
		return o, nil
	}
	return outcomeUnknown, fmt.Errorf("%w: unknown outcome %q (status %d)", nodeapi.ErrOutcomeUnknown, header, status)
}

// decodeStreamOutcome is the follower's side of the contract on the check
// stream: the outcome with this code. A code it does not know is an error
// matching nodeapi.ErrOutcomeUnknown (never retried).
func decodeStreamOutcome(code byte) (outcome, error) {
	for o := outcomeOK; o < numOutcomes; o++ {
		if outcomeWire[o].code == code {
			return o, nil
		}
	}
	return outcomeUnknown, fmt.Errorf("%w: unknown outcome code %d", nodeapi.ErrOutcomeUnknown, code)
}

// outcomeError is the error a follower returns for a failed outcome o from
// the leader at addr, whose body said msg. Retryable outcomes match ErrRetry.
func outcomeError(o outcome, addr, msg string) error {
	msg = strings.TrimSpace(msg)
	if o.retryable() {
		return fmt.Errorf("%w: leader %s: %s", ErrRetry, addr, msg)
	}
	switch o {
	case outcomeOK:
		return nil
	case outcomeTooLarge:
		return fmt.Errorf("%w: leader %s: %s", nodeapi.ErrTooLarge, addr, msg)
	case outcomeUnauthenticated:
		// Nodes disagree on the token or CA (a rotation in progress, or a
		// misconfiguration): say so.
		return &UnavailableError{Cause: fmt.Errorf("the leader %s refused this node's credentials (admin token or certificate): %s", addr, msg)}
	case outcomeBadRequest, outcomeFailed:
		return fmt.Errorf("leader %s answered %s: %s", addr, o, msg)
	}
	return fmt.Errorf("%w: leader %s: %s", nodeapi.ErrOutcomeUnknown, addr, msg)
}

// WriteError answers a node-to-node request that failed with err, with the
// outcome err stands for (OutcomeOf).
func WriteError(w http.ResponseWriter, err error) {
	writeOutcome(w, outcomeOf(err), err.Error())
}

// WriteBadRequest answers a malformed node-to-node request: refused before
// anything was proposed.
func WriteBadRequest(w http.ResponseWriter, msg string) {
	writeOutcome(w, outcomeBadRequest, msg)
}
