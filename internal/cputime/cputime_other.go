//go:build !unix

// Package cputime reads the process's CPU time, which the benchmarks
// report next to the wall time.
package cputime

import "time"

// Process is not measured here: the CPU-time metrics read 0.
func Process() time.Duration { return 0 }
