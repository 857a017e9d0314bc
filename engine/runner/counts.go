package runner

import (
	"sync/atomic"
	"time"
)

// counters are what a runner counts as its steps run; Counts reads them
// from any goroutine.
type counters struct {
	graphReplays, graphCaptures, graphEager    atomic.Int64
	verifyReplays, verifyCaptures, verifyEager atomic.Int64
	decodeGaps, decodeGapNanos                 atomic.Int64
	largestForward                             atomic.Int64
}

// noteForward counts a forward of tokens tokens.
func (c *counters) noteForward(tokens int) {
	for {
		old := c.largestForward.Load()
		if int64(tokens) <= old || c.largestForward.CompareAndSwap(old, int64(tokens)) {
			return
		}
	}
}

// Counts are a runner's counts so far.
type Counts struct {
	// Decode steps replayed from a CUDA graph, captured into a new one,
	// or run without a graph although one was wanted.
	GraphReplays, GraphCaptures, GraphEager int
	// The same for speculative verify steps.
	VerifyReplays, VerifyCaptures, VerifyEager int
	// DecodeGaps decode forwards started DecodeGapTime in all after the
	// previous step's tokens were drawn.
	DecodeGaps    int
	DecodeGapTime time.Duration
	// LargestForward is the most tokens one forward has held (a graph's
	// padding included).
	LargestForward int
}

// Counts reads the runner's counts; safe from any goroutine.
func (rn *Runner[R]) Counts() Counts {
	c := &rn.counts
	return Counts{
		GraphReplays: int(c.graphReplays.Load()), GraphCaptures: int(c.graphCaptures.Load()), GraphEager: int(c.graphEager.Load()),
		VerifyReplays: int(c.verifyReplays.Load()), VerifyCaptures: int(c.verifyCaptures.Load()), VerifyEager: int(c.verifyEager.Load()),
		DecodeGaps: int(c.decodeGaps.Load()), DecodeGapTime: time.Duration(c.decodeGapNanos.Load()),
		LargestForward: int(c.largestForward.Load()),
	}
}
