package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/limitd/limitd/client"
)

// TestPolicyDegradedCLI: `policy put --degraded share` stores the option
// (policy get --output json shows it), a bad mode is the server's 400
// naming degraded.mode, and a put without the flag turns it off.
func TestPolicyDegradedCLI(t *testing.T) {
	n := newLeaseNode(t)
	n.mustRun("policy", "put", "edge", "--algorithm", "fixed_window", "--limit", "300", "--window", "1m", "--degraded", "share")
	var got client.Policy
	if out := n.mustRun("policy", "get", "edge", "--output", "json"); json.Unmarshal([]byte(out), &got) != nil || got.Degraded == nil || got.Degraded.Mode != "share" {
		t.Fatalf("policy get --output json: %s, want degraded share", out)
	}
	if code, _, errs := n.run("policy", "put", "edge", "--algorithm", "fixed_window", "--limit", "300", "--window", "1m", "--degraded", "guess"); code == ExitOK || !strings.Contains(errs, "degraded.mode") {
		t.Fatalf("--degraded guess: exit %d, stderr %s; want a refusal naming degraded.mode", code, errs)
	}
	n.mustRun("policy", "put", "edge", "--algorithm", "fixed_window", "--limit", "300", "--window", "1m")
	got = client.Policy{}
	if out := n.mustRun("policy", "get", "edge", "--output", "json"); json.Unmarshal([]byte(out), &got) != nil || got.Degraded != nil {
		t.Fatalf("after a put without --degraded: %s, want no degraded option", out)
	}
}
