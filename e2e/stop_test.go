package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// A clean stop ends with a line a kill cannot write: "stopped cleanly",
// with the signal and the applied index.
func TestProcessCleanStopSaysSo(t *testing.T) {
	p := newProc(t, "s", "")
	p.start()
	p.waitReady()
	p.check(`{"key":"k","limit":{"algorithm":"fixed_window","limit":5,"window":"1h"}}`)
	if err := p.term(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(p.Logs()), "\n")
	last := lines[len(lines)-1]
	if !regexp.MustCompile(`msg="stopped cleanly" reason=terminated applied_index=[1-9][0-9]*`).MatchString(last) {
		t.Fatalf("last log line %q, want a clean stop with the signal and the applied index; log:\n%s", last, p.Logs())
	}
	if !strings.Contains(p.Logs(), `msg="shutting down" signal=terminated`) {
		t.Errorf("the shutdown line does not name the signal:\n%s", p.Logs())
	}
}
