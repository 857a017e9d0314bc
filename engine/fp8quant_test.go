package engine_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestFP8Quantization: --quantization fp8 on the CPU's reference path
// (the numerics a GPU's FP8 kernels have, device.FP8Path) against
// transformers' float32 prompt log-probabilities of the llama/qwen family
// of reference-tiny. The prompt goes in one prefill (per-token e4m3
// activations, the FP8 GEMM's path) and in chunks of 6 tokens (bf16
// activations, the decode GEMV's path). These tiny random models have
// large logits, so e4m3's 2^-4 relative rounding moves a log-probability
// by up to about 5 (mean under 1); the bounds sit above what was measured
// and far below what a wrong scale or a skipped quantisation gives.
func TestFP8Quantization(t *testing.T) {
	for _, name := range fp8Models {
		t.Run(name, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+name)
			var ref reference
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)
			f32 := scoreLogprobs(t, engine.Config{ModelPath: dir}, ref.InputIDs)
			bf16 := scoreLogprobs(t, engine.Config{ModelPath: dir, DType: "bfloat16"}, ref.InputIDs)
			t.Logf("max |Δ prompt logprob| from transformers: float32 %.2g, bfloat16 weights %.3g", maxDelta(f32, ref.PromptLogprobs), maxDelta(bf16, ref.PromptLogprobs))
			for _, tc := range []struct {
				path  string
				chunk int
			}{{"e4m3 activations (one prefill)", 0}, {"bf16 activations (chunks of 6)", 6}} {
				got := scoreLogprobs(t, engine.Config{ModelPath: dir, Quantization: "fp8", ChunkedPrefillSize: tc.chunk}, ref.InputIDs)
				worst, mean := maxDelta(got, ref.PromptLogprobs), meanDelta(got, ref.PromptLogprobs)
				t.Logf("fp8, %s: max |Δ| %.3g, mean %.3g over %d tokens", tc.path, worst, mean, len(got))
				if d := maxDelta(got, f32); d < 1e-3 {
					t.Errorf("fp8, %s: within %.2g of float32: nothing was quantised", tc.path, d)
				}
				if worst > fp8MaxBound || mean > fp8MeanBound {
					t.Errorf("fp8, %s: max |Δ| %.3g (bound %v), mean %.3g (bound %v)", tc.path, worst, fp8MaxBound, mean, fp8MeanBound)
				}
			}
		})
	}
}

// fp8Models are the reference-tiny models the FP8 tests quantise.
var fp8Models = []string{"llama_gqa", "llama_mha_tied", "mistral_swa", "qwen2_bias", "qwen3_qknorm", "qwen3_yarn", "qwen2_moe", "qwen3_moe", "mixtral", "phi3"}

// fp8MaxBound and fp8MeanBound bound the distance of --quantization fp8
// from transformers' float32 prompt log-probabilities on reference-tiny.
const fp8MaxBound, fp8MeanBound = 6, 1

func meanDelta(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += math.Abs(a[i] - b[i])
	}
	return s / float64(len(a))
}

// TestTPFP8Quantization: --quantization fp8 at TP=2 on the CPU's reference
// path. Each rank quantises its own slice: the column-parallel layers'
// rows keep the scales they have at TP=1, the row-parallel layers' (o,
// down) rows get the scales of the rank's columns, so TP=2 is not TP=1
// to the bit but as close to transformers (the same bounds as
// TestFP8Quantization), and far from TP=2 in float32 (it was quantised).
func TestTPFP8Quantization(t *testing.T) {
	for _, name := range []string{"llama_gqa", "qwen2_bias", "phi3", "qwen3_moe"} {
		t.Run(name, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+name)
			var ref reference
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)
			f32 := scoreLogprobs(t, engine.Config{ModelPath: dir, TPSize: 2}, ref.InputIDs)
			one := scoreLogprobs(t, engine.Config{ModelPath: dir, Quantization: "fp8"}, ref.InputIDs)
			two := scoreLogprobs(t, engine.Config{ModelPath: dir, Quantization: "fp8", TPSize: 2}, ref.InputIDs)
			worst, mean := maxDelta(two, ref.PromptLogprobs), meanDelta(two, ref.PromptLogprobs)
			t.Logf("fp8 TP=2: max |Δ| from transformers %.3g, mean %.3g (TP=1: %.3g, %.3g); max |Δ| from TP=1 fp8 %.3g",
				worst, mean, maxDelta(one, ref.PromptLogprobs), meanDelta(one, ref.PromptLogprobs), maxDelta(two, one))
			if d := maxDelta(two, f32); d < 1e-3 {
				t.Errorf("fp8 TP=2 within %.2g of float32 TP=2: nothing was quantised", d)
			}
			if worst > fp8MaxBound || mean > fp8MeanBound {
				t.Errorf("fp8 TP=2: max |Δ| %.3g (bound %v), mean %.3g (bound %v)", worst, fp8MaxBound, mean, fp8MeanBound)
			}
		})
	}
}
