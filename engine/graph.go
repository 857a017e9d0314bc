package engine

import (
	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// CUDA graphs for decode steps.
//
// A decode batch of n requests is padded to the next captured size
// (cuda.GraphBatchSizes: 1, 2, 4, 8, then steps of 8 up to
// --cuda-graph-max-bs) with padding requests that write and read only the
// reserved KV slot 0 (kvcache.ReqToToken.PadRow), planned, and run through
// cuda.ModelOps.RunGraph: captured the first time, replayed after. Larger
// batches, prefill and mixed batches run eagerly. Graphs need a decode
// attention backend whose launches do not depend on sequence lengths
// (attention.Caps.CUDAGraph).

// decodeGraphs is the engine's graph state (nil: graphs are off).
type decodeGraphs struct {
	sizes       []int // captured batch sizes, ascending
	eagerStreak int   // consecutive steps that could not use a graph
}

// maxEagerStreak consecutive steps without a graph turn graphs off: the
// model does something a graph cannot hold in every step (DeepSeek's MoE
// routing reads its choice back), so each dry run would be wasted.
const maxEagerStreak = 3

// setupGraphs turns decode graphs on when the device, the settings and the
// decode backend allow it, logging why not otherwise.
func (e *Engine) setupGraphs(decode attention.Entry) {
	cfg := &e.cfg
	if e.gpu == nil {
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
	}
	if cfg.CUDAGraphMaxBS <= 0 || cfg.CUDAGraphMaxBS > cfg.MaxRunningRequests {
		cfg.CUDAGraphMaxBS = cfg.MaxRunningRequests
	}
	e.graphs = &decodeGraphs{sizes: cuda.GraphBatchSizes(cfg.CUDAGraphMaxBS)}
	e.log.Info("CUDA graphs for decode", "batch_sizes", e.graphs.sizes)
}

// graphSize is the captured size a decode batch is padded to, or false
// when it runs eagerly.
func (e *Engine) graphSize(b *forward.Batch) (int, bool) {
	if e.graphs == nil || b.Mode != forward.Decode {
		return 0, false
	}
	return cuda.PaddedBatchSize(b.NumReqs(), e.graphs.sizes)
}

// padDecode appends padding requests to a decode batch until it has size
// requests. Each reads and writes only slot 0 of the reserved page, at
// position 0, with token 0, and has a logits row (the graph's shapes do
// not depend on how many requests are real); the real rows keep their
// places.
func padDecode(b *forward.Batch, size, padRow int) {
	for r := b.NumReqs(); r < size; r++ {
		b.ReqRows = append(b.ReqRows, int32(padRow))
		b.PrefixLens = append(b.PrefixLens, 0)
		b.ExtendLens = append(b.ExtendLens, 1)
		b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
		b.InputIDs = append(b.InputIDs, 0)
		b.Positions = append(b.Positions, 0)
		b.OutSlots = append(b.OutSlots, 0)
	}
}

// runForward plans b and runs the model on it: through a CUDA graph for a
// decode batch that fits one, eagerly otherwise. It runs on the device
// thread (inside e.forward).
func (e *Engine) runForward(b *forward.Batch) (tensor.T, error) {
	size, graph := e.graphSize(b)
	if graph {
		padDecode(b, size, e.kv.Table.PadRow())
	}
	if err := b.Finalize(); err != nil {
		return tensor.T{}, err
	}
	if err := e.attn.Plan(b); err != nil {
		return tensor.T{}, err
	}
	var logits tensor.T
	run := func() (err error) {
		logits, err = e.model.Forward(b, e.attn)
		return err
	}
	if !graph {
		return logits, run()
	}
	res, err := e.gpu.ops.RunGraph(size, run)
	switch res.Path {
	case cuda.GraphReplayed:
		e.stats.graphReplays.Add(1)
	case cuda.GraphCaptured:
		e.stats.graphCaptures.Add(1)
		e.log.Debug("captured a CUDA graph", "batch_size", size, "nodes", res.Nodes, "time", res.Capture)
	case cuda.GraphEager:
		e.stats.graphEager.Add(1)
		e.log.Warn("decode step ran without a CUDA graph", "batch_size", size, "reason", res.Reason)
		if e.graphs.eagerStreak++; e.graphs.eagerStreak >= maxEagerStreak {
			e.log.Warn("CUDA graphs off: the model's decode steps cannot be captured", "reason", res.Reason)
			e.graphs = nil
		}
		return logits, err
	}
	e.graphs.eagerStreak = 0
	return logits, err
}
