package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
)

// ErrRefused is Reserve's error when the estimate does not fit: nothing was
// spent. The Reservation returned with it carries RetryAfter.
var ErrRefused = errors.New("limitd: refused")

// Reservation is an estimate held on a key until it is settled or its hold
// ends (docs/API.md, "Costs known later").
type Reservation struct {
	ID string // the token POST /v1/settle takes
	// Expires is when the hold ends, by this client's clock; unsettled by
	// then, the reservation stays settled at its estimate (or is given back
	// under a policy with ReservationExpiry "return").
	Expires  time.Time
	Decision Decision
}

// Settled is a settle's or refund's answer: Credited, units given back to
// the key (negative: a settle's extra charge); Debt, what the key owes past
// its limit after it; Rolled, that less than asked came back (the window the
// units were spent in has rolled, or the bucket refilled since); Replayed, a
// repeated settle that changed nothing.
type Settled struct {
	Credited, Debt, Remaining int64
	Rolled, Replayed          bool
}

// Reserve spends r.Cost (the estimate; 0 means 1) on the key now and holds
// it for hold. It returns the reservation and settle, which settles it at
// the actual cost: the difference comes back (in the window the estimate
// was spent in) or the extra is charged, which always applies. settle is
// exactly once on the server, so calling it again with the same cost is
// safe (Replayed); a settle after the hold's end is an *Error naming
// "reservation". Refused: ErrRefused, nothing spent.
func (c *Client) Reserve(ctx context.Context, r Request, hold time.Duration) (Reservation, func(ctx context.Context, actual int64) (Settled, error), error) {
	d, rsv, err := c.reserve(ctx, r, hold)
	if err != nil {
		return Reservation{}, nil, err
	}
	out := Reservation{ID: rsv.id, Decision: d, Expires: time.Now().Add(rsv.hold)}
	if !d.Allowed || rsv.id == "" {
		return out, nil, ErrRefused
	}
	settle := func(ctx context.Context, actual int64) (Settled, error) {
		return c.Settle(ctx, out.ID, actual)
	}
	return out, settle, nil
}

// Overdraft spends r.Cost on the key whatever its budget: past the limit
// the key goes into debt (Settled.Debt), refused until it has refilled or
// rolled. Only fixed_window, sliding_window, token_bucket and leaky_bucket
// limits can hold a debt.
func (c *Client) Overdraft(ctx context.Context, r Request) (Decision, int64, error) {
	d, rsv, err := c.costCheck(ctx, r, 0, true)
	return d, rsv.debt, err
}

// Settle settles the reservation id at its actual cost (POST /v1/settle;
// concurrent settles are coalesced into POST /v1/settle/batch requests,
// costbatch.go).
func (c *Client) Settle(ctx context.Context, id string, actual int64) (Settled, error) {
	body, err := json.Marshal(struct {
		Reservation string `json:"reservation"`
		Cost        int64  `json:"cost"`
	}{id, actual})
	if err != nil {
		return Settled{}, err
	}
	var out costAnswerJSON
	// A settle is exactly once on the server (keyed by the reservation): a
	// retry replays.
	if err := c.pairCall(ctx, c.pb.settle, body, &out); err != nil {
		return Settled{}, err
	}
	return out.settled(), nil
}

// Refund gives back up to cost units of what the check with requestID
// spent, in the window it spent them (POST /v1/refund). Not exactly once: a
// repeat gives back again, up to what the request spent.
func (c *Client) Refund(ctx context.Context, requestID string, cost int64) (Settled, error) {
	return c.costCall(ctx, "/v1/refund", struct {
		RequestID string `json:"request_id"`
		Cost      int64  `json:"cost"`
	}{requestID, cost})
}

