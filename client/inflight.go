package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// InflightQuery names a key's limit for its work in flight (GET
// /v1/keys/{key}/inflight, admin): a Policy, or a Limit of the key's plan
// (both empty: the plan's one limit). Max bounds each list (0: the
// server's default, 100; at most 1000).
type InflightQuery struct {
	Key    string
	Policy string
	Limit  string
	Max    int
}

// HeldSlot is a concurrency slot the key holds until Expires (leader time).
type HeldSlot struct {
	Slot              string
	Acquired, Expires time.Time
	ExpiresIn         time.Duration // from the read's leader time (Inflight.At)
}

// OpenReservation is a reservation not yet settled: Reservation is the
// token Settle takes, Cost its estimate (spent at the reserve); unsettled
// at Expires, it stays settled at the estimate.
type OpenReservation struct {
	Reservation string
	Cost        int64
	Expires     time.Time
	ExpiresIn   time.Duration
}

// Inflight is a key's work in flight at the node's applied leader time At:
// the slots it holds (SlotsHeld counts them all, listed or not) and its open
// reservations (MoreReservations: more are open than listed).
type Inflight struct {
	Key, Policy, Plan, Limit string
	Concurrency              bool
	At                       time.Time
	Slots                    []HeldSlot
	SlotsHeld                int
	Reservations             []OpenReservation
	MoreReservations         bool
	AppliedIndex             uint64
}

// Inflight returns a key's held concurrency slots and open reservations
// under a policy or a limit of its plan (admin), from the node's applied
// state with no Raft write. Errors name the query parameter (Error.Field).
func (c *Client) Inflight(ctx context.Context, q InflightQuery) (Inflight, error) {
	v := url.Values{}
	if q.Policy != "" {
		v.Set("policy", q.Policy)
	}
	if q.Limit != "" {
		v.Set("limit", q.Limit)
	}
	if q.Max != 0 {
		v.Set("max", strconv.Itoa(q.Max))
	}
	var out struct {
		Key, Policy, Plan, Limit string
		Concurrency              bool
		At                       time.Time
		Slots                    []struct {
			Slot              string
			Acquired, Expires time.Time
			ExpiresInMS       int64 `json:"expires_in_ms"`
		}
		SlotsHeld    int `json:"slots_held"`
		Reservations []struct {
			Reservation string
			Cost        int64
			Expires     time.Time
			ExpiresInMS int64 `json:"expires_in_ms"`
		}
		MoreReservations bool   `json:"more_reservations"`
		AppliedIndex     uint64 `json:"applied_index"`
	}
	path := "/v1/keys/" + url.PathEscape(q.Key) + "/inflight"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	if err := c.call(ctx, http.MethodGet, path, nil, true, true, &out); err != nil {
		return Inflight{}, err
	}
	f := Inflight{Key: out.Key, Policy: out.Policy, Plan: out.Plan, Limit: out.Limit, Concurrency: out.Concurrency, At: out.At,
		SlotsHeld: out.SlotsHeld, MoreReservations: out.MoreReservations, AppliedIndex: out.AppliedIndex,
		Slots: make([]HeldSlot, len(out.Slots)), Reservations: make([]OpenReservation, len(out.Reservations))}
	for i, s := range out.Slots {
		f.Slots[i] = HeldSlot{Slot: s.Slot, Acquired: s.Acquired, Expires: s.Expires, ExpiresIn: time.Duration(s.ExpiresInMS) * time.Millisecond}
	}
	for i, r := range out.Reservations {
		f.Reservations[i] = OpenReservation{Reservation: r.Reservation, Cost: r.Cost, Expires: r.Expires, ExpiresIn: time.Duration(r.ExpiresInMS) * time.Millisecond}
	}
	return f, nil
}
