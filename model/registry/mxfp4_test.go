package registry

import (
	"math"
	"testing"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// TestMXFP4Experts: GPT-OSS with MXFP4 experts (blocks and scales, as
// published) loads dequantized: its logits equal, bit for bit, those of
// the same model with the dequantized values stored plainly, and its
// prompt log-probabilities stay near transformers' on the unquantized
// weights, within what 4-bit weights cost.
func TestMXFP4Experts(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/gpt_oss")
	ref := modeltest.LoadReference(t, dir)
	quantized, dequantized := t.TempDir(), t.TempDir()
	if err := random.WriteMXFP4(dir, quantized, dequantized); err != nil {
		t.Fatal(err)
	}
	ck, got := promptLogits(t, quantized, ref.InputIDs)
	if ck.Weights.Has("model.layers.0.mlp.experts.gate_up_proj_blocks") || !ck.Weights.Has("model.layers.0.mlp.experts.7.up_proj.bias") {
		t.Error("the MXFP4 stacks must be presented as per-expert tensors")
	}
	_, want := promptLogits(t, dequantized, ref.InputIDs)
	if d := maxDiff(want, got); d != 0 {
		t.Errorf("MXFP4 load vs dequantized checkpoint: max |Δ logit| = %.3g, want 0", d)
	}
	// Dequantized on demand (as the engine has it on the CPU), the same.
	lazy, err := model.Open(quantized)
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	if !model.DequantizeLazily(lazy.Weights) {
		t.Fatal("an MXFP4 checkpoint's weights do not dequantize lazily")
	}
	m, err := Build(lazy, cpu.NewOps(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(want, modeltest.PromptLogits(t, m, ref.InputIDs)); d != 0 {
		t.Errorf("MXFP4 dequantized lazily vs dequantized checkpoint: max |Δ logit| = %.3g, want 0", d)
	}
	// Served compact (as the engine has it for a GPU that keeps MXFP4,
	// model.ServeCompact), the experts are tensor.MXFP4 blocks, which the
	// CPU widens to float32: the same values through float32 kernels.
	compact, err := model.Open(quantized)
	if err != nil {
		t.Fatal(err)
	}
	defer compact.Close()
	if !model.ServeCompact(compact.Weights, func(d tensor.DType) bool { return d == tensor.MXFP4 }) {
		t.Fatal("an MXFP4 checkpoint has no tensors to serve compact")
	}
	if w, err := compact.Weights.Tensor("model.layers.0.mlp.experts.3.gate_proj.weight"); err != nil || w.DType != tensor.MXFP4 || w.Shape[0] != 160 {
		t.Fatalf("compact expert: %v %v %v, want MXFP4 [160, 64]", w.DType, w.Shape, err)
	}
	if m, err = Build(compact, cpu.NewOps(nil)); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(want, modeltest.PromptLogits(t, m, ref.InputIDs)); d > 1e-4 {
		t.Errorf("MXFP4 served compact vs dequantized checkpoint: max |Δ logit| = %.3g, want ≤ 1e-4", d)
	}
	_, full := promptLogits(t, dir, ref.InputIDs)
	lp, worst, sum := make([]float32, len(got[0])), 0.0, 0.0
	for i, want := range ref.PromptLogprobs {
		sample.LogSoftmax(got[i], lp)
		d := math.Abs(float64(lp[ref.InputIDs[i+1]]) - want)
		worst, sum = max(worst, d), sum+d
	}
	t.Logf("MXFP4 vs transformers float32: prompt logprobs max |Δ| %.3g, mean %.3g; logits max |Δ| %.3g", worst, sum/float64(len(ref.PromptLogprobs)), maxDiff(full, got))
}
