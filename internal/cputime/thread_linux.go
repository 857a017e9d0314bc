package cputime

import (
	"syscall"
	"time"
	"unsafe"
)

// clockThreadCPUTime is CLOCK_THREAD_CPUTIME_ID.
const clockThreadCPUTime = 3

// Thread is the CPU time of the calling OS thread so far: with the
// goroutine locked to its thread (runtime.LockOSThread), the difference of
// two readings is the CPU the code between them took, whatever else runs
// on the machine.
func Thread() time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
