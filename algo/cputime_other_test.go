//go:build !unix

package algo

import "time"

func processCPU() time.Duration { return 0 }
