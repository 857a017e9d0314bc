package engine_test

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

// The CPU's FP8 reference path (--quantization fp8) at TP=2, spelled out
// rank by rank as the engine builds it, with each MoE layer's router
// logits recorded and, on demand, one token's choice in one layer flipped
// to the runner-up. Where a GPU FP8 run lands beyond its bound from the
// same reference path, this says whether a router near-tie explains it:
// the token before the position has a top-k margin the GPU's e4m3 GEMM
// can cross, and the reference with that choice flipped lands where the
// GPU does.

// routeFlip swaps the k-th and (k+1)-th choice of token tok in the MoE
// layer layer (in forward order).
type routeFlip struct{ layer, tok int }

// fp8RouteOps is one rank's CPU ops (FP8 reference path) recording the
// router logits and applying flip.
type fp8RouteOps struct {
	*cpu.Ops
	flip   *routeFlip
	routes []emuRoute
}

func (o *fp8RouteOps) Route(logits tensor.T, r *device.Router) ([]int32, []float32) {
	l := len(o.routes)
	o.routes = append(o.routes, emuRoute{logits: tensor.From(slices.Clone(logits.HostData()), logits.Shape...), k: r.TopK})
	if o.flip != nil && o.flip.layer == l {
		logits = tensor.From(slices.Clone(logits.HostData()), logits.Shape...)
		row := logits.Row(o.flip.tok)
		order := rankedExperts(row)
		a, b := order[r.TopK-1], order[r.TopK]
		row[a], row[b] = row[b], row[a]
	}
	return o.Ops.Route(logits, r)
}

// rankedExperts is the experts by descending logit (ties to the lower index).
func rankedExperts(row []float32) []int {
	order := make([]int, len(row))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	return order
}

