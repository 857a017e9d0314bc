package engine_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

// TestGPUQuantGGUF: stories-size GGUF files in Q8_0, Q4_K_M and Q5_K_M
// (Q4_K or Q5_K with Q6_K mixed in, as llama.cpp writes them) run on the
// GPU with their
// matrices compact, against the CPU engine serving the same file
// dequantised exactly to float32 (the reference):
//
//   - the device holds about the file's bytes, not bf16's (logged);
//   - prompt log-probabilities through qgemv (chunks of 8 tokens, and of
//     16 and 32 where the integer kernels take them, cuda.QuantDecodeRows:
//     float32 products of the exact weights) stay within 2e-3 of the
//     reference,
//     float32 summation order apart; through the widened bf16 GEMM (a
//     whole prompt: x and W rounded to bf16, 2⁻⁸ a product) within 1,
//     these random models amplifying it (the same files on the emulated
//     GPU, device/cuda's TestFakeGPUQuantModels, move logits of about 9
//     by 0.36);
//   - greedy generation gives the reference's tokens, except at a
//     near-tie of its two best (reported with the gap).
func TestGPUQuantGGUF(t *testing.T) {
	needGPU(t)
	// The decode kernels at float32's accuracy (three limbs); GGUF's
	// default, one, is held to its own bound below.
	pinQGemvLimbs(t, 3)
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		shape random.Shape
		dtype tensor.DType
		mix   bool
	}{
		{"Q8_0", random.Presets["stories42M"], tensor.Q8_0, false},
		// stories42M with an MLP of whole 256-value super-blocks, so
		// that every matrix is stored in the K-quant.
		{"Q4_K_M", func() random.Shape { s := random.Presets["stories42M"]; s.Hidden = 1536; return s }(), tensor.Q4_K, true},
		{"Q5_K_M", func() random.Shape { s := random.Presets["stories42M"]; s.Hidden = 1536; return s }(), tensor.Q5_K, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".gguf")
			if err := random.Write(path, random.Options{Shape: tc.shape, Format: "gguf", DType: tc.dtype, MixQ6K: tc.mix, Seed: 24, Std: 0.08}); err != nil {
				t.Fatal(err)
			}
			stored, bf16 := ggufBytes(t, path)
			// A fixed KV cache: several engines of the test are open at once.
			ref := engine.Config{ModelPath: path, Device: "cpu", DType: "float32", KVCacheDType: "float32", MaxRunningRequests: 2, ContextLength: 256, KVCacheTokens: 1024}
			gpu := ref
			gpu.Device, gpu.DType = "cuda", ""

			e := newEngine(t, gpu)
			held := e.DeviceWeightBytes()
			t.Logf("GPU weights: %d bytes; the file's tensors %d; in bf16 they would be %d", held, stored, bf16)
			// RoPE tables and norms in float32 add little; alignment 15
			// bytes a matrix.
			if held > stored+stored/50+(1<<20) {
				t.Errorf("the GPU holds %d bytes of weights for %d stored", held, stored)
			}
			e.Close()

			ids := make([]int, 48)
			for i := range ids {
				ids[i] = 3 + i*997%(tc.shape.Vocab-3)
			}
			want := scoreLogprobs(t, ref, ids)
			for _, chunk := range []int{8, 16, 32, 0} {
				c := gpu
				c.ChunkedPrefillSize = chunk
				got := scoreLogprobs(t, c, ids)
				worst, mean := maxDelta(got, want), meanDelta(got, want)
				bound := 2e-3
				if chunk == 0 || chunk > cuda.QuantDecodeRows() {
					bound = 1
				}
				t.Logf("chunk %d: max |Δ prompt logprob| %.2e (mean %.2e)", chunk, worst, mean)
				if worst > bound {
					t.Errorf("chunk %d: prompt log-probabilities off the reference by up to %.3g (bound %v)", chunk, worst, bound)
				}
			}
			// The decode kernels with x staged as fewer limbs
			// (GOSLING_QGEMV_LIMBS): x_i within 2^(2−8L) of its 32-value
			// unit's largest magnitude (device/cuda's qiBound), against
			// the widened path's bf16 x and W, 2^−8 a product, bound 1
			// above: the bound scaled by that ratio, 2^(10−8L) (4 for one
			// limb, 1/64 for two), 2e-3 at least.
			for _, limbs := range []int{1, 2} {
				prev, err := cuda.SetQGemvLimbs(limbs)
				if err != nil {
					t.Fatal(err)
				}
				for _, chunk := range []int{8, cuda.QuantDecodeRows()} {
					c := gpu
					c.ChunkedPrefillSize = chunk
					got := scoreLogprobs(t, c, ids)
					worst, mean := maxDelta(got, want), meanDelta(got, want)
					bound := max(2e-3, math.Ldexp(1, 10-8*limbs))
					t.Logf("%d limbs, chunk %d: max |Δ prompt logprob| %.2e (mean %.2e)", limbs, chunk, worst, mean)
					if worst > bound || math.IsNaN(worst) {
						t.Errorf("%d limbs, chunk %d: prompt log-probabilities off the reference by up to %.3g (bound %v)", limbs, chunk, worst, bound)
					}
				}
				if _, err := cuda.SetQGemvLimbs(prev); err != nil {
					t.Fatal(err)
				}
			}

			// Greedy through the compact kernels alone (prompt chunks of 8
			// rows, and of cuda.QuantDecodeRows — 16 on the integer
			// kernels' pre-quantised x — take the decode kernels, within
			// 2e-3 above): the widened bf16 prefill moves logprobs by up
			// to ~0.17 here, more than the tie margin below.
			const n = 32
			prompt := engine.Request{Prompt: "Once upon a time"}
			wantIDs, top := generateTop2(t, ref, prompt, n)
			for _, chunk := range []int{8, cuda.QuantDecodeRows()} {
				g := gpu
				g.ChunkedPrefillSize = chunk
				gotIDs, _ := generateTop2(t, g, prompt, n)
				sameGreedy(t, gotIDs, wantIDs, top, n)
			}
		})
	}
}

