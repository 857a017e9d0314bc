// Package runner is the model runner: it turns one step's chunks (the
// scheduler's decisions, package sched) into a forward.Batch, plans
// attention, runs the model on the device (through a captured graph when
// it can, on every tensor-parallel rank when there are several) and draws
// each request's next token where the logits are.
//
// It knows the engine through three seams, so that it imports neither
// engine nor server:
//
//   - Request, the view of one request it builds batches from and draws
//     tokens for (tokens, computed prefix and KV row through sched.Req,
//     image inputs, sampler, grammar constraint, logprob settings);
//   - Group, the tensor-parallel group that runs a batch on every rank;
//   - Counts, what it counts (graph paths, decode gaps), which the
//     engine reads.
//
// The runner holds no request state beyond a step. The runtime, model,
// attention backend and KV cache are the engine's: it opens and closes
// them, and the runner borrows them.
package runner

import (
	"log/slog"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// Request is what the runner reads of one request. The engine's request
// type implements it; the runner sees nothing else of it. Under the
// overlap schedule the scheduler goroutine changes a request while a step
// built from it runs, so the runner reads a request only while it builds
// a batch and, for drawing, only its sampler and constraint (which no
// other goroutine touches while the step draws).
type Request interface {
	// Sched is its scheduler state: Tokens (prompt and output in one
	// slice), NumPrompt, Computed (the prefix whose KV is cached), Seq
	// (its KV table row), Spans, ScorePrompt and PromptDone.
	sched.Request
	// NumImages is how many image inputs its prompt holds; Image(i) is
	// the i-th: the placeholder tokens it fills and the vision tower's
	// output for them, [span.Len × hidden] (encoded before the step that
	// prefills them).
	NumImages() int
	Image(i int) (span model.ImageSpan, embeds []float32)
	// MRope is its prompt's M-RoPE streams, [3 × NumPrompt] (nil: 1-D
	// positions), and the position minus the sequence index of the
	// tokens after the prompt.
	MRope() (streams []int32, delta int)
	// Sampler draws its tokens on the host; its settings decide whether
	// the device may draw them instead.
	Sampler() *sample.Sampler
	// Constraint is its grammar's state, nil without a grammar.
	Constraint() Constraint
	// WantsLogprobs reports whether it returns logprobs (or top logprobs),
	// which the host computes from its logits rows.
	WantsLogprobs() bool
}

// Constraint is a request's structured-output state as drawing uses it.
type Constraint interface {
	// Allowed is the bitmask of the tokens the grammar allows next (bit
	// id%64 of word id/64 set; ids past its end are forbidden), end tokens
	// included where it can end, and false when it allows none. The
	// slice is the constraint's own, unchanged until the request's next
	// token is accepted.
	Allowed() ([]uint64, bool)
}

// Group is a tensor-parallel group as rank 0's runner calls it: Run hands
// b to every other rank, runs this rank's share with local (the runner's
// own Forward), and returns local's logits once every rank is done. A
// rank that fails fails the step, and the group runs no more. MoveSlots
// applies KV slot moves (an accepted draft path's compaction) to every
// other rank's pool, as the runner applies them to its own.
type Group interface {
	Run(b *forward.Batch, local func(*forward.Batch) (tensor.T, error)) (tensor.T, error)
	MoveSlots(moves []kvcache.SlotMove) error
}

// Config is what a runner is handed: the engine's device, model,
// attention backend and KV cache (one rank's, under tensor parallelism).
type Config struct {
	Runtime   device.Runtime
	Model     model.Runnable
	Attention attention.Backend
	KV        *kvcache.Cache
	Workers   device.Workers // the host pool: sampling
	// Group, when set, runs every batch on all ranks (rank 0's runner);
	// nil: this runner runs its batches alone.
	Group Group
	Log   *slog.Logger
}

// Runner owns a step's forward once the scheduler has sized it: it builds
// the batch from the chunks, plans attention, runs the model on the
// device (through a captured graph when it can) and turns the logits into
// each request's next token (sample.go). It holds no request state
// beyond the step. R is the engine's request type.
type Runner[R Request] struct {
	rt      device.Runtime
	model   model.Runnable
	attn    attention.Backend
	kv      *kvcache.Cache
	workers device.Workers
	graphs  *Graphs // nil: decode steps run without CUDA graphs
	group   Group   // nil: one rank
	counts  counters
	log     *slog.Logger
	// drawn is when the latest step's tokens were drawn (zero: none yet);
	// written by whichever goroutine runs the step, one at a time.
	drawn time.Time
}

// New is a runner over cfg's device, model, attention and cache.
func New[R Request](cfg Config) *Runner[R] {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Runner[R]{rt: cfg.Runtime, model: cfg.Model, attn: cfg.Attention, kv: cfg.KV, workers: cfg.Workers, group: cfg.Group, log: log}
}

// SetGraphs turns decode (and verify) graphs on with g, or off with nil.
// It is set before the first step: the steps read it without a lock.
func (rn *Runner[R]) SetGraphs(g *Graphs) { rn.graphs = g }

// Graphs is the runner's graph state, nil when graphs are off (they also
// go off by themselves when steps keep running eagerly).
func (rn *Runner[R]) Graphs() *Graphs { return rn.graphs }

// Rows is where one chunk's logits rows are in its step's batch.
type Rows struct {
	From   int // its first new token's sequence index: the request's Computed when built
	Input  int // its first new token's row among the batch's inputs
	First  int // the first of its logits rows
	Sample int // the row its next token is drawn from; -1: none this step
	Score  int // rows from First on that the host reads (prompt scoring, a verified tree)
	Step   int // output tokens before the one drawn (a seeded device draw's step)
	// Tree is the verified tree whose nodes the score rows are, in node
	// order; nil: none.
	Tree *spec.Tree
}

// Build makes the forward batch of one step's chunks: per request its
// cached prefix and new tokens, their KV slots and positions, image
// embeddings and spans, and the rows that need logits (every prompt row
// when the prompt is scored, every node of a verified tree, else the last
// row of a request whose prompt is complete). trees holds the tree of
// every Verify chunk; mrope asks for M-RoPE positions (a model that
// reads images).
func (rn *Runner[R]) Build(chunks []sched.Chunk[R], trees map[R]*spec.Tree, mrope bool) (*forward.Batch, []Rows) {
	b := &forward.Batch{KV: rn.kv}
	rows := make([]Rows, len(chunks))
	var decodes, prefills, verifies int
	for i, c := range chunks {
		r, n := c.Req.Sched(), c.N
		switch c.Kind {
		case sched.Prefill:
			prefills++
		case sched.Verify:
			verifies++
		default:
			decodes++
		}
		rows[i].Sample, rows[i].Step = -1, r.NumOutput()
		if r.WantsPromptRows() || c.Kind == sched.Verify {
			rows[i].Score = n // the host walks a tree over all its rows
		}
		start := len(b.InputIDs)
		rows[i].Input, rows[i].From = start, r.Computed
		b.ReqRows = append(b.ReqRows, int32(r.Seq.Row))
		b.PrefixLens = append(b.PrefixLens, int32(r.Computed))
		b.ExtendLens = append(b.ExtendLens, int32(n))
		slots := rn.kv.Table.Row(r.Seq.Row)
		if c.Kind == sched.Verify {
			rows[i].First, rows[i].Tree = len(b.LogitRows), trees[c.Req]
			AppendTree(b, slots, r.Computed, trees[c.Req])
			continue
		}
		for t := r.Computed; t < r.Computed+n; t++ {
			b.InputIDs = append(b.InputIDs, int32(r.Tokens[t]))
			b.Positions = append(b.Positions, int32(t))
			b.OutSlots = append(b.OutSlots, slots[t])
		}
		if c.Req.NumImages() > 0 {
			addImageInputs(b, c.Req, i, start, r.Computed, n)
		}
		rows[i].First = len(b.LogitRows)
		last := r.Computed+n == len(r.Tokens)
		if r.WantsPromptRows() {
			for k := range n {
				b.LogitRows = append(b.LogitRows, int32(start+k))
			}
		} else if last {
			b.LogitRows = append(b.LogitRows, int32(start+n-1))
		}
		if last {
			rows[i].Sample = len(b.LogitRows) - 1
		}
	}
	if mrope {
		reqs, froms, counts := make([]R, len(chunks)), make([]int, len(chunks)), make([]int, len(chunks))
		for i, c := range chunks {
			reqs[i], froms[i], counts[i] = c.Req, c.Req.Sched().Computed, c.N
		}
		fillMRope(b, reqs, froms, counts)
	}
	switch {
	case verifies > 0:
		b.Mode = forward.TargetVerify // prefill chunks in it stay causal
		planTrees := make([]*spec.Tree, len(chunks))
		for i, c := range chunks {
			if c.Kind == sched.Verify {
				planTrees[i] = trees[c.Req]
			}
		}
		AttachTreeMasks(b, planTrees)
	case prefills == 0:
		b.Mode = forward.Decode
	case decodes == 0:
		b.Mode = forward.Extend
	default:
		b.Mode = forward.Mixed
	}
	return b, rows
}

// Run runs b: on the device's thread, or on every tensor-parallel rank
// through the group.
func (rn *Runner[R]) Run(b *forward.Batch) (tensor.T, error) {
	if b.Mode == forward.Decode && !rn.drawn.IsZero() {
		rn.counts.decodeGaps.Add(1)
		rn.counts.decodeGapNanos.Add(int64(time.Since(rn.drawn)))
	}
	if rn.group != nil {
		return rn.group.Run(b, rn.Forward)
	}
	return rn.Forward(b)
}

// Forward runs b on this runner's device thread alone: this rank's share
// of a step under tensor parallelism (the group calls it on every rank).
func (rn *Runner[R]) Forward(b *forward.Batch) (logits tensor.T, err error) {
	err = rn.rt.Run(func() (err error) {
		logits, err = rn.runForward(b, false)
		return err
	})
	return logits, err
}

// ForwardEager is Forward without a CUDA graph, whatever b's shape: a
// step timing's warm-up settles what a new shape sets up lazily (a GEMM
// plan) before its graph is captured.
func (rn *Runner[R]) ForwardEager(b *forward.Batch) (logits tensor.T, err error) {
	err = rn.rt.Run(func() (err error) {
		logits, err = rn.runForward(b, true)
		return err
	})
	return logits, err
}
