package e2e

import (
	"testing"
)

// TestReservationExpiryDocSnippet runs docs/API.md's reservation-expiry
// snippet as written (only the address is replaced) against one limitd
// process with an admin token, and compares each command's output with the
// "# …" line under it: a reservation under "return" gives its estimate back
// once its hold has ended, and a bad value is a 400 naming the field.
func TestReservationExpiryDocSnippet(t *testing.T) {
	runDocSnippet(t, "reservation-expiry", 4, nil)
}