// ggufBytes is what a file's tensors take as stored, and in bf16.
func ggufBytes(t *testing.T, path string) (stored, bf16 int64) {
	t.Helper()
	ck, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, name := range ck.Weights.Names() {
		w, err := ck.Weights.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		n := 1
		for _, d := range w.Shape {
			n *= d
		}
		rb, err := w.DType.RowBytes(w.Shape[len(w.Shape)-1])
		if err != nil {
			t.Fatal(err)
		}
		stored += int64(rb) * int64(n/w.Shape[len(w.Shape)-1])
		bf16 += 2 * int64(n)
	}
	return stored, bf16
}

// sameGreedy checks n greedy tokens against the reference's, except at a
// near-tie of the reference's two best (top: its log-probabilities), where
// the first divergence is reported with the gap and the rest not compared.
func sameGreedy(t *testing.T, got, want []int, top [][2]float64, n int) {
	t.Helper()
	if len(got) != n || len(want) != n {
		t.Fatalf("generated %d and %d tokens, want %d", len(got), len(want), n)
	}
	for i := range want {
		if got[i] != want[i] {
			gap := float64(top[i][0] - top[i][1])
			t.Logf("first divergence at token %d: %d against the reference's %d, whose top-two gap is %.4f", i, got[i], want[i], gap)
			if gap > 0.02 {
				t.Errorf("diverged at token %d (%v vs %v) with a clear reference gap %.4f", i, got[:i+1], want[:i+1], gap)
			}
			return
		}
	}
	t.Logf("%d greedy tokens identical to the float32 reference", n)
}

// generateTop2 decodes n tokens greedily from req's prompt and returns
// them with each step's two best log-probabilities.
func generateTop2(t *testing.T, cfg engine.Config, req engine.Request, n int) ([]int, [][2]float64) {
	t.Helper()
	e := newEngine(t, cfg)
	req.Sampling = greedy(n)
	req.Sampling.IgnoreEOS = true
	req.TopLogprobs = 2
	res, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	top := make([][2]float64, len(res.TopLogprobs))
	for i, tl := range res.TopLogprobs {
		if len(tl) < 2 {
			t.Fatalf("step %d: %d top log-probabilities", i, len(tl))
		}
		top[i] = [2]float64{float64(tl[0].Logprob), float64(tl[1].Logprob)}
	}
	if math.IsNaN(top[0][0]) {
		t.Fatal("NaN log-probability")
	}
	return res.OutputIDs, top
}

// pinQGemvLimbs stages x for the integer decode kernels as limbs int8
// limbs (cuda.SetQGemvLimbs) for the rest of t.
func pinQGemvLimbs(t *testing.T, limbs int) {
	t.Helper()
	prev, err := cuda.SetQGemvLimbs(limbs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cuda.SetQGemvLimbs(prev) })
}
