//go:build !unix

package cpu

import "time"

// processCPU is not measured here: the CPU-time metrics read 0.
func processCPU() time.Duration { return 0 }
