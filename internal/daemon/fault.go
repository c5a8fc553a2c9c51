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

func faultClockOffset(getenv func(string) string) (time.Duration, error) {
	v := getenv(FaultClockOffsetEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", FaultClockOffsetEnv, v, err)
	}
	return d, nil
}
