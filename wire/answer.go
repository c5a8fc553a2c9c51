package wire

import (
	"strconv"
	"time"

	"github.com/limitd/limitd/algo"
)

// Decision is the decision object of docs/API.md (/v1/check, each entry of
// /v1/check/all and /v1/check/batch, /v1/keys' "decision"), or, when Error is
// set, a batch entry's error. Allowed is what the caller is told: a shadow
// policy's refusal is allowed with ShadowRefused. Times are whole
// milliseconds; RetryAfterMS is -1 when waiting can never help.
type Decision struct {
	Allowed       bool  `json:"allowed"`
	Limit         int64 `json:"limit"`
	Remaining     int64 `json:"remaining"`
	ResetAfterMS  int64 `json:"reset_after_ms"`
	RetryAfterMS  int64 `json:"retry_after_ms"`
	DelayMS       int64 `json:"delay_ms"`
	ShadowRefused bool  `json:"shadow_refused"`
	Replayed      bool  `json:"replayed"`
	// Reason is why a check was answered other than by its limit
	// ("allowed" or "denied" by a list, "banned"); empty otherwise.
	Reason string `json:"reason"`
	Error  *Error `json:"error"`
	// Slot and SlotExpiresMS: under a concurrency limit, the slot an allowed
	// check holds and the time until its hold ends; written only with a slot.
	Slot          string `json:"slot,omitempty"`
	SlotExpiresMS int64  `json:"slot_expires_ms,omitempty"`
	// Degraded: the node decided alone, with its share of the limit,
	// because no quorum answered in time; written only when true.
	Degraded bool `json:"degraded,omitempty"`
	// Reservation and ReservationExpiresMS: an allowed reserve's id (what
	// a settle names) and the time until its hold ends; Debt: what an
	// overdraft left the key owing. Written only when set, after Extra.
	Reservation          string `json:"reservation,omitempty"`
	ReservationExpiresMS int64  `json:"reservation_expires_ms,omitempty"`
	Debt                 int64  `json:"debt,omitempty"`
	// Extra is members already encoded (",\"plan\":…" for a plan check),
	// written after the fixed ones and before "replayed"; the encoder's
	// only extension point, so that each answer's members keep one order.
	Extra []byte `json:"-"`
}

// Error is the error object: the body of every non-2xx answer is
// {"error":Error}, and so is a batch entry that failed on its own.
type Error struct {
	Code    string `json:"code"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Batch is /v1/check/batch's answer.
type Batch struct {
	Results []Decision `json:"results"`
}

// All is /v1/check/all's answer.
type All struct {
	Allowed  bool       `json:"allowed"`
	Results  []Decision `json:"results"`
	Replayed bool       `json:"replayed"`
}

// Millis converts a duration to whole milliseconds, rounded up so that a
// client that waits that long is not refused again by rounding. algo.Never
// stays -1.
func Millis(d time.Duration) int64 {
	if d == algo.Never {
		return -1
	}
	if d <= 0 {
		return 0
	}
	return (int64(d) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// Duration is Millis read back: -1 is algo.Never.
func Duration(ms int64) time.Duration {
	if ms < 0 {
		return algo.Never
	}
	return time.Duration(ms) * time.Millisecond
}

// AppendDecision appends d: the decision object, or the error entry
// {"error":{...}} when d.Error is set. shadow_refused and replayed are
// written only when true.
func AppendDecision(b []byte, d *Decision) []byte {
	if d.Error != nil {
		return AppendErrorBody(b, d.Error.Code, d.Error.Field, d.Error.Message)
	}
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, d.ResetAfterMS, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, d.RetryAfterMS, 10)
	b = append(b, `,"delay_ms":`...)
	b = strconv.AppendInt(b, d.DelayMS, 10)
	if d.ShadowRefused {
		b = append(b, `,"shadow_refused":true`...)
	}
	if d.Reason != "" {
		b = append(b, `,"reason":`...)
		b = AppendString(b, d.Reason)
	}
	if d.Slot != "" {
		b = append(b, `,"slot":`...)
		b = AppendString(b, d.Slot)
		b = append(b, `,"slot_expires_ms":`...)
		b = strconv.AppendInt(b, d.SlotExpiresMS, 10)
	}
	if d.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	b = append(b, d.Extra...)
	if d.Reservation != "" {
		b = append(b, `,"reservation":`...)
		b = AppendString(b, d.Reservation)
		b = append(b, `,"reservation_expires_ms":`...)
		b = strconv.AppendInt(b, d.ReservationExpiresMS, 10)
	}
	if d.Debt != 0 {
		b = append(b, `,"debt":`...)
		b = strconv.AppendInt(b, d.Debt, 10)
	}
	if d.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	return append(b, '}')
}

// AppendError appends the error object {"code":..,"field":..,"message":..};
// field is left out when empty.
func AppendError(b []byte, code, field, message string) []byte {
	b = append(b, `{"code":`...)
	b = AppendString(b, code)
	if field != "" {
		b = append(b, `,"field":`...)
		b = AppendString(b, field)
	}
	b = append(b, `,"message":`...)
	b = AppendString(b, message)
	return append(b, '}')
}

// AppendErrorBody appends {"error":{...}}: an error answer's body, and a
// batch entry's error.
func AppendErrorBody(b []byte, code, field, message string) []byte {
	b = append(b, `{"error":`...)
	b = AppendError(b, code, field, message)
	return append(b, '}')
}

// The envelopes of /v1/check/batch and /v1/check/all: a writer that holds
// its results in its own types appends the opening, the entries separated
// by ',' (AppendDecision, AppendErrorBody) and ResultsEnd.
const (
	BatchStart = `{"results":[`
	ResultsEnd = "]}"
)

// AppendAllStart opens /v1/check/all's answer, up to its results array.
func AppendAllStart(b []byte, allowed, replayed bool) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, allowed)
	if replayed {
		b = append(b, `,"replayed":true`...)
	}
	return append(b, `,"results":[`...)
}

// AppendBatch appends a whole /v1/check/batch answer.
func AppendBatch(b []byte, results []Decision) []byte {
	b = append(b, BatchStart...)
	b = appendResults(b, results)
	return append(b, ResultsEnd...)
}

// AppendAll appends a whole /v1/check/all answer. The server replays the
// step as one, so its entries carry no Replayed of their own.
func AppendAll(b []byte, a *All) []byte {
	b = AppendAllStart(b, a.Allowed, a.Replayed)
	b = appendResults(b, a.Results)
	return append(b, ResultsEnd...)
}

func appendResults(b []byte, results []Decision) []byte {
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendDecision(b, &results[i])
	}
	return b
}
