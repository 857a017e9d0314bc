//go:build !unix

package splitkv

import "time"

// processCPU is not measured here: the CPU-time metric reads 0.
func processCPU() time.Duration { return 0 }
