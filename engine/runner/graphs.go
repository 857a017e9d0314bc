package runner

import (
	"fmt"
	"log/slog"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

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

// Graphs is a runner's graph state (nil: graphs are off).
type Graphs struct {
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

// NewGraphs is the graph state of a runner whose decode batches of up to
// the largest of sizes (ascending) run through run's graphs.
func NewGraphs(run device.Graphs, sizes []int) *Graphs {
	return &Graphs{run: run, sizes: sizes}
}

// Sizes are the batch sizes captured, ascending.
func (g *Graphs) Sizes() []int { return g.sizes }

// VerifyOff reports whether verify steps run eagerly (they could not be
// captured); decode steps may still use graphs.
func (g *Graphs) VerifyOff() bool { return g.verifyOff }

// SetAgree makes g a member of a tensor-parallel group whose ranks agree
// on each step's graph path through agree.
func (g *Graphs) SetAgree(agree device.GraphAgree) { g.agree = agree }

// ForRank is the graph state of another rank of the group (its own
// runtime, the same sizes and ballot).
func (g *Graphs) ForRank(rt device.Runtime) (*Graphs, error) {
	c := &Graphs{sizes: g.sizes, agree: g.agree, verifyOff: g.verifyOff}
	var ok bool
	if c.group, ok = rt.(device.GroupGraphs); !ok {
		return nil, fmt.Errorf("the %s runtime has no graphs for a tensor-parallel group", rt.Name())
	}
	c.run = c.group
	return c, nil
}

// maxEagerStreak consecutive steps without a graph turn graphs off: the
// model does something a graph cannot hold in every step (a mixture's
// routing read back to the host: compact experts, every step under
// GOSLING_MOE_HOST_ROUTING=1, the large ones under
// GOSLING_MOE_PREFILL_LOOP=1), so each dry run would be wasted.
const maxEagerStreak = 3

// graphSize is the captured size a batch is padded to and its tokens
// per request, or false when it runs eagerly. Decode batches have one
// token per request. Verify batches qualify when every request has the
// same n tokens, each with its logits row in order (speculator.padTrees
// makes the trees of a step that size): their graph is kept under
// (size, n), and a tree mask, when the step has one, is data the graph
// reads (attention/gpu's planner keeps its address fixed).
func (rn *Runner[R]) graphSize(b *forward.Batch) (size, n int, ok bool) {
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
	return uniformExtend(b, true)
}

// uniformExtend reports whether every request of b extends by the same
// number of tokens, with no images, and has a logits row at every token
// (everyRow) or at its last token only, in token order.
func uniformExtend(b *forward.Batch, everyRow bool) bool {
	rows := b.NumReqs()
	if everyRow {
		rows = len(b.InputIDs)
	}
	if b.NumReqs() == 0 || len(b.LogitRows) != rows || b.EmbedRows != nil || b.Spans != nil || b.MRopePositions != nil {
		return false
	}
	n := b.ExtendLens[0]
	for _, m := range b.ExtendLens {
		if m != n {
			return false
		}
	}
	for i, row := range b.LogitRows {
		if everyRow && row != int32(i) || !everyRow && row != int32(i)*n+n-1 {
			return false
		}
	}
	return true
}

// GraphKey is the key a batch's graph is kept under: the padded batch
// size for decode, and for a verify batch of n tokens per request the
// size and n together (above every decode size).
func GraphKey(size, n int) int {
	if n == 1 {
		return size
	}
	return n<<20 | size
}

// padVerify appends padding requests of n tokens each to a verify batch
// until it has size requests: on the pad row (every position is the
// reserved slot 0), prefix 0, token 0 at positions 0..n−1, causal, with a
// logits row per token, after the real rows.
func padVerify(b *forward.Batch, size, n, padRow int) { padExtend(b, size, n, padRow, true) }

// padExtend is padVerify with a logits row at every padding token
// (everyRow) or at each padding request's last token only.
func padExtend(b *forward.Batch, size, n, padRow int, everyRow bool) {
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
			if everyRow || t == n-1 {
				b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
			}
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
// decode or verify batch that fits one (unless eager), eagerly otherwise.
// It runs on the device thread (inside Forward).
func (rn *Runner[R]) runForward(b *forward.Batch, eager bool) (tensor.T, error) {
	size, n, graph := rn.graphSize(b)
	graph = graph && !eager
	if graph && n == 1 {
		padDecode(b, size, rn.kv.Table.PadRow())
	} else if graph {
		padVerify(b, size, n, rn.kv.Table.PadRow())
	}
	if err := b.Finalize(); err != nil {
		return tensor.T{}, err
	}
	rn.counts.noteForward(len(b.InputIDs))
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
	key := GraphKey(size, n)
	if rn.graphs.agree != nil {
		res, err = rn.graphs.group.RunGroupGraph(key, run, rn.graphs.agree)
	} else {
		res, err = rn.graphs.run.RunGraph(key, run)
	}
	g := rn.graphs
	if n > 1 {
		if giveUpGraphs(&rn.counts.verify, &g.verifyStreak, rn.log, res, "CUDA graphs off for verify steps: they cannot be captured",
			"verify step", "batch_size", size, "tokens_per_request", n) {
			g.verifyOff = true // the decode graphs stay
		}
		return logits, err
	}
	if giveUpGraphs(&rn.counts.decode, &g.eagerStreak, rn.log, res, "CUDA graphs off: the model's decode steps cannot be captured",
		"decode step", "batch_size", size) {
		rn.graphs = nil
	}
	return logits, err
}

// giveUpGraphs counts a step's graph path res in c (logged as what with
// attrs) and keeps *streak, the steps of its kind in a row that wanted a
// graph and ran eagerly; a step held off graphs (profiled) counts, but
// neither extends nor ends the streak, as under a group every rank holds
// the same steps. It reports true, logging off, when the streak reaches
// maxEagerStreak: the caller then turns that kind's graphs off.
func giveUpGraphs(c *pathCounter, streak *int, log *slog.Logger, res device.GraphRun, off, what string, attrs ...any) bool {
	if !c.note(log, res, what, attrs...) {
		*streak = 0
		return false
	}
	if res.Held {
		return false
	}
	if *streak++; *streak < maxEagerStreak {
		return false
	}
	log.Warn(off, "reason", res.Reason)
	return true
}
