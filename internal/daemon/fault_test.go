package daemon

import (
	"strings"
	"testing"
	"time"
)

// TestFaultClockOffset: the offset is read only beside the explicit
// fault-injection switch, parsed strictly and bounded; without the switch a
// set offset refuses the start (naming both variables) rather than being
// applied or ignored.
func TestFaultClockOffset(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if d, err := faultClockOffset(get); d != 0 || err != nil {
		t.Fatal(d, err)
	}
	env[FaultClockOffsetEnv] = "-3s"
	if _, err := faultClockOffset(get); err == nil || !strings.Contains(err.Error(), FaultInjectionEnv) {
		t.Fatalf("an offset without %s: %v", FaultInjectionEnv, err)
	}
	env[FaultInjectionEnv] = "1"
	if d, err := faultClockOffset(get); d != -3*time.Second || err != nil {
		t.Fatal(d, err)
	}
	for _, bad := range []string{"soon", "25h", "-25h"} {
		env[FaultClockOffsetEnv] = bad
		if _, err := faultClockOffset(get); err == nil {
			t.Fatalf("offset %q accepted", bad)
		}
	}
}
