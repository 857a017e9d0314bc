//go:build !linux

package cputime

import "time"

// Thread is not measured here: the thread CPU-time metrics read 0.
func Thread() time.Duration { return 0 }
