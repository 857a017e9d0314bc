package engine_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestGPUFP8Quantization: --quantization fp8 on the GPU (the FP8 GEMM for
// a whole prompt, the FP8 GEMV for chunks of 6) gives the prompt
// log-probabilities of the CPU's reference path for the same path, and
// lies as near transformers' float32 values as TestFP8Quantization
// bounds the reference. The two differ by float32 summation order, which
// now and then moves an activation across an e4m3 rounding boundary, so
// the bounds are loose beside float32's 2e-4. Skipped on a GPU without FP8
// (compute capability below 8.9).
func TestGPUFP8Quantization(t *testing.T) {
	needGPU(t)
	for _, name := range fp8Models {
		for _, chunk := range []int{0, 6} {
			t.Run(fmt.Sprintf("%s/chunk%d", name, chunk), func(t *testing.T) { checkGPUFP8(t, name, chunk, 1) })
		}
	}
}

// TestGPUTPFP8Quantization is TestGPUFP8Quantization at TP=2 (each rank
// quantises its own slice, see TestTPFP8Quantization), against the CPU's
// reference path at TP=2, whose slices and scales are the same.
func TestGPUTPFP8Quantization(t *testing.T) {
	needGPUs(t, 2)
	for _, name := range fp8Models {
		for _, chunk := range []int{0, 6} {
			t.Run(fmt.Sprintf("%s/chunk%d", name, chunk), func(t *testing.T) { checkGPUFP8(t, name, chunk, 2) })
		}
	}
}

// checkGPUFP8 is one model and prefill chunk of the GPU FP8 tests at tp
// ranks.
func checkGPUFP8(t *testing.T, name string, chunk, tp int) {
	// Bounds per path: the GEMV (chunks of 6) computes in float32 like
	// the reference and stayed within 0.027 (mean 0.004; one H200). A
	// whole prompt rounds every linear layer's x to e4m3 (FP8Scaled):
	// where the GPU's attention or sums put a value a hair from the
	// reference's, its e4m3 rounding (3 mantissa bits) can tip the other
	// way and move it by a sixteenth, which the layers carry on. With
	// q/k/v and gate/up in e4m3 as well as o and down, that reached 2.02
	// (mean 0.31, mixtral; the dense models 0.12-0.63, means 0.03-0.13)
	// on one H200. The CPU path alone moves as far between a whole prompt
	// and chunks of 32 on the mixtures (mixtral max 2.81, mean 0.30),
	// whose experts' rows take bf16 or e4m3 x by their count. Since the
	// e4m3 GEMMs' raw sums are rounded to bf16 before their scales (as
	// vLLM's bf16 GEMM outputs are), many more such roundings tip: 3.52
	// (qwen2_moe), mean 0.456 (mixtral) on one H100, a different draw of
	// FP8's error rather than a larger one (the emulated GPU's logits are
	// 3.54-3.63 from float32 where the CPU path's are 3.54,
	// TestFakeGPUFP8Models); the distance from transformers below bounds
	// the quality either way.
	refBounds := map[int][2]float64{6: {0.05, 0.005}, 0: {4, 0.6}}
	dir := shared.Path(t, "models/reference-tiny/"+name)
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	cfg := engine.Config{ModelPath: dir, Device: "cuda", Quantization: "fp8", DType: "float32", KVCacheDType: "float32",
		ChunkedPrefillSize: chunk, MaxRunningRequests: 4, ContextLength: 256, TPSize: tp}
	e, err := engine.New(cfg)
	if err != nil && strings.Contains(err.Error(), "no FP8 kernels") {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
	e.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float64, len(ref.InputIDs)-1)
	for i := range got {
		got[i] = float64(*res.PromptLogprobs[i+1])
	}
	cfg.Device = "cpu"
	want := scoreLogprobs(t, cfg, ref.InputIDs)
	worst, mean := maxDelta(got, want), meanDelta(got, want)
	t.Logf("max |Δ prompt logprob| from the CPU reference %.2e (mean %.2e), from transformers %.3g (mean %.3g; the CPU reference's %.3g, mean %.3g)",
		worst, mean, maxDelta(got, ref.PromptLogprobs), meanDelta(got, ref.PromptLogprobs), maxDelta(want, ref.PromptLogprobs), meanDelta(want, ref.PromptLogprobs))
	refMax, refMean := refBounds[chunk][0], refBounds[chunk][1]
	if mean > refMean {
		t.Errorf("from the CPU reference path: max |Δ| %.3g (bound %v), mean %.3g (bound %v)", worst, refMax, mean, refMean)
	}
	// At TP=2 a position beyond refMax passes only where a router near-tie
	// at the token before it explains it: the reference path with that
	// choice flipped lands where the GPU does (fp8Emulation.explain).
	var emu *fp8Emulation
	for i := range got {
		p := i + 1
		if math.Abs(got[i]-want[i]) <= refMax {
			continue
		}
		if tp != 2 {
			t.Errorf("position %d: |Δ| %.3g from the CPU reference path beyond the bound %v", p, math.Abs(got[i]-want[i]), refMax)
			continue
		}
		if emu == nil {
			emu = emulateFP8(t, dir, ref.InputIDs, tp)
		}
		why, ok := emu.explain(p, got[i], want[i])
		if !ok {
			t.Errorf("position %d: |Δ| %.3g from the CPU reference path beyond the bound %v, unexplained: %s", p, math.Abs(got[i]-want[i]), refMax, why)
			continue
		}
		t.Logf("position %d: |Δ| %.3g from the CPU reference path beyond the bound %v: %s", p, math.Abs(got[i]-want[i]), refMax, why)
	}
	if d, m := maxDelta(got, ref.PromptLogprobs), meanDelta(got, ref.PromptLogprobs); d > fp8MaxBound || m > fp8MeanBound {
		t.Errorf("from transformers: max |Δ| %.3g (bound %v), mean %.3g (bound %v)", d, fp8MaxBound, m, fp8MeanBound)
	}
}
