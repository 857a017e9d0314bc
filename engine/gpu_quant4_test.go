package engine_test

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/model/safetensors"
)

// TestGPUQuant4: reference models written by random.WriteAWQ (AutoAWQ's
// GEMM layout, groups of 32), random.WriteGPTQ (GPTQ's layout, groups of
// 32 symmetric in the original zero-point format, and one group per row
// min-max in gptq_v2's; both repacked at load into the AWQ4 blocks the
// AWQ kernels read) and random.WriteMXFP4 (GPT-OSS's experts as
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
		{"gptq", "llama_gqa"}, {"gptq-row", "qwen2_bias"},
	} {
		t.Run(tc.format+"/"+tc.model, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+tc.model)
			var ref reference
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)
			quantized, dequantized := t.TempDir(), t.TempDir()
			// What compaction saves: the quantized matrices' float32 bytes
			// less their compact ones (per 32 values of a row of cols: 20
			// bytes in AWQ4_G32, 18 in G64, 17 in G128 and MXFP4).
			var names []string
			per32 := func(int) int { return 20 }
			var err error
			switch tc.format {
			case "awq":
				names, err = random.WriteAWQ(dir, quantized, dequantized, 32)
			case "gptq":
				names, err = random.WriteGPTQ(dir, quantized, dequantized, random.GPTQOptions{Group: 32, Sym: true})
			case "gptq-row":
				names, err = random.WriteGPTQ(dir, quantized, dequantized, random.GPTQOptions{Group: -1, V2: true})
				per32 = func(cols int) int {
					for _, b := range []int{128, 64, 32} {
						if cols%b == 0 {
							return (4 + b/2) * 32 / b
						}
					}
					return 0
				}
			case "mxfp4":
				err = random.WriteMXFP4(dir, quantized, dequantized)
				per32 = func(int) int { return 17 }
			}
			if err != nil {
				t.Fatal(err)
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
					saved += int64(w.NumElements() * (4*32 - per32(w.Shape[len(w.Shape)-1])) / 32)
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

			// The decode kernels with x staged as fewer limbs
			// (GOSLING_QGEMV_LIMBS; MXFP4's experts take moe_qgemv, float):
			// x_i within 2^(2−8L) of its unit's largest magnitude
			// (device/cuda's qiBound) against the 2^−9 that bf16 weights
			// cost a product, so twice the bf16 deltas scaled by
			// 2^(11−8L) (8 for one limb, 1/32 for two), 2e-4 at least.
			for _, limbs := range []int{1, 2} {
				prev, err := cuda.SetQGemvLimbs(limbs)
				if err != nil {
					t.Fatal(err)
				}
				c := gpu
				c.ChunkedPrefillSize = 8
				got := scoreLogprobs(t, c, ref.InputIDs)
				worst, mean := maxDelta(got, want), meanDelta(got, want)
				scale := 2 * math.Ldexp(1, 11-8*limbs)
				bound, meanBound := max(2e-4, scale*bf16Max), max(2e-4, scale*bf16Mean)
				t.Logf("%d limbs, chunk 8: max |Δ prompt logprob| %.2e (mean %.2e)", limbs, worst, mean)
				if worst > bound || mean > meanBound || math.IsNaN(worst) {
					t.Errorf("%d limbs, chunk 8: prompt log-probabilities off the reference by up to %.3g, mean %.3g (bounds %.3g, %.3g)", limbs, worst, mean, bound, meanBound)
				}
				if _, err := cuda.SetQGemvLimbs(prev); err != nil {
					t.Fatal(err)
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
