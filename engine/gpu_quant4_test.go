package engine_test

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/model/safetensors"
)

// TestGPUQuant4: reference models written by random.WriteAWQ (AutoAWQ's
// GEMM layout, groups of 32) and random.WriteMXFP4 (GPT-OSS's experts as
// published) run on the GPU with those matrices compact, against the CPU
// engine serving their dequantized twins in float32:
//
//   - the GPU holds the compact bytes: at most the dequantized twin's
//     float32 bytes less what compaction saves on the quantized matrices;
//   - prompt log-probabilities through the dequant-GEMV kernels (chunks of
//     8 tokens: float32 products of the exact weights; MXFP4's experts
//     grouped through moe_qgemv) within 2e-4 of the reference, as float32
//     weights are held on the GPU (TestGPUReferenceModels);
//   - through the widened bf16 GEMM (a whole prompt: weights and x rounded
//     to bf16) within twice what rounding the weights alone to bf16 costs
//     the dequantized twin on the CPU (--dtype bfloat16; measured here:
//     0.11-1.96 at worst, the large logits of these tiny random models
//     amplifying it), at worst and on average;
//   - greedy decoding gives the reference's tokens, except at a near-tie.
func TestGPUQuant4(t *testing.T) {
	needGPU(t)
	for _, tc := range []struct{ format, model string }{
		{"awq", "llama_gqa"}, {"awq", "qwen2_bias"}, {"awq", "qwen3_moe"}, {"mxfp4", "gpt_oss"},
	} {
		t.Run(tc.format+"/"+tc.model, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+tc.model)
			var ref reference
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)
			quantized, dequantized := t.TempDir(), t.TempDir()
			// What compaction saves: the quantized matrices' float32 bytes
			// less their compact ones (20 bytes per 32 values in AWQ4_G32,
			// 17 in MXFP4).
			var names []string
			var per32 int
			switch tc.format {
			case "awq":
				var err error
				if names, err = random.WriteAWQ(dir, quantized, dequantized, 32); err != nil {
					t.Fatal(err)
				}
				per32 = 20
			case "mxfp4":
				if err := random.WriteMXFP4(dir, quantized, dequantized); err != nil {
					t.Fatal(err)
				}
				per32 = 17
			}
			f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			var saved int64
			for _, n := range f.Names() {
				if slices.Contains(names, n) || (tc.format == "mxfp4" && (strings.HasSuffix(n, "experts.gate_up_proj") || strings.HasSuffix(n, "experts.down_proj"))) {
					w, err := f.Tensor(n)
					if err != nil {
						t.Fatal(err)
					}
					saved += int64(w.NumElements() * (4*32 - per32) / 32)
				}
			}
			f.Close()
			cpu := engine.Config{ModelPath: dequantized, Device: "cpu", DType: "float32", KVCacheDType: "float32", MaxRunningRequests: 2, ContextLength: 256, KVCacheTokens: 1024}
			plain := cpu
			plain.Device = "cuda"
			// DType auto: a dtype named would convert the quantized matrices.
			gpu := plain
			gpu.ModelPath, gpu.DType = quantized, ""

			e := newEngine(t, plain)
			f32 := e.DeviceWeightBytes()
			e.Close()
			e = newEngine(t, gpu)
			held := e.DeviceWeightBytes()
			e.Close()
			t.Logf("GPU weights: %d bytes compact, %d for the float32 twin (compaction saves %d)", held, f32, saved)
			if held > f32-saved+64<<10 {
				t.Errorf("the GPU holds %d bytes for the quantized model, want at most %d", held, f32-saved)
			}

			want := scoreLogprobs(t, cpu, ref.InputIDs)
			cpuBF16 := cpu
			cpuBF16.DType = "bfloat16"
			bf16 := scoreLogprobs(t, cpuBF16, ref.InputIDs)
			bf16Max, bf16Mean := maxDelta(bf16, want), meanDelta(bf16, want)
			for _, chunk := range []int{8, 0} {
				c := gpu
				c.ChunkedPrefillSize = chunk
				got := scoreLogprobs(t, c, ref.InputIDs)
				worst, mean := maxDelta(got, want), meanDelta(got, want)
				bound, meanBound := 2e-4, 2e-4
				if chunk == 0 {
					bound, meanBound = 2*bf16Max, 2*bf16Mean
				}
				t.Logf("chunk %d: max |Δ prompt logprob| %.2e (mean %.2e); bf16 weights on the CPU %.2e (mean %.2e)", chunk, worst, mean, bf16Max, bf16Mean)
				if worst > bound || mean > meanBound || math.IsNaN(worst) {
					t.Errorf("chunk %d: prompt log-probabilities off the reference by up to %.3g, mean %.3g (bounds %.3g, %.3g)", chunk, worst, mean, bound, meanBound)
				}
			}

			const n = 16
			g8 := gpu
			g8.ChunkedPrefillSize = 8
			prompt := engine.Request{InputIDs: ref.InputIDs[:8]}
			gotIDs, _ := generateTop2(t, g8, prompt, n)
			wantIDs, top := generateTop2(t, cpu, prompt, n)
			sameGreedy(t, gotIDs, wantIDs, top, n)
		})
	}
}
