package device

import "time"

// Profiler is a Runtime that can time each stream operation (kernel,
// GEMM, copy) of a forward on the device: `bench one-batch
// --profile-kernels`. A profiled forward runs eagerly (no graph), with
// its operations queued behind a hold so that they run back to back.
type Profiler interface {
	// StartProfile starts a session; it fails if one is running.
	StartProfile() error
	// Profiling reports whether a session is running.
	Profiling() bool
	// ProfileForward runs forward on the device thread with its
	// operations timed under label, and waits for it to finish. Without
	// a session it just runs forward.
	ProfileForward(label string, forward func() error) error
	// StopProfile ends the session and returns what it measured.
	StopProfile() (Profile, error)
}

// Profile is what a profiling session measured.
type Profile struct {
	Forwards []ProfiledForward `json:"forwards"`
	// Ops are grouped by label (in first-seen order), longest first.
	Ops []ProfiledOp `json:"ops"`
}

// ProfiledOp is the GPU time of one operation name over the forwards of
// one label, summed over Calls.
type ProfiledOp struct {
	Label string        `json:"label"`
	Name  string        `json:"name"`
	Calls int           `json:"calls"`
	Time  time.Duration `json:"time_ns"`
}

// ProfiledForward sums the profiled forwards of one label.
type ProfiledForward struct {
	Label string `json:"label"`
	Count int    `json:"count"`
	// GPU is from each forward's first operation's start to its last
	// one's end, summed.
	GPU time.Duration `json:"gpu_ns"`
	// Ops is the operations' times summed; GPU minus Ops is gaps between
	// them and work outside them (collectives).
	Ops time.Duration `json:"ops_ns"`
	// Host is the time the host took to enqueue the forwards.
	Host time.Duration `json:"host_ns"`
	// Starved counts forwards whose enqueue outlasted the hold, whose
	// figures then include launch gaps.
	Starved int `json:"starved"`
	// LongestWait is the longest host time between enqueueing two
	// operations in any one forward, and LongestWaitBefore the operation
	// enqueued after it: where a forward blocked (a synchronisation, a
	// first-use tuning) when it starved.
	LongestWait       time.Duration `json:"longest_wait_ns"`
	LongestWaitBefore string        `json:"longest_wait_before"`
}
