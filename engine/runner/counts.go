package runner

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gosling-ai/gosling/device"
)

// counters are what a runner counts as its steps run; Counts reads them
// from any goroutine.
type counters struct {
	decode, verify             pathCounter
	decodeGaps, decodeGapNanos atomic.Int64
	largestForward             atomic.Int64
	// hostConstrained counts constrained draws the host sampled (a CPU
	// runtime's, or a device request that needs its logits anyway).
	hostConstrained atomic.Int64
	// deviceVerified and hostVerified count the draft-tree nodes
	// AcceptTree decided from device results and from host logits.
	deviceVerified, hostVerified atomic.Int64
}

// pathCounter counts one kind of step (decode, verify, draft) by the
// graph path it took, and keeps why the latest eager one was.
type pathCounter struct {
	replays, captures, eager atomic.Int64
	reason                   atomic.Pointer[string]
}

// note counts res, logs a capture (debug) or an eager step (a warning)
// of what with attrs, and reports whether the step ran eagerly.
func (c *pathCounter) note(log *slog.Logger, res device.GraphRun, what string, attrs ...any) (eager bool) {
	switch res.Path {
	case device.GraphReplayed:
		c.replays.Add(1)
	case device.GraphCaptured:
		c.captures.Add(1)
		log.Debug("captured a CUDA graph of a "+what, append(attrs, "nodes", res.Nodes, "time", res.Capture)...)
	case device.GraphEager:
		c.eager.Add(1)
		c.reason.Store(&res.Reason)
		log.Warn(what+" ran without a CUDA graph", append(attrs, "reason", res.Reason)...)
		return true
	}
	return false
}

// load is c's counts and its latest eager step's reason.
func (c *pathCounter) load() (replays, captures, eager int, reason string) {
	if r := c.reason.Load(); r != nil {
		reason = *r
	}
	return int(c.replays.Load()), int(c.captures.Load()), int(c.eager.Load()), reason
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
	// or run without a graph although one was wanted, and why the latest
	// of those did ("": none has).
	GraphReplays, GraphCaptures, GraphEager int
	GraphEagerReason                        string
	// The same for speculative verify steps.
	VerifyReplays, VerifyCaptures, VerifyEager int
	VerifyEagerReason                          string
	// DecodeGaps decode forwards started DecodeGapTime in all after the
	// previous step's tokens were drawn.
	DecodeGaps    int
	DecodeGapTime time.Duration
	// LargestForward is the most tokens one forward has held (a graph's
	// padding included).
	LargestForward int
	// HostConstrainedDraws are constrained requests' tokens drawn by the
	// host sampler from host logits (every one on a CPU; on a GPU only
	// those of requests that need their logits on the host: logprobs,
	// penalties), so far.
	HostConstrainedDraws int
	// DeviceVerifiedNodes and HostVerifiedNodes are the speculative
	// draft-tree nodes AcceptTree decided, so far: from the device's
	// results (a greedy request's argmax, a sampled one's SpecVerifier
	// verdict) and on the host from its logits (sample.Sampler.Verify:
	// every node on a CPU; on a GPU those of requests that need their
	// logits, or of trees too wide for the device's verifier).
	DeviceVerifiedNodes, HostVerifiedNodes int
}

// Counts reads the runner's counts; safe from any goroutine.
func (rn *Runner[R]) Counts() Counts {
	c := &rn.counts
	out := Counts{DecodeGaps: int(c.decodeGaps.Load()), DecodeGapTime: time.Duration(c.decodeGapNanos.Load()),
		LargestForward: int(c.largestForward.Load()), HostConstrainedDraws: int(c.hostConstrained.Load()),
		DeviceVerifiedNodes: int(c.deviceVerified.Load()), HostVerifiedNodes: int(c.hostVerified.Load())}
	out.GraphReplays, out.GraphCaptures, out.GraphEager, out.GraphEagerReason = c.decode.load()
	out.VerifyReplays, out.VerifyCaptures, out.VerifyEager, out.VerifyEagerReason = c.verify.load()
	return out
}
