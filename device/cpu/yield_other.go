//go:build !linux

package cpu

import "runtime"

// osYield: no portable thread yield; the goroutine's is the next best.
func osYield() { runtime.Gosched() }
