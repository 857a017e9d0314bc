// Package rss measures this process's resident memory, for the tests that
// bound what the server and the engine hold.
package rss

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Bytes is the resident set size, from /proc/self/statm; the test is
// skipped where there is none.
func Bytes(t testing.TB) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	fields := strings.Fields(string(data))
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// PeakAbove runs f while sampling the RSS every millisecond, and returns
// the largest RSS seen above base; base < 0 takes the RSS before f, after
// a collection (so that garbage of earlier tests does not count).
func PeakAbove(t testing.TB, base int64, f func()) int64 {
	t.Helper()
	if base < 0 {
		runtime.GC()
		debug.FreeOSMemory()
		base = Bytes(t)
	}
	var peak atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), Bytes(t)))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-sampled
	return peak.Load() - base
}
