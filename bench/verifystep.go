package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/gosling-ai/gosling/engine"
)

// VerifyStepOptions describe the step timings of gosling bench
// speculative --verify-steps: a verify step of each size against a plain
// decode step, at each batch size (engine.TimeSteps).
type VerifyStepOptions = engine.StepTimingOptions

// VerifyStepRow is one batch size and verify size: the decode step's and
// the verify steps' medians, and how many of each's timed steps replayed
// a CUDA graph.
type VerifyStepRow struct {
	Batch        int     `json:"batch"`
	Tokens       int     `json:"tokens_per_request"`
	DecodeMS     float64 `json:"decode_ms"`
	ChainMS      float64 `json:"chain_ms"`
	TreeMS       float64 `json:"tree_ms"`
	ChainRatio   float64 `json:"chain_over_decode"`
	TreeRatio    float64 `json:"tree_over_decode"`
	DecodeGraphs int     `json:"decode_graph_replays"`
	ChainGraphs  int     `json:"chain_graph_replays"`
	TreeGraphs   int     `json:"tree_graph_replays"`
	// OffGraph says, per shape whose timed steps did not all replay a
	// graph on an engine that has graphs, how many captured one or ran
	// eagerly and why.
	OffGraph []string `json:"off_graph,omitempty"`
}

// VerifyStepReport is the table of VerifySteps.
type VerifyStepReport struct {
	Device  string          `json:"device"`
	Context int             `json:"context"`
	Repeat  int             `json:"repeat"`
	Rows    []VerifyStepRow `json:"rows"`
}

// VerifySteps times the steps of o on an engine of cfg, which must be
// speculative: its attention is resolved for tree verification as a
// serving engine's would be.
func VerifySteps(ctx context.Context, cfg engine.Config, o VerifyStepOptions) (*VerifyStepReport, error) {
	if cfg.SpeculativeAlgorithm == "" {
		return nil, fmt.Errorf("bench speculative --verify-steps times a speculative engine's steps: give --speculative-algorithm")
	}
	e, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	steps, err := e.TimeSteps(ctx, o)
	if err != nil {
		return nil, err
	}
	return verifyStepReport(e.Settings().Device, o, steps), nil
}

func verifyStepReport(device string, o VerifyStepOptions, steps []engine.StepTiming) *VerifyStepReport {
	rep := &VerifyStepReport{Device: device, Context: o.Context, Repeat: o.Repeat}
	decode := map[int]engine.StepTiming{}
	type key struct {
		batch, n int
		shape    engine.StepShape
	}
	verify := map[key]engine.StepTiming{}
	for _, s := range steps {
		if s.Shape == engine.ShapeDecode {
			decode[s.Batch] = s
		} else {
			verify[key{s.Batch, s.DraftTokens, s.Shape}] = s
		}
	}
	for _, b := range o.Batches {
		d, ok := decode[b]
		if !ok {
			continue
		}
		for _, n := range o.DraftTokens {
			c, t := verify[key{b, n, engine.ShapeChain}], verify[key{b, n, engine.ShapeTree}]
			row := VerifyStepRow{Batch: b, Tokens: n, DecodeMS: 1e3 * d.Median(), ChainMS: 1e3 * c.Median(), TreeMS: 1e3 * t.Median(),
				DecodeGraphs: d.Graphs, ChainGraphs: c.Graphs, TreeGraphs: t.Graphs}
			for i, s := range []engine.StepTiming{d, c, t} {
				if s.Captures+s.Eager > 0 && (i > 0 || n == o.DraftTokens[0]) { // the decode step once per batch
					line := fmt.Sprintf("%s of %d tokens: %d captured, %d eager", s.Shape, s.DraftTokens, s.Captures, s.Eager)
					if s.EagerReason != "" {
						line += " (" + s.EagerReason + ")"
					}
					row.OffGraph = append(row.OffGraph, line)
				}
			}
			if row.DecodeMS > 0 {
				row.ChainRatio, row.TreeRatio = row.ChainMS/row.DecodeMS, row.TreeMS/row.DecodeMS
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	return rep
}

// Print writes the table: per batch size and verify size, the decode
// step, the verify steps (a chain: causal; a tree: through the tree
// mask), each verify step over the decode step, and the timed steps that
// replayed a graph.
func (r *VerifyStepReport) Print(w io.Writer) {
	fmt.Fprintf(w, "one verify step against one plain decode step (%s): %d tokens per request in the cache, greedy draw included, medians of %d\n",
		r.Device, r.Context, r.Repeat)
	fmt.Fprintf(w, "%5s %6s %10s %10s %8s %10s %8s %14s\n", "batch", "tokens", "decode ms", "chain ms", "chain/d", "tree ms", "tree/d", "graphs d/c/t")
	for _, x := range r.Rows {
		fmt.Fprintf(w, "%5d %6d %10.3f %10.3f %7.2fx %10.3f %7.2fx %14s\n", x.Batch, x.Tokens, x.DecodeMS, x.ChainMS, x.ChainRatio, x.TreeMS, x.TreeRatio,
			fmt.Sprintf("%d/%d/%d", x.DecodeGraphs, x.ChainGraphs, x.TreeGraphs))
	}
	for _, x := range r.Rows {
		for _, l := range x.OffGraph {
			fmt.Fprintf(w, "  batch %d, %s\n", x.Batch, l)
		}
	}
}
