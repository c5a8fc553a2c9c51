//go:build unix

package algo

import (
	"syscall"
	"time"
)

// processCPU is the process's user + system CPU so far (benchmarks report
// CPU beside wall time: the shared box's wall clock moves with its load).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
