package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/limitd/limitd/client"
)

// TestPolicyReservationExpiryCLI: `policy put --reservation-expiry return`
// stores the option (policy get --output json shows it), a bad value is the
// server's 400 naming reservation_expiry, and a put without the flag goes
// back to the default.
func TestPolicyReservationExpiryCLI(t *testing.T) {
	n := newLeaseNode(t)
	n.mustRun("policy", "put", "llm", "--algorithm", "fixed_window", "--limit", "1000", "--window", "1m", "--reservation-expiry", "return")
	var got client.Policy
	if out := n.mustRun("policy", "get", "llm", "--output", "json"); json.Unmarshal([]byte(out), &got) != nil || got.ReservationExpiry != "return" {
		t.Fatalf("policy get --output json: %s, want reservation_expiry return", out)
	}
	if code, _, errs := n.run("policy", "put", "llm", "--algorithm", "fixed_window", "--limit", "1000", "--window", "1m", "--reservation-expiry", "later"); code == ExitOK || !strings.Contains(errs, "reservation_expiry") {
		t.Fatalf("--reservation-expiry later: exit %d, stderr %s; want a refusal naming reservation_expiry", code, errs)
	}
	n.mustRun("policy", "put", "llm", "--algorithm", "fixed_window", "--limit", "1000", "--window", "1m")
	got = client.Policy{}
	if out := n.mustRun("policy", "get", "llm", "--output", "json"); json.Unmarshal([]byte(out), &got) != nil || got.ReservationExpiry != "" {
		t.Fatalf("after a put without --reservation-expiry: %s, want the default", out)
	}
}