// fp8TP runs ids through the model at dir on the CPU's FP8 reference
// path at TP=ranks (each rank quantising its own slice, engine.rankWeights),
// with flip applied on both ranks (nil: none), and returns rank 0's run.
func fp8TP(t *testing.T, dir string, ids []int, ranks int, flip *routeFlip) emuRun {
	t.Helper()
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	plan, err := parallel.NewPlan(&ck.Config, ranks)
	if err != nil {
		t.Fatal(err)
	}
	arch, err := registry.Lookup(ck.Config.Architecture)
	if err != nil {
		t.Fatal(err)
	}
	w := cpu.NewWorkers(0)
	defer w.Close()
	rts := make([]device.Runtime, ranks)
	for r := range rts {
		rts[r] = cpu.NewRuntime(w)
	}
	comms, err := parallel.Join(rts)
	if err != nil {
		t.Fatal(err)
	}
	defer parallel.CloseAll(comms)
	rc := plan.RankConfig()
	var (
		rops   = make([]*fp8RouteOps, ranks)
		logits = make([]tensor.T, ranks)
		errs   = make([]error, ranks)
		wg     sync.WaitGroup
	)
	for r := range ranks {
		inner := rts[r].Ops().(*cpu.Ops)
		inner.FP8 = true
		rops[r] = &fp8RouteOps{Ops: inner, flip: flip}
		ops, err := parallel.NewOps(rops[r], plan, comms[r])
		if err != nil {
			t.Fatal(err)
		}
		ws, err := model.QuantizeFP8(&parallel.Source{WS: ck.Weights, Plan: plan, Rank: r})
		if err != nil {
			t.Fatal(err)
		}
		m, err := arch.New(&rc, ws, ops)
		if err != nil {
			t.Fatal(err)
		}
		cache, err := kvcache.NewCache(m.KVSpec(), 1, len(ids), 1, len(ids))
		if err != nil {
			t.Fatal(err)
		}
		be, err := native.Entry.New(attention.Options{Device: "cpu", KV: cache, Runtime: rts[r], Layers: m.AttentionLayers()})
		if err != nil {
			t.Fatal(err)
		}
		b := prefillBatch(t, cache, ids)
		if err := be.Plan(b); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			logits[r], errs[r] = m.Forward(b, be)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return emuRun{logprobs: logprobsOf(logits[0], ids), routes: rops[0].routes}
}

// fp8Emulation is a model's FP8 reference run at TP=ranks, for explaining a
// GPU run's positions beyond their bound.
type fp8Emulation struct {
	t     *testing.T
	dir   string
	ids   []int
	ranks int
	base  emuRun
}

func emulateFP8(t *testing.T, dir string, ids []int, ranks int) *fp8Emulation {
	return &fp8Emulation{t: t, dir: dir, ids: ids, ranks: ranks, base: fp8TP(t, dir, ids, ranks, nil)}
}

// fp8FlipMargin is the widest top-k margin, in router logits, that
// explain tries to flip: the e4m3 rounding of a GEMM's activations moves
// a router's inputs by up to 1/16 of their size.
const fp8FlipMargin = 0.05

// explain accounts for a GPU FP8 run's log-probability got at position p
// (index p-1) beyond its bound from want (the reference path's value):
// some MoE layer chooses token p-1's experts by a top-k margin under
// fp8FlipMargin, and the reference with that choice flipped lands at
// got, within a quarter of its own move from want plus 0.05. The layers
// are tried from the smallest margin.
func (e *fp8Emulation) explain(p int, got, want float64) (why string, ok bool) {
	tok := p - 1
	type cand struct {
		layer  int
		margin float64
	}
	var cands []cand
	for l, r := range e.base.routes {
		if _, margin := topK(r.logits.Row(tok), r.k); margin < fp8FlipMargin {
			cands = append(cands, cand{l, margin})
		}
	}
	if len(cands) == 0 {
		return fmt.Sprintf("no MoE layer chooses token %d's experts by a margin under %v in router logits", tok, fp8FlipMargin), false
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmpFloat(a.margin, b.margin) })
	var tried []string
	for _, c := range cands {
		flipped := fp8TP(e.t, e.dir, e.ids, e.ranks, &routeFlip{layer: c.layer, tok: tok})
		emu := flipped.logprobs[p-1]
		row := e.base.routes[c.layer]
		chosen, _ := topK(row.logits.Row(tok), row.k)
		runnerUp := rankedExperts(row.logits.Row(tok))[row.k]
		if math.Abs(got-emu) <= 0.25*math.Abs(emu-want)+0.05 {
			return fmt.Sprintf("router near-tie at token %d: MoE layer %d chooses experts %v over expert %d by a margin of %.2e in router logits; "+
				"the reference path with expert %d chosen instead lands at %.4g, the GPU at %.4g (reference %.4g)",
				tok, c.layer, chosen, runnerUp, c.margin, runnerUp, emu, got, want), true
		}
		tried = append(tried, fmt.Sprintf("layer %d (margin %.2e): flipped lands at %.4g", c.layer, c.margin, emu))
	}
	return fmt.Sprintf("near-ties at token %d, but no flip lands at the GPU's %.4g (reference %.4g): %v", tok, got, want, tried), false
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestFP8TP2Emulation checks the emulation TestGPUTPFP8Quantization leans
// on: unflipped, it is the engine's FP8 reference path at TP=2 (the same
// prompt log-probabilities); the margins it records are each MoE layer's
// choice; and flipping the narrowest near-tie of the prompt moves the
// next position and leaves the positions before the token unchanged.
func TestFP8TP2Emulation(t *testing.T) {
	const name = "qwen3_moe"
	dir := shared.Path(t, "models/reference-tiny/"+name)
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	// The emulation attends with native: so must the engine, since e4m3
	// rounding of the next layer's input can turn another backend's
	// last-bit differences into a visible step.
	want := scoreLogprobs(t, engine.Config{ModelPath: dir, Quantization: "fp8", TPSize: 2, AttentionBackend: "native"}, ref.InputIDs)
	e := emulateFP8(t, dir, ref.InputIDs, 2)
	if d := maxDelta(e.base.logprobs, want); d > 1e-4 {
		t.Fatalf("the emulation is %.3g from the engine's FP8 reference path at TP=2", d)
	}
	layer, tok, narrowest := -1, -1, math.Inf(1)
	for l, r := range e.base.routes {
		for i := range len(ref.InputIDs) - 1 {
			if _, m := topK(r.logits.Row(i), r.k); m < narrowest {
				layer, tok, narrowest = l, i, m
			}
		}
	}
	if layer < 0 {
		t.Fatal("no MoE layer recorded")
	}
	flipped := fp8TP(t, dir, ref.InputIDs, 2, &routeFlip{layer: layer, tok: tok})
	t.Logf("narrowest top-%d margin %.2e: MoE layer %d, token %d; flipped, position %d moves %.3g",
		e.base.routes[layer].k, narrowest, layer, tok, tok+1, math.Abs(flipped.logprobs[tok]-e.base.logprobs[tok]))
	if d := maxDelta(flipped.logprobs[:tok], e.base.logprobs[:tok]); d != 0 {
		t.Errorf("flipping token %d moved an earlier position by %.3g", tok, d)
	}
	if flipped.logprobs[tok] == e.base.logprobs[tok] {
		t.Errorf("flipping token %d's choice in layer %d did not move position %d", tok, layer, tok+1)
	}
	// explain names the flip where a run lands as the flipped reference
	// does, and nothing where a run lands elsewhere.
	p, ref0 := tok+1, e.base.logprobs[tok]
	if why, ok := e.explain(p, flipped.logprobs[tok], ref0); !ok || !strings.Contains(why, fmt.Sprintf("MoE layer %d", layer)) {
		t.Errorf("position %d as flipped: explained %v: %s", p, ok, why)
	}
	away := ref0 - 3*(flipped.logprobs[tok]-ref0)
	if why, ok := e.explain(p, away, ref0); ok {
		t.Errorf("position %d at %.4g (the flip lands at %.4g): explained: %s", p, away, flipped.logprobs[tok], why)
	}
}