// reserve sends a reserve as Check sends checks: coalesced into
// /v1/check/batch requests with the concurrent checks and reserves, so that
// a reserve + settle pair is two batch items (the settle goes by
// /v1/settle/batch). Without coalescing or request ids (which make a reserve
// exactly once under retries), or once a node has refused a reserve as a
// batch entry (one older than the entry), it is a single /v1/check.
func (c *Client) reserve(ctx context.Context, r Request, hold time.Duration) (Decision, costAnswer, error) {
	if c.opts.coalesce.Disabled || c.opts.noRequestID || c.co.reserveAlone.Load() || hold <= 0 {
		return c.costCheck(ctx, r, hold, false)
	}
	if r.Cost == 0 {
		r.Cost = 1
	}
	d, rsv, err := c.co.doHold(ctx, &r, hold)
	var e *Error
	if errors.As(err, &e) && e.Code == CodeInvalidArgument && e.Field == "reserve" && strings.Contains(e.Message, "not part of a batch") {
		c.co.reserveAlone.Store(true)
		return c.costCheck(ctx, r, hold, false)
	}
	return d, rsv, err
}

type reserveHold struct {
	Hold string `json:"hold"`
}

type costAnswer struct {
	id   string
	hold time.Duration
	debt int64
}

func (c *Client) costCheck(ctx context.Context, r Request, hold time.Duration, overdraft bool) (Decision, costAnswer, error) {
	if r.Cost == 0 {
		r.Cost = 1
	}
	if r.RequestID == "" {
		r.RequestID = string(c.newRequestID(make([]byte, 0, 40)))
	}
	in := struct {
		Key       string       `json:"key"`
		Policy    string       `json:"policy,omitempty"`
		Limit     *Limit       `json:"limit,omitempty"`
		Cost      int64        `json:"cost"`
		RequestID string       `json:"request_id"`
		Reserve   *reserveHold `json:"reserve,omitempty"`
		Overdraft bool         `json:"overdraft,omitempty"`
	}{Key: r.Key, Policy: r.Policy, Limit: r.Limit, Cost: r.Cost, RequestID: r.RequestID, Overdraft: overdraft}
	if hold > 0 {
		in.Reserve = &reserveHold{Hold: hold.String()}
	}
	body, err := json.Marshal(in)
	if err != nil {
		return Decision{}, costAnswer{}, err
	}
	var out struct {
		Allowed              bool   `json:"allowed"`
		Limit                int64  `json:"limit"`
		Remaining            int64  `json:"remaining"`
		ResetAfterMS         int64  `json:"reset_after_ms"`
		RetryAfterMS         int64  `json:"retry_after_ms"`
		DelayMS              int64  `json:"delay_ms"`
		Replayed             bool   `json:"replayed"`
		Reservation          string `json:"reservation"`
		ReservationExpiresMS int64  `json:"reservation_expires_ms"`
		Debt                 int64  `json:"debt"`
	}
	// The request id makes the check safe to retry: a retry replays the
	// first answer, reservation included.
	if err := c.call(ctx, http.MethodPost, "/v1/check", body, false, true, &out); err != nil {
		return Decision{}, costAnswer{}, err
	}
	d := Decision{Allowed: out.Allowed, Limit: out.Limit, Remaining: out.Remaining, ResetAfter: ms(out.ResetAfterMS),
		Delay: ms(out.DelayMS), Replayed: out.Replayed}
	if out.RetryAfterMS < 0 {
		d.RetryAfter = Never
	} else {
		d.RetryAfter = ms(out.RetryAfterMS)
	}
	return d, costAnswer{id: out.Reservation, hold: ms(out.ReservationExpiresMS), debt: out.Debt}, nil
}

func (c *Client) costCall(ctx context.Context, path string, in any) (Settled, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return Settled{}, err
	}
	var out costAnswerJSON
	// A refund is not retried when it may have applied: a repeat gives
	// back again, up to what its request spent.
	if err := c.call(ctx, http.MethodPost, path, body, false, false, &out); err != nil {
		return Settled{}, err
	}
	return out.settled(), nil
}

// costAnswerJSON is a settle's or refund's answer.
type costAnswerJSON struct {
	Credited  int64 `json:"credited"`
	Debt      int64 `json:"debt"`
	Rolled    bool  `json:"rolled"`
	Remaining int64 `json:"remaining"`
	Replayed  bool  `json:"replayed"`
}

func (o *costAnswerJSON) settled() Settled {
	return Settled{Credited: o.Credited, Debt: o.Debt, Remaining: o.Remaining, Rolled: o.Rolled, Replayed: o.Replayed}
}
