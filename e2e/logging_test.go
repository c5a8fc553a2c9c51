package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/proccluster"
)

var warnOrError = regexp.MustCompile(`(?m)^.* level=(WARN|ERROR) .*$`)

// waitLog polls p's log until it contains s.
func waitLog(t *testing.T, p *proc, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.Logs(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %v:\n%s", p.ID, s, within, p.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Normal operation logs no warnings or errors: a single-node start (its
// election), nodes joining ("log not found" while the leader backs up),
// clean stops (connections closing mid-read). A peer that goes down is
// reported once at WARN however many heartbeats fail, and once more (INFO)
// when it is back. The version is in the start-up line.
func TestProcessNormalOperationLogsNoWarnings(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	a := newProc(t, "a", "")
	a.start()
	a.waitReady()
	b := newProc(t, "b", a.URL(""))
	c := newProc(t, "c", a.URL(""))
	b.start()
	c.start()
	b.waitReady()
	c.waitReady()
	ctx := context.Background()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, _ := proccluster.ClusterMembers(ctx, a.URL("")); n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a never listed 3 members:\n%s", a.Logs())
		}
	}
	if err := c.term(); err != nil {
		t.Fatal(err)
	}
	cFirst := c.Logs()
	waitLog(t, a, "peer unreachable", 10*time.Second)
	// Raft retries heartbeats to c many times a second: none of those repeat the report.
	time.Sleep(2 * time.Second)
	c.start()
	c.waitReady()
	waitLog(t, a, "peer reachable again", 15*time.Second)
	bLog, cSecond := b.Logs(), c.Logs()
	if err := a.term(); err != nil { // the leader hands over leadership and stops
		t.Fatal(err)
	}
	aLog := a.Logs()

	for name, log := range map[string]string{"a": aLog, "b before a stopped": bLog, "c's first run": cFirst, "c's second run": cSecond} {
		lines := warnOrError.FindAllString(log, -1)
		if name == "a" && len(lines) == 1 && strings.Contains(lines[0], `msg="peer unreachable"`) && strings.Contains(lines[0], "peer=c") {
			continue // the one report of c going down
		}
		if len(lines) > 0 {
			t.Errorf("%s logged %d WARN/ERROR lines in normal operation:\n%s\n\nfull log:\n%s", name, len(lines), strings.Join(lines, "\n"), log)
		}
	}
	if n := strings.Count(aLog, "peer unreachable"); n != 1 {
		t.Errorf("a reported c unreachable %d times in a few seconds, want once", n)
	}
	for _, s := range []string{`msg="starting limitd" version=`, "revision=", "go=go1."} {
		if !strings.Contains(aLog, s) {
			t.Errorf("the start-up line lacks %q:\n%s", s, aLog)
		}
	}
}
