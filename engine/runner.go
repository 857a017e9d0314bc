package engine

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/engine/sched"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// runner owns a step's forward once the scheduler has sized it: it builds
// the batch from the chunks, plans attention, runs the model on the
// device (through a captured graph when it can) and turns the logits into
// each request's next token (sample_device.go). It holds no request
// state beyond the step.
type runner struct {
	rt      device.Runtime
	model   model.Runnable
	attn    attention.Backend
	kv      *kvcache.Cache
	workers *cpu.Workers  // the host pool: CPU kernels and sampling
	graphs  *decodeGraphs // nil: decode steps run without CUDA graphs
	tp      *tpGroup      // nil: one rank; else rank 0's view of the ranks (tp.go)
	stats   *statsCounters
	log     *slog.Logger
	// drawn is when the latest step's tokens were drawn (zero: none yet);
	// written by whichever goroutine runs the step, one at a time.
	drawn time.Time
}

// chunkRows is where one chunk's logits rows are in its step's batch.
type chunkRows struct {
	first  int  // the first of its rows
	sample int  // the row its next token is drawn from; -1: none this step
	score  int  // rows from first on that the host reads (prompt scoring, a verified tree)
	step   int  // output tokens before the one drawn (a seeded device draw's step)
	tree   bool // the score rows are a verified tree's nodes
}

