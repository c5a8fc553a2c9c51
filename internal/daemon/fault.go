package daemon

import (
	"fmt"
	"time"
)

// FaultClockOffsetEnv names the environment variable that offsets the node's
// wall clock wherever it reads leader time (a Go duration, "-3s", "+1m"):
// fault injection for process tests and scripts/chaos.sh, deliberately not a
// flag or a config-file setting, and never for production. See
// cluster.Config.FaultClockOffset.
const FaultClockOffsetEnv = "LIMITD_FAULT_CLOCK_OFFSET"

// FaultInjectionEnv must be "1" beside any fault variable: a stray
// LIMITD_FAULT_CLOCK_OFFSET left in a production environment then stops the
// start with an error naming both, rather than shifting the leader's clock.
const FaultInjectionEnv = "LIMITD_FAULT_INJECTION"

// maxFaultClockOffset bounds the offset: a step is a fault to survive, and
// one of days is a typo.
const maxFaultClockOffset = 24 * time.Hour

func faultClockOffset(getenv func(string) string) (time.Duration, error) {
	v := getenv(FaultClockOffsetEnv)
	if v == "" {
		return 0, nil
	}
	if getenv(FaultInjectionEnv) != "1" {
		return 0, fmt.Errorf("%s is fault injection for tests: set %s=1 beside it to use it (never in production), or unset it", FaultClockOffsetEnv, FaultInjectionEnv)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", FaultClockOffsetEnv, v, err)
	}
	if d > maxFaultClockOffset || d < -maxFaultClockOffset {
		return 0, fmt.Errorf("%s=%q: beyond ±%s", FaultClockOffsetEnv, v, maxFaultClockOffset)
	}
	return d, nil
}
