package client

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrNoSlot is Acquire's error for a refused acquire: every slot of the key
// is held. The Slot returned with it carries RetryAfter.
var ErrNoSlot = errors.New("limitd: no slot free")

// ErrSlotLost is a renewal's error when the slot had been freed already
// (released, or its hold ended before the renewal arrived): the work it
// guarded is no longer counted, and another holder may have its place.
var ErrSlotLost = errors.New("limitd: slot lost")

// Slot is a held slot of a concurrency limit.
type Slot struct {
	ID string
	// Expires is when the hold ends, by this client's clock (the server's
	// slot_expires_ms from the answer's arrival): renew well before it.
	Expires time.Time
	// Decision is the acquire's decision (RetryAfter when refused).
	Decision Decision
}

// SlotStatus is a release's or renewal's answer: Done when the slot was
// held and is released or renewed now; Expires, after a renewal, when the
// hold now ends.
type SlotStatus struct {
	Done      bool
	Expires   time.Time
	Remaining int64 // slots free on the key after the operation
}

// Acquire takes a slot of the concurrency limit r names (a policy or an inline
// limit with Algorithm "concurrency"; Cost must be 0 or 1, and 0 means 1
// here as for Check). It is Check with a request id, which the server uses as
// the slot's id, so a retried acquire never holds two slots. On success it
// returns the slot and release, which frees it (idempotently: calling it twice,
// or after the hold ended, returns nil). Refused: ErrNoSlot, with the Slot's
// Decision.RetryAfter saying when the earliest held slot ends.
func (c *Client) Acquire(ctx context.Context, r Request) (Slot, func(ctx context.Context) error, error) {
	if r.RequestID == "" {
		r.RequestID = string(c.newRequestID(make([]byte, 0, 40)))
	}
	d, err := c.check(ctx, &r)
	if err != nil {
		return Slot{}, nil, err
	}
	s := Slot{ID: d.Slot, Decision: d, Expires: time.Now().Add(d.SlotExpires)}
	if !d.Allowed || d.Slot == "" {
		return s, nil, ErrNoSlot
	}
	ref := slotRef{Key: r.Key, Policy: r.Policy, Limit: r.Limit, Slot: d.Slot}
	release := func(ctx context.Context) error {
		_, err := c.slotCall(ctx, c.pb.release, ref)
		return err
	}
	return s, release, nil
}

// Renew extends a held slot by its limit's hold (never past max_hold after
// its acquisition). A slot freed already is ErrSlotLost.
func (c *Client) Renew(ctx context.Context, r Request, slot string) (SlotStatus, error) {
	st, err := c.slotCall(ctx, c.pb.renew, slotRef{Key: r.Key, Policy: r.Policy, Limit: r.Limit, Slot: slot})
	if err == nil && !st.Done {
		err = ErrSlotLost
	}
	return st, err
}

// Release frees a slot (idempotent: Done false when it was freed already).
func (c *Client) Release(ctx context.Context, r Request, slot string) (SlotStatus, error) {
	return c.slotCall(ctx, c.pb.release, slotRef{Key: r.Key, Policy: r.Policy, Limit: r.Limit, Slot: slot})
}

type slotRef struct {
	Key    string `json:"key"`
	Policy string `json:"policy,omitempty"`
	Limit  *Limit `json:"limit,omitempty"`
	Slot   string `json:"slot"`
}

func (c *Client) slotCall(ctx context.Context, b *pairBatcher, ref slotRef) (SlotStatus, error) {
	body, err := json.Marshal(ref)
	if err != nil {
		return SlotStatus{}, err
	}
	var out struct {
		Released      *bool `json:"released"`
		Renewed       *bool `json:"renewed"`
		SlotExpiresMS int64 `json:"slot_expires_ms"`
		Remaining     int64 `json:"remaining"`
	}
	// Both are safe to repeat: a release frees a slot once, and a renewal
	// only moves the end to now + hold. Coalesced with concurrent ones
	// (costbatch.go).
	if err := c.pairCall(ctx, b, body, &out); err != nil {
		return SlotStatus{}, err
	}
	st := SlotStatus{Remaining: out.Remaining}
	st.Done = out.Released != nil && *out.Released || out.Renewed != nil && *out.Renewed
	if out.SlotExpiresMS > 0 {
		st.Expires = time.Now().Add(ms(out.SlotExpiresMS))
	}
	return st, nil
}