// build makes the forward batch of one step's chunks: per request its
// cached prefix and new tokens, their KV slots and positions, image
// embeddings and spans, and the rows that need logits (every prompt row
// when the prompt is scored, every node of a verified tree, else the last
// row of a request whose prompt is complete).
func (rn *runner) build(chunks []sched.Chunk[*request], trees map[*request]*spec.Tree, mrope bool) (*forward.Batch, []chunkRows) {
	b := &forward.Batch{KV: rn.kv}
	rows := make([]chunkRows, len(chunks))
	var decodes, prefills, verifies int
	for i, c := range chunks {
		r, n := c.Req, c.N
		switch c.Kind {
		case sched.Prefill:
			prefills++
		case sched.Verify:
			verifies++
		default:
			decodes++
		}
		rows[i].sample, rows[i].step = -1, r.NumOutput()
		if r.WantsPromptRows() || c.Kind == sched.Verify {
			rows[i].score = n // the host walks a tree over all its rows
		}
		start := len(b.InputIDs)
		b.ReqRows = append(b.ReqRows, int32(r.Seq.Row))
		b.PrefixLens = append(b.PrefixLens, int32(r.Computed))
		b.ExtendLens = append(b.ExtendLens, int32(n))
		slots := rn.kv.Table.Row(r.Seq.Row)
		if c.Kind == sched.Verify {
			rows[i].first, rows[i].tree = len(b.LogitRows), true
			appendTree(b, slots, r.Computed, trees[r])
			continue
		}
		for t := r.Computed; t < r.Computed+n; t++ {
			b.InputIDs = append(b.InputIDs, int32(r.Tokens[t]))
			b.Positions = append(b.Positions, int32(t))
			b.OutSlots = append(b.OutSlots, slots[t])
		}
		if r.images != nil {
			addImageInputs(b, r, i, start, r.Computed, n)
		}
		rows[i].first = len(b.LogitRows)
		last := r.Computed+n == len(r.Tokens)
		if r.WantsPromptRows() {
			for k := range n {
				b.LogitRows = append(b.LogitRows, int32(start+k))
			}
		} else if last {
			b.LogitRows = append(b.LogitRows, int32(start+n-1))
		}
		if last {
			rows[i].sample = len(b.LogitRows) - 1
		}
	}
	if mrope {
		reqs, froms, counts := make([]*request, len(chunks)), make([]int, len(chunks)), make([]int, len(chunks))
		for i, c := range chunks {
			reqs[i], froms[i], counts[i] = c.Req, c.Req.Computed, c.N
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
		attachTreeMasks(b, planTrees)
	case prefills == 0:
		b.Mode = forward.Decode
	case decodes == 0:
		b.Mode = forward.Extend
	default:
		b.Mode = forward.Mixed
	}
	return b, rows
}

// run runs b: on the device's thread, or on every tensor-parallel rank.
func (rn *runner) run(b *forward.Batch) (tensor.T, error) {
	if b.Mode == forward.Decode && !rn.drawn.IsZero() {
		rn.stats.decodeGaps.Add(1)
		rn.stats.decodeGapNanos.Add(int64(time.Since(rn.drawn)))
	}
	if rn.tp != nil {
		return rn.tp.run(rn, b)
	}
	return rn.runLocal(b)
}

// runLocal runs b on this runner's device thread.
func (rn *runner) runLocal(b *forward.Batch) (logits tensor.T, err error) {
	err = rn.rt.Run(func() (err error) {
		logits, err = rn.runForward(b)
		return err
	})
	return logits, err
}

// CUDA graphs for decode steps.
//
// A decode batch of n requests is padded to the next captured size
// (device.GraphBatchSizes: 1, 2, 4, 8, then steps of 8 up to
// --cuda-graph-max-bs) with padding requests that write and read only the
// reserved KV slot 0 (kvcache.ReqToToken.PadRow), planned, and run through
// the runtime's device.Graphs: captured the first time, replayed after. Larger
// batches, prefill and mixed batches run eagerly. Graphs need a decode
// attention backend whose launches do not depend on sequence lengths
// (attention.Caps.CUDAGraph).

// decodeGraphs is the engine's graph state (nil: graphs are off).
type decodeGraphs struct {
	run         device.Graphs
	sizes       []int // captured batch sizes, ascending
	eagerStreak int   // consecutive steps that could not use a graph
	// Under tensor parallelism: the rank's graphs as a group member, and
	// how it agrees with the other ranks on each step's path (every rank
	// must capture, replay or run eagerly together: RunGroupGraph).
	group device.GroupGraphs
	agree device.GraphAgree
	// verifyStreak counts consecutive verify steps that could not use a
	// graph; at maxEagerStreak verifyOff turns verify graphs off, leaving
	// the decode graphs on.
	verifyStreak int
	verifyOff    bool
}

// forRank is the graph state of another rank of the group (its own
// runtime, the same sizes and ballot).
func (g *decodeGraphs) forRank(rt device.Runtime) (*decodeGraphs, error) {
	c := &decodeGraphs{sizes: g.sizes, agree: g.agree, verifyOff: g.verifyOff}
	var ok bool
	if c.group, ok = rt.(device.GroupGraphs); !ok {
		return nil, fmt.Errorf("the %s runtime has no graphs for a tensor-parallel group", rt.Name())
	}
	c.run = c.group
	return c, nil
}

// maxEagerStreak consecutive steps without a graph turn graphs off: the
// model does something a graph cannot hold in every step (a mixture's
// routing read back to the host, under GOSLING_MOE_HOST_ROUTING=1 or for
// steps too large to route on the device), so each dry run would be
// wasted.
const maxEagerStreak = 3

// setupGraphs turns decode graphs on when the device, the settings and the
// decode backend allow it, logging why not otherwise.
func (e *Engine) setupGraphs(decode attention.Entry) {
	cfg := &e.cfg
	g, ok := e.rt.(device.Graphs)
	if !ok {
		cfg.DisableCUDAGraph = true
		return
	}
	switch {
	case cfg.DisableCUDAGraph:
		e.log.Info("CUDA graphs disabled (--disable-cuda-graph)")
		return
	case !decode.Caps.CUDAGraph:
		e.log.Warn("CUDA graphs off: the decode attention backend cannot run inside a graph", "decode_backend", decode.Name)
		cfg.DisableCUDAGraph = true
		return
	case e.tp != nil && cfg.NNodes > 1:
		// Every rank must take the same graph path each step (NCCL's
		// rule for captured collectives); the ranks of one process agree
		// through a ballot in memory, and nodes have no such exchange
		// inside a step yet.
		e.log.Warn("CUDA graphs off for ranks on several nodes (eager decode)", "nnodes", cfg.NNodes)
		cfg.DisableCUDAGraph = true
		return
	}
	if cfg.CUDAGraphMaxBS <= 0 || cfg.CUDAGraphMaxBS > cfg.MaxRunningRequests {
		cfg.CUDAGraphMaxBS = cfg.MaxRunningRequests
	}
	e.graphs = &decodeGraphs{run: g, sizes: device.GraphBatchSizes(cfg.CUDAGraphMaxBS)}
	if e.tp != nil {
		gg, err := e.graphs.forRank(e.rt)
		if err != nil {
			e.log.Warn("CUDA graphs off under tensor parallelism", "err", err)
			e.graphs, cfg.DisableCUDAGraph = nil, true
			return
		}
		e.tp.ballot = newBallot(1 + len(e.tp.peers))
		gg.agree = e.tp.ballot.agree
		e.graphs = gg
	}
	e.log.Info("CUDA graphs for decode", "batch_sizes", e.graphs.sizes, "tp_size", max(cfg.TPSize, 1))
	if e.spec != nil {
		e.log.Info("CUDA graphs for speculative verify steps", "batch_sizes", e.graphs.sizes,
			"tokens_per_request", e.spec.cfg.NumDraftTokens)
	}
}

// graphSize is the captured size a batch is padded to and its tokens
// per request, or false when it runs eagerly. Decode batches have one
// token per request. Verify batches qualify when every request has the
// same n tokens, each with its logits row in order (speculator.padTrees
// makes the trees of a step that size): their graph is kept under
// (size, n), and a tree mask, when the step has one, is data the graph
// reads (attention/gpu's planner keeps its address fixed).
func (rn *runner) graphSize(b *forward.Batch) (size, n int, ok bool) {
	if rn.graphs == nil {
		return 0, 0, false
	}
	switch b.Mode {
	case forward.Decode:
		n = 1
	case forward.TargetVerify:
		if rn.graphs.verifyOff || !uniformVerify(b) {
			return 0, 0, false
		}
		n = int(b.ExtendLens[0])
	default:
		return 0, 0, false
	}
	size, ok = device.PaddedBatchSize(b.NumReqs(), rn.graphs.sizes)
	return size, n, ok
}

// uniformVerify reports whether every request of b extends by the same
// number of tokens, every token with a logits row in token order, with no
// images (whose embeddings, spans and M-RoPE positions a graph does not
// replay).
func uniformVerify(b *forward.Batch) bool {
	if b.NumReqs() == 0 || len(b.LogitRows) != len(b.InputIDs) || b.EmbedRows != nil || b.Spans != nil || b.MRopePositions != nil {
		return false
	}
	for _, n := range b.ExtendLens {
		if n != b.ExtendLens[0] {
			return false
		}
	}
	for i, row := range b.LogitRows {
		if row != int32(i) {
			return false
		}
	}
	return true
}

// graphKey is the key a batch's graph is kept under: the padded batch
// size for decode, and for a verify batch of n tokens per request the
// size and n together (above every decode size).
func graphKey(size, n int) int {
	if n == 1 {
		return size
	}
	return n<<20 | size
}

// padVerify appends padding requests of n tokens each to a verify batch
// until it has size requests: on the pad row (every position is the
// reserved slot 0), prefix 0, token 0 at positions 0..n−1, causal, with a
// logits row per token, after the real rows.
func padVerify(b *forward.Batch, size, n, padRow int) {
	for r := b.NumReqs(); r < size; r++ {
		if b.Slots != nil {
			b.Slots = append(b.Slots, b.KV.Table.Row(padRow)[:n])
		}
		if b.CustomMask != nil {
			b.MaskStarts = append(b.MaskStarts, -1)
		}
		b.ReqRows = append(b.ReqRows, int32(padRow))
		b.PrefixLens = append(b.PrefixLens, 0)
		b.ExtendLens = append(b.ExtendLens, int32(n))
		for t := range n {
			b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
			b.InputIDs = append(b.InputIDs, 0)
			b.Positions = append(b.Positions, int32(t))
			b.OutSlots = append(b.OutSlots, 0)
		}
	}
}

// padDecode appends padding requests to a decode batch until it has size
// requests. Each reads and writes only slot 0 of the reserved page, at
// position 0, with token 0, and has a logits row (the graph's shapes do
// not depend on how many requests are real); the real rows keep their
// places.
func padDecode(b *forward.Batch, size, padRow int) {
	for r := b.NumReqs(); r < size; r++ {
		if b.Slots != nil {
			b.Slots = append(b.Slots, b.KV.Table.Row(padRow)[:1]) // never written
		}
		b.ReqRows = append(b.ReqRows, int32(padRow))
		b.PrefixLens = append(b.PrefixLens, 0)
		b.ExtendLens = append(b.ExtendLens, 1)
		b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
		b.InputIDs = append(b.InputIDs, 0)
		b.Positions = append(b.Positions, 0)
		b.OutSlots = append(b.OutSlots, 0)
	}
	if b.MRopePositions != nil {
		// Three sections of one position per token: each grows by the
		// padding rows, at position 0.
		n, m := len(b.MRopePositions)/3, len(b.InputIDs)
		padded := make([]int32, 3*m)
		for s := range 3 {
			copy(padded[s*m:], b.MRopePositions[s*n:(s+1)*n])
		}
		b.MRopePositions = padded
	}
}

// runForward plans b and runs the model on it: through a CUDA graph for a
// decode batch that fits one, eagerly otherwise. It runs on the device
// thread (inside run).
func (rn *runner) runForward(b *forward.Batch) (tensor.T, error) {
	size, n, graph := rn.graphSize(b)
	if graph && n == 1 {
		padDecode(b, size, rn.kv.Table.PadRow())
	} else if graph {
		padVerify(b, size, n, rn.kv.Table.PadRow())
	}
	if err := b.Finalize(); err != nil {
		return tensor.T{}, err
	}
	if err := rn.attn.Plan(b); err != nil {
		return tensor.T{}, err
	}
	var logits tensor.T
	run := func() (err error) {
		logits, err = rn.model.Forward(b, rn.attn)
		return err
	}
	if p, ok := rn.rt.(device.Profiler); ok && p.Profiling() {
		if graph && rn.graphs.agree != nil {
			// The group's other ranks wait for this rank's vote.
			if _, err := rn.graphs.agree(device.GraphVote{Eager: true, Hold: true}); err != nil {
				return tensor.T{}, err
			}
		}
		return logits, p.ProfileForward(b.Mode.String(), run) // eager: a graph cannot be timed per kernel
	}
	if !graph {
		return logits, run()
	}
	var res device.GraphRun
	var err error
	key := graphKey(size, n)
	if rn.graphs.agree != nil {
		res, err = rn.graphs.group.RunGroupGraph(key, run, rn.graphs.agree)
	} else {
		res, err = rn.graphs.run.RunGraph(key, run)
	}
	if n > 1 {
		rn.countVerifyGraph(res, size, n)
		return logits, err
	}
	switch res.Path {
	case device.GraphReplayed:
		rn.stats.graphReplays.Add(1)
	case device.GraphCaptured:
		rn.stats.graphCaptures.Add(1)
		rn.log.Debug("captured a CUDA graph", "batch_size", size, "nodes", res.Nodes, "time", res.Capture)
	case device.GraphEager:
		rn.stats.graphEager.Add(1)
		rn.log.Warn("decode step ran without a CUDA graph", "batch_size", size, "reason", res.Reason)
		if res.Held {
			// A profiled step on rank 0; under a group every rank counts
			// the same eager steps, so all give graphs up together.
			return logits, err
		}
		if rn.graphs.eagerStreak++; rn.graphs.eagerStreak >= maxEagerStreak {
			rn.log.Warn("CUDA graphs off: the model's decode steps cannot be captured", "reason", res.Reason)
			rn.graphs = nil
		}
		return logits, err
	}
	rn.graphs.eagerStreak = 0
	return logits, err
}

// countVerifyGraph counts a verify step's graph path; maxEagerStreak
// verify steps in a row without a graph turn verify graphs off (the
// decode graphs stay).
func (rn *runner) countVerifyGraph(res device.GraphRun, size, n int) {
	g := rn.graphs
	switch res.Path {
	case device.GraphReplayed:
		rn.stats.verifyReplays.Add(1)
	case device.GraphCaptured:
		rn.stats.verifyCaptures.Add(1)
		rn.log.Debug("captured a CUDA graph of a verify step", "batch_size", size, "tokens_per_request", n, "nodes", res.Nodes, "time", res.Capture)
	case device.GraphEager:
		rn.stats.verifyEager.Add(1)
		rn.log.Warn("verify step ran without a CUDA graph", "batch_size", size, "tokens_per_request", n, "reason", res.Reason)
		if res.Held {
			return
		}
		if g.verifyStreak++; g.verifyStreak >= maxEagerStreak {
			rn.log.Warn("CUDA graphs off for verify steps: they cannot be captured", "reason", res.Reason)
			g.verifyOff = true
		}
		return
	}
	g.verifyStreak = 0
}
