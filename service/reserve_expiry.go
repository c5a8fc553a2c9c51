package service

import (
	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// ValidateReservationExpiry validates a policy's "reservation_expiry": what
// becomes of a reservation whose hold ends before a settle. "" and "settle"
// (the default) keep it charged at its estimate; "return" credits the
// estimate back, at the hold's end, into the window it was spent in
// (fsm/reserve.go). "return" needs a policy that can be reserved: an
// algorithm that credits exactly, not shadow. Errors name
// "reservation_expiry" under prefix.
func ValidateReservationExpiry(v string, spec algo.Spec, shadow bool, prefix string) (nodeapi.ReservationExpiry, *Error) {
	field := joinPrefix(prefix, "reservation_expiry")
	switch v {
	case "", "settle":
		return nodeapi.ExpirySettle, nil
	case "return":
	default:
		return 0, Invalid(field, `must be "settle" (the default: an unsettled reservation stays charged at its estimate) or "return" (its estimate is given back at its hold's end)`)
	}
	switch {
	case !spec.Algorithm.CanOverdraw():
		return 0, Invalid(field, spec.Algorithm.String()+" cannot be reserved: \"return\" needs fixed_window, sliding_window, token_bucket or leaky_bucket")
	case shadow:
		return 0, Invalid(field, "a shadow policy spends nothing: it holds no reservation to return")
	}
	return nodeapi.ExpiryReturn, nil
}

// FormatReservationExpiry is the option's API text: "return", or "" for
// the default (the member is left out).
func FormatReservationExpiry(e nodeapi.ReservationExpiry) string {
	if e == nodeapi.ExpiryReturn {
		return "return"
	}
	return ""
}
