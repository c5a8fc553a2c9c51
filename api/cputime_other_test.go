//go:build !unix

package api

import "time"

// processCPU is unknown here: the benchmarks report 0 CPU per operation.
func processCPU() time.Duration { return 0 }
