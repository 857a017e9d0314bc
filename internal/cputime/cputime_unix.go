//go:build unix

// Package cputime reads the process's CPU time, which the benchmarks
// report next to the wall time (other processes on the machine disturb it
// less).
package cputime

import (
	"syscall"
	"time"
)

// Process is the user and system CPU time of the process so far.
func Process() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
