package engine_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestPureGoKernels reruns the stories260K golden and a reference model on
// the pure-Go kernels (the other tests run the assembly where the CPU has
// it), so both kernel paths meet the same numerics.
func TestPureGoKernels(t *testing.T) {
	was := cpu.SetAssembly(false)
	defer cpu.SetAssembly(was)
	t.Run("stories260K", func(t *testing.T) {
		var golden struct {
			OutputIDs []int `json:"output_ids"`
		}
		readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
		e := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.bin"), AttentionBackend: "native"})
		res, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range golden.OutputIDs {
			if res.OutputIDs[i] != want {
				t.Fatalf("token %d: got %d, want %d", i, res.OutputIDs[i], want)
			}
		}
	})
	t.Run("llama_gqa", func(t *testing.T) {
		dir := shared.Path(t, "models/reference-tiny/llama_gqa")
		var ref reference
		readJSON(t, filepath.Join(dir, "reference.json"), &ref)
		checkReference(t, newEngine(t, engine.Config{ModelPath: dir, AttentionBackend: "native"}), ref)
	})
}

// TestWeightDTypes serves a reference model converted at load and checks
// its prompt log-probabilities against transformers' float32 ones, within
// what the narrower weights cost, and the bytes a decode step reads.
func TestWeightDTypes(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	var f32Bytes int64
	for _, tc := range []struct {
		dtype, quant string
		tol          float64 // mean |Δ logprob|; the max may be 5× that
		bytesRatio   float64 // of the float32 bytes
	}{
		// This model's weights are large (initializer range 0.25), so its
		// logits magnify rounding: bf16 keeps 8 significant bits, f16 11,
		// Q8_0 about 8 for weights and activations alike.
		{"float32", "", 1e-5, 1},
		{"bfloat16", "", 0.06, 0.5},
		{"float16", "", 0.008, 0.5},
		{"auto", "q8_0", 0.2, 34.0 / 128},
	} {
		t.Run(tc.dtype+"/"+tc.quant, func(t *testing.T) {
			e := newEngine(t, engine.Config{ModelPath: dir, DType: tc.dtype, Quantization: tc.quant})
			res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
			if err != nil {
				t.Fatal(err)
			}
			worst, mean := 0.0, 0.0
			for i, want := range ref.PromptLogprobs {
				d := math.Abs(float64(*res.PromptLogprobs[i+1]) - want)
				worst = math.Max(worst, d)
				mean += d / float64(len(ref.PromptLogprobs))
			}
			t.Logf("|Δ prompt logprob|: max %.2e, mean %.2e", worst, mean)
			if mean > tc.tol || worst > 5*tc.tol {
				t.Errorf("|Δ prompt logprob|: max %.3g, mean %.3g; want a mean ≤ %g, a max ≤ %g", worst, mean, tc.tol, 5*tc.tol)
			}
			b := e.WeightBytesPerToken()
			if tc.dtype == "float32" {
				f32Bytes = b
			} else if f32Bytes > 0 && math.Abs(float64(b)/float64(f32Bytes)-tc.bytesRatio) > 1e-9 {
				t.Errorf("weights per token %d bytes, %.4f of float32's, want %.4f", b, float64(b)/float64(f32Bytes), tc.bytesRatio)
			}
		})
	}
	for _, bad := range []engine.Config{{DType: "int4"}, {DType: "q8_0"}, {Quantization: "q4_0"}} {
		bad.ModelPath = dir
		if e, err := engine.New(bad); err == nil {
			e.Close()
			t.Errorf("engine.New accepted dtype %q quantization %q", bad.DType, bad.Quantization)
		}
	}
}

// TestMoEWeightBytes: the routed experts' share of the weights, from the
// configs' shapes (float32): a decode step of one token reads the dense
// weights and top-k of each layer's experts, a large batch nearly all.
func TestMoEWeightBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// per expert and MoE layer, in float32 values: gate, up and down,
		// and GPT-OSS's biases.
		perExpert func(h, inter int) int
	}{
		{"qwen3_moe", func(h, inter int) int { return 3 * h * inter }},
		{"qwen2_moe", func(h, inter int) int { return 3 * h * inter }},
		{"mixtral", func(h, inter int) int { return 3 * h * inter }},
		{"gpt_oss", func(h, inter int) int { return 3*h*inter + 2*inter + h }},
		{"llama_gqa", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/reference-tiny/"+tc.name), KVCacheTokens: 256})
			cfg := e.ModelConfig()
			wb := e.WeightBytes()
			if wb.Total != e.WeightBytesPerToken() {
				t.Errorf("total %d, WeightBytesPerToken %d", wb.Total, e.WeightBytesPerToken())
			}
			if tc.perExpert == nil {
				if wb.Routed != 0 || wb.ActivePerToken() != wb.Total || wb.PerStep(64) != wb.Total {
					t.Errorf("dense model: %+v, active %d", wb, wb.ActivePerToken())
				}
				return
			}
			layers := 0
			for i := range cfg.NumLayers {
				if cfg.MoE.IsMoELayer(i) {
					layers++
				}
			}
			e8, k := cfg.MoE.NumRoutedExperts, cfg.MoE.NumExpertsPerTok
			want := int64(4 * layers * e8 * tc.perExpert(cfg.HiddenSize, cfg.MoE.IntermediateSize))
			if wb.Routed != want || wb.Experts != e8 || wb.ExpertsPerToken != k {
				t.Fatalf("routed %d bytes of %d experts (top %d), want %d of %d (top %d)", wb.Routed, wb.Experts, wb.ExpertsPerToken, want, e8, k)
			}
			dense := wb.Total - wb.Routed
			if got, want := wb.ActivePerToken(), dense+wb.Routed*int64(k)/int64(e8); got != want {
				t.Errorf("active per token %d, want %d", got, want)
			}
			if got := wb.PerStep(1000); got != wb.Total {
				t.Errorf("a 1,000-token step reads %d, want all %d", got, wb.Total)
			}
			if a, b := wb.PerStep(2), wb.PerStep(4); !(wb.ActivePerToken() < a && a < b && b < wb.Total) {
				t.Errorf("steps of 1, 2, 4 tokens read %d, %d, %d of %d", wb.ActivePerToken(), a, b, wb.Total)
			}
		})
	}
}
