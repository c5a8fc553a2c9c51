package client

import (
	"time"

	"github.com/limitd/limitd/wire"
)

// The answers' shapes are package wire's, the server's own: the decision
// object (or an entry's error), the batch and check/all envelopes.
type (
	wireDecision = wire.Decision
	wireError    = wire.Error
	wireBatch    = wire.Batch
	wireAll      = wire.All
)

func decisionOf(w *wire.Decision) Decision {
	return Decision{
		Allowed: w.Allowed, Limit: w.Limit, Remaining: w.Remaining,
		ResetAfter: ms(w.ResetAfterMS), RetryAfter: wire.Duration(w.RetryAfterMS), Delay: ms(w.DelayMS),
		ShadowRefused: w.ShadowRefused, Replayed: w.Replayed, Reason: w.Reason,
		Slot: w.Slot, SlotExpires: ms(w.SlotExpiresMS), Degraded: w.Degraded,
	}
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func errOf(w *wire.Error, status int) *Error {
	return &Error{Status: status, Code: w.Code, Field: w.Field, Message: w.Message}
}

// parseBatch and parseDecision read the check path's answers without
// reflection (wire's scanner, encoding/json for anything unexpected).
func parseBatch(b []byte, dst []wireDecision) ([]wireDecision, error) { return wire.ParseBatch(b, dst) }

func parseDecision(b []byte) (wireDecision, error) { return wire.ParseDecision(b) }
