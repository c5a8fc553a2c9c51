package forward

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// Every outcome a leader writes reads back as itself on the follower.
func TestOutcomeRoundTrip(t *testing.T) {
	names := map[string]outcome{}
	for o := outcome(0); o < numOutcomes; o++ {
		if prev, dup := names[o.String()]; dup {
			t.Fatalf("outcomes %d and %d share the name %q", prev, o, o.String())
		}
		names[o.String()] = o
		rec := httptest.NewRecorder()
		if o == outcomeOK {
			rec.WriteHeader(http.StatusOK) // a success is a plain 200 with its body
		} else {
			writeOutcome(rec, o, "why")
		}
		got, err := decodeOutcome(rec.Code, rec.Header().Get(errHeader))
		if err != nil || got != o {
			t.Errorf("%s: written as %d %q, read back as %s, %v", o, rec.Code, rec.Header().Get(errHeader), got, err)
		}
	}
}

// An answer the follower cannot place is outcome unknown: never retried,
// never success.
func TestOutcomeUnknownValuesAreOutcomeUnknown(t *testing.T) {
	for _, c := range []struct {
		status int
		header string
	}{
		{503, "maybe"},
		{503, "NOT_LEADER"},
		{503, "ok"},
		{200, "not_leader"}, // a header contradicting its status
		{500, "not_leader"},
		{503, "failed"},
		{503, ""}, // a failure without a name
		{500, ""},
		{404, ""},
	} {
		o, err := decodeOutcome(c.status, c.header)
		if !errors.Is(err, nodeapi.ErrOutcomeUnknown) || o != outcomeUnknown {
			t.Errorf("decodeOutcome(%d, %q) = %s, %v; want outcome unknown", c.status, c.header, o, err)
		}
		if err := outcomeError(o, "l", "x"); !errors.Is(err, nodeapi.ErrOutcomeUnknown) || errors.Is(err, ErrRetry) {
			t.Errorf("decodeOutcome(%d, %q): follower error %v; want nodeapi.ErrOutcomeUnknown, not retryable", c.status, c.header, err)
		}
	}
	// Leaders of earlier releases label only the 503s; their other
	// refusals are read by status.
	for status, want := range map[int]outcome{200: outcomeOK, 400: outcomeBadRequest, 401: outcomeUnauthenticated, 413: outcomeTooLarge} {
		if o, err := decodeOutcome(status, ""); err != nil || o != want {
			t.Errorf("decodeOutcome(%d, \"\") = %s, %v; want %s", status, o, err, want)
		}
	}
}

// The whole contract, leader to follower: the error the leader's request
// ended with, written by the leader and read by the follower, keeps its
// meaning. A leader that labels an outcome-unknown failure as "not proposed"
// fails here (the follower would retry and count twice).
func TestOutcomeContractLeaderToFollower(t *testing.T) {
	const (
		retry = iota
		unknown
		tooLarge
		unauthenticated
		final // a known failure: neither retried nor unknown
	)
	for _, c := range []struct {
		err  error
		want int
	}{
		{ErrRetry, retry},
		{nodeapi.ErrNoLeader, retry},
		{&UnavailableError{errors.New("disk full")}, retry},
		{fmt.Errorf("not proposed before the request's deadline: %w", context.Canceled), retry},
		{fmt.Errorf("not proposed before the request's deadline: %w", context.DeadlineExceeded), retry},
		{nodeapi.ErrOutcomeUnknown, unknown},
		{fmt.Errorf("%w: the entry was not applied within 5s", nodeapi.ErrOutcomeUnknown), unknown},
		{fmt.Errorf("%w: no answer before the request's deadline (%w)", nodeapi.ErrOutcomeUnknown, context.Canceled), unknown},
		{fmt.Errorf("%w: node unavailable (%w)", nodeapi.ErrOutcomeUnknown, nodeapi.ErrNoLeader), unknown},
		// handleCheck's label for a later part of a split batch.
		{fmt.Errorf("%w: part 2 of 2 failed: %v", nodeapi.ErrOutcomeUnknown, ErrRetry), unknown},
		{fmt.Errorf("%w: op 3 is too big", nodeapi.ErrTooLarge), tooLarge},
		{&fsm.Error{Code: fsm.CodeInvalidArgument, Field: "key", Message: "bad"}, final},
		{errors.New("unexpected check response"), final},
	} {
		rec := httptest.NewRecorder()
		WriteError(rec, c.err)
		o, err := decodeOutcome(rec.Code, rec.Header().Get(errHeader))
		if err != nil {
			t.Errorf("%v: the follower cannot read the leader's answer (%d %q): %v", c.err, rec.Code, rec.Header().Get(errHeader), err)
			continue
		}
		got := outcomeError(o, "leader", rec.Body.String())
		var ue *UnavailableError
		var class int
		switch {
		case errors.Is(got, nodeapi.ErrOutcomeUnknown):
			class = unknown
		case errors.Is(got, ErrRetry):
			class = retry
		case errors.Is(got, nodeapi.ErrTooLarge):
			class = tooLarge
		case errors.As(got, &ue):
			class = unauthenticated
		default:
			class = final
		}
		if class != c.want {
			t.Errorf("leader error %v → outcome %s → follower error %v: class %d, want %d", c.err, o, got, class, c.want)
		}
		if errors.Is(got, nodeapi.ErrOutcomeUnknown) && errors.Is(got, ErrRetry) {
			t.Errorf("follower error %v is both unknown and retryable", got)
		}
	}
	// The authentication refusal, written by the leader's middleware.
	rec := httptest.NewRecorder()
	writeOutcome(rec, outcomeUnauthenticated, "unauthenticated")
	o, err := decodeOutcome(rec.Code, rec.Header().Get(errHeader))
	var ue *UnavailableError
	if err != nil || !errors.As(outcomeError(o, "leader", "x"), &ue) {
		t.Errorf("an authentication refusal reads as %s, %v", o, err)
	}
}

// On the check stream every outcome is one byte that reads back as itself,
// no two share a code, and a code the follower does not know is outcome
// unknown (never retried, never success).
func TestStreamOutcomeCodes(t *testing.T) {
	seen := map[byte]outcome{}
	for o := outcome(0); o < numOutcomes; o++ {
		code := outcomeWire[o].code
		if prev, dup := seen[code]; dup {
			t.Fatalf("outcomes %s and %s share the stream code %d", prev, o, code)
		}
		seen[code] = o
		if got, err := decodeStreamOutcome(code); err != nil || got != o {
			t.Errorf("%s: code %d read back as %s, %v", o, code, got, err)
		}
	}
	for code := 0; code < 256; code++ {
		if _, known := seen[byte(code)]; known {
			continue
		}
		o, err := decodeStreamOutcome(byte(code))
		if !errors.Is(err, nodeapi.ErrOutcomeUnknown) || o != outcomeUnknown {
			t.Fatalf("code %d: %s, %v; want outcome unknown", code, o, err)
		}
	}
}
