package engine

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/runner"
)

// newRunner makes the runner of this process's first rank over the
// engine's device, model, attention and cache; under tensor parallelism
// it runs every batch through the group.
func (e *Engine) newRunner() {
	cfg := runner.Config{Runtime: e.rt, Model: e.model, Attention: e.attn, KV: e.kv, Workers: e.workers, Log: e.log}
	if e.tp != nil {
		cfg.Group = e.tp
	}
	e.rn = runner.New[*request](cfg)
}

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
	graphs := runner.NewGraphs(g, device.GraphBatchSizes(cfg.CUDAGraphMaxBS))
	if e.tp != nil {
		gg, err := graphs.ForRank(e.rt)
		if err != nil {
			e.log.Warn("CUDA graphs off under tensor parallelism", "err", err)
			cfg.DisableCUDAGraph = true
			return
		}
		e.tp.ballot = newBallot(1 + len(e.tp.peers))
		gg.SetAgree(e.tp.ballot.agree)
		graphs = gg
	}
	e.rn.SetGraphs(graphs)
	e.log.Info("CUDA graphs for decode", "batch_sizes", graphs.Sizes(), "tp_size", max(cfg.TPSize, 1))
	if e.spec != nil {
		e.log.Info("CUDA graphs for speculative verify steps", "batch_sizes", graphs.Sizes(),
			"tokens_per_request", e.spec.cfg.NumDraftTokens)
		if d := e.spec.drafter(); d != nil && d.dev.rt == e.rt {
			// The drafter runs on the target's device and ops: its graphs
			// sit beside the target's under keys of their own
			// (runner.DraftGraphKey), outside any tensor-parallel ballot
			// (only this rank drafts).
			d.rn.SetGraphs(runner.NewGraphs(g, graphs.Sizes()), e.spec.cfg.NumSteps+1)
			e.log.Info("CUDA graphs for draft steps", "batch_sizes", graphs.Sizes(),
				"level_tokens_per_request", e.spec.cfg.TopK, "catch_up_tokens_per_request", fmt.Sprintf("1-%d", e.spec.cfg.NumSteps+1))
		}
	}
}
