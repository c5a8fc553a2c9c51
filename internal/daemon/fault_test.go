package daemon

import (
	"testing"
	"time"
)

func TestFaultClockOffset(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if d, err := faultClockOffset(get); d != 0 || err != nil {
		t.Fatal(d, err)
	}
	env[FaultClockOffsetEnv] = "-3s"
	if d, err := faultClockOffset(get); d != -3*time.Second || err != nil {
		t.Fatal(d, err)
	}
	env[FaultClockOffsetEnv] = "soon"
	if _, err := faultClockOffset(get); err == nil {
		t.Fatal("a bad offset accepted")
	}
}
