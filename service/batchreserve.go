package service

import "github.com/limitd/limitd/nodeapi"

// A reserve may be an entry of a Batch, so that a client coalescing its
// checks sends a reserve's half of a reserve + settle pair in the same
// requests (the settle already has /v1/settle/batch). Each Batch entry is an
// op of its own, so a reserve there is decided exactly as Check decides it:
// validated the same way, always through the log (the ban shortcut and the
// over-limit cache are skipped for it, as Check skips them; the state that
// holds the key's budget must see every charge it will later settle), its
// reservation wrapped into the token. An overdraft stays a check of its own,
// and CheckAll refuses both (an all-or-nothing group settles as one; see
// costAlone).

// batchCost validates entry r of a Batch, prepared as c under l: a reserve
// as Check validates one, an overdraft refused.
func batchCost(r *CheckRequest, c *nodeapi.Check, l *Limit) *Error {
	switch {
	case r.Overdraft:
		return Invalid("overdraft", "an overdraft is a check of its own, not part of a batch or group")
	case r.Reserve == 0:
		return nil
	}
	return validReserve(c, l)
}

// validReserve validates a check with a reserve (Check's and Batch's).
func validReserve(c *nodeapi.Check, l *Limit) *Error {
	if c.ByPlan {
		return Invalid("reserve", "a reserve or overdraft names a policy or a limit")
	}
	if e := ValidateReserve(c.Reserve, c.Cost, "reserve"); e != nil {
		return e
	}
	return costLimit(l, c, "reserved and settled")
}

// batchReservation wraps a Batch reserve's reservation id into its token.
func batchReservation(c *nodeapi.Check, d *nodeapi.Decision) {
	if d.Reservation != "" {
		d.Reservation = reservationToken(c, d.Reservation)
	}
}
