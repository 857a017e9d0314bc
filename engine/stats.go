package engine

import (
	"sync/atomic"
	"time"

	"github.com/gosling-ai/gosling/engine/runner"
)

// Stats is a snapshot of the scheduler's state, safe to read from any
// goroutine (the scheduler publishes it after every step).
type Stats struct {
	Running         int
	Waiting         int
	KVPagesFree     int
	KVPagesTotal    int // allocatable pages (the reserved page excluded)
	Retractions     int // requests retracted for lack of KV pages, so far
	PromptTokens    int // tokens prefilled, so far
	GeneratedTokens int
	CachedTokens    int // prompt tokens served from the prefix cache, so far
	// KVPagesCached are held by the prefix cache: reusable, and evicted on
	// demand, so KVPagesFree+KVPagesCached pages are available to requests
	// (minus any pinned by running requests).
	KVPagesCached int
	// Window region (sliding-window layers), 0 when the model has none.
	SWAPagesInUse, SWAPagesTotal int
	// Decode steps on the GPU: replayed from a CUDA graph, captured into a
	// new one, or run without a graph although one was wanted.
	GraphReplays, GraphCaptures, GraphEager int
	// VerifyGraphReplays, VerifyGraphCaptures and VerifyGraphEager are
	// the same for speculative verify steps (graphs per batch size and
	// tokens per request).
	VerifyGraphReplays, VerifyGraphCaptures, VerifyGraphEager int
	// DraftGraphReplays, DraftGraphCaptures and DraftGraphEager are the
	// same for the drafter's forwards (a draft model's or an EAGLE head's
	// steps that fit a graph: runner.Draft).
	DraftGraphReplays, DraftGraphCaptures, DraftGraphEager int
	// GraphEagerReason, VerifyGraphEagerReason and DraftGraphEagerReason
	// say why the latest eager step of each kind ran without a graph
	// ("": none has).
	GraphEagerReason, VerifyGraphEagerReason, DraftGraphEagerReason string
	// RankGraphs are the same counts for each of this process's ranks
	// under tensor parallelism, in rank order (the first is the engine's
	// own); nil without. The ranks agree on every step's path, so they
	// are equal.
	RankGraphs []GraphCounts
	// OverlapSteps were launched while the previous step ran (the overlap
	// schedule); the other steps ran synchronously.
	OverlapSteps int
	// DecodeGaps decode forwards started DecodeGapTime in all after the
	// previous step's tokens were drawn: the host time between two
	// forwards, which the overlap schedule takes off the device's path.
	DecodeGaps    int
	DecodeGapTime time.Duration
	// ImagesEncoded image views (and videos) went through the vision
	// tower in ImageEncodeTime: the tower, its merger or projector, and
	// the copy of its output to the host, on the scheduler's goroutine
	// before the prefill forward that reads them.
	ImagesEncoded   int
	ImageEncodeTime time.Duration
	// LargestForward is the most tokens one forward has held so far (a
	// graph's padding included); the scheduler keeps it within
	// Settings().MaxForwardTokens.
	LargestForward int
	// HostConstrainedDraws are constrained (Request.Grammar) tokens drawn
	// by the host sampler, so far: all of them on the CPU; on a GPU only
	// those of requests that need their logits on the host (logprobs,
	// penalties), the others' masks being applied in the device sampler.
	HostConstrainedDraws int
}

type statsCounters struct {
	running, waiting, kvFree       atomic.Int64
	retractions, prompt, generated atomic.Int64
	cached, kvCached, swaInUse     atomic.Int64
	imagesEncoded, encodeNanos     atomic.Int64
	overlapSteps                   atomic.Int64
}

// GraphCounts are one kind of step (decode, verify, draft; one rank's)
// by graph path, and why the latest eager one ran without a graph.
type GraphCounts struct {
	Replays     int    `json:"replays"`
	Captures    int    `json:"captures"`
	Eager       int    `json:"eager"`
	EagerReason string `json:"eager_reason,omitempty"`
}

func graphCounts(c runner.Counts) GraphCounts {
	return GraphCounts{c.GraphReplays, c.GraphCaptures, c.GraphEager, c.GraphEagerReason}
}

// GraphPaths are s's decode, verify and draft steps by graph path.
func (s Stats) GraphPaths() (decode, verify, draft GraphCounts) {
	return GraphCounts{s.GraphReplays, s.GraphCaptures, s.GraphEager, s.GraphEagerReason},
		GraphCounts{s.VerifyGraphReplays, s.VerifyGraphCaptures, s.VerifyGraphEager, s.VerifyGraphEagerReason},
		GraphCounts{s.DraftGraphReplays, s.DraftGraphCaptures, s.DraftGraphEager, s.DraftGraphEagerReason}
}

// Stats returns the latest published snapshot.
func (e *Engine) Stats() Stats {
	c, rc := &e.stats, e.rn.Counts()
	swaTotal := 0
	if e.kv.SWA != nil {
		swaTotal = e.kv.SWA.NumPages() - 1
	}
	var ranks []GraphCounts
	if e.tp != nil {
		ranks = append(ranks, graphCounts(rc))
		for _, p := range e.tp.peers {
			ranks = append(ranks, graphCounts(p.rn.Counts()))
		}
	}
	var dc runner.DraftCounts
	if e.spec != nil && e.spec.drafter() != nil {
		dc = e.spec.drafter().rn.Counts()
	}
	return Stats{SWAPagesTotal: swaTotal, RankGraphs: ranks,
		DraftGraphReplays: dc.Replays, DraftGraphCaptures: dc.Captures, DraftGraphEager: dc.Eager, DraftGraphEagerReason: dc.EagerReason,
		Running: int(c.running.Load()), Waiting: int(c.waiting.Load()),
		KVPagesFree: int(c.kvFree.Load()), KVPagesTotal: e.kv.Alloc.NumPages() - 1,
		Retractions: int(c.retractions.Load()), PromptTokens: int(c.prompt.Load()),
		GeneratedTokens: int(c.generated.Load()), CachedTokens: int(c.cached.Load()),
		KVPagesCached: int(c.kvCached.Load()), SWAPagesInUse: int(c.swaInUse.Load()),
		GraphReplays: rc.GraphReplays, GraphCaptures: rc.GraphCaptures, GraphEager: rc.GraphEager,
		VerifyGraphReplays: rc.VerifyReplays, VerifyGraphCaptures: rc.VerifyCaptures, VerifyGraphEager: rc.VerifyEager,
		GraphEagerReason: rc.GraphEagerReason, VerifyGraphEagerReason: rc.VerifyEagerReason,
		OverlapSteps: int(c.overlapSteps.Load()),
		DecodeGaps:   rc.DecodeGaps, DecodeGapTime: rc.DecodeGapTime,
		ImagesEncoded: int(c.imagesEncoded.Load()), ImageEncodeTime: time.Duration(c.encodeNanos.Load()),
		LargestForward: rc.LargestForward, HostConstrainedDraws: rc.HostConstrainedDraws,
	}
}

func (e *Engine) publish(running, waiting int) {
	e.stats.running.Store(int64(running))
	e.stats.waiting.Store(int64(waiting))
	e.publishKV()
}

// publishKV refreshes the KV page counts of Stats; on the engine loop only.
func (e *Engine) publishKV() {
	e.stats.kvFree.Store(int64(e.kv.Alloc.NumFree()))
	e.stats.swaInUse.Store(int64(e.kv.SWAPagesInUse()))
	if e.radix != nil {
		e.stats.kvCached.Store(int64(e.radix.CachedPages()))
	}
}
