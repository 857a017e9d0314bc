package cpu

import "syscall"

// osYield gives the core to another runnable thread, if any: a worker
// that waits on a busy machine lets the thread it waits for (descheduled
// by another process's load) run rather than spinning out its slice.
// With nothing else runnable it returns at once.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
