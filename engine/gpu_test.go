package engine_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device/cuda"
	_ "github.com/gosling-ai/gosling/device/cudadev" // --device cuda, as cmd/gosling links it
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/tensor"
)

func needGPU(t *testing.T) {
	t.Helper()
	if err := cuda.DriverAvailable(); err != nil {
		t.Skipf("libcuda.so.1 not available: %v", err)
	}
}

// gpuBackends are the CUDA attention backends the engine's GPU checks run:
// those that serve every model here (any head dim, a float32 KV cache).
// The cudnn library backend (head dims 64-128, bf16 KV) takes none of the
// test models; the attention battery and the long decode and extend
// checks (attention/gpu/gputest) hold it to the reference instead.
func gpuBackends() []attention.Entry {
	var out []attention.Entry
	for _, e := range registry.ForDevice("cuda") {
		if e.Caps.HeadDims == nil && slices.Contains(e.Caps.KVDTypes, tensor.F32) {
			out = append(out, e)
		}
	}
	return out
}

// TestGPUStoriesGolden: `--device cuda` reproduces run.c's greedy output
// with every GPU attention backend and page sizes 1 and 16.
func TestGPUStoriesGolden(t *testing.T) {
	needGPU(t)
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	for _, e := range gpuBackends() {
		for _, pageSize := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/page%d", e.Name, pageSize), func(t *testing.T) {
				eng := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), Device: "cuda",
					AttentionBackend: e.Name, PageSize: pageSize, MaxRunningRequests: 4, ContextLength: 512})
				res, err := eng.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
				if err != nil {
					t.Fatal(err)
				}
				for i := range golden.OutputIDs {
					if i >= len(res.OutputIDs) || res.OutputIDs[i] != golden.OutputIDs[i] {
						t.Fatalf("token %d differs: got %v, want %v", i, res.OutputIDs[i:min(i+5, len(res.OutputIDs))], golden.OutputIDs[i:i+5])
					}
				}
			})
		}
	}
}

// TestGPUReferenceModels: prompt log-probabilities within 2e-4 of
// transformers with float32 weights on the GPU, and within 3e-2 with
// float16 weights (16-bit weights, float32 accumulation). With bf16
// weights no fixed bound is honest for these tiny random models (their
// logits are large): transformers itself, run in bf16, lands 0.16–0.26
// from its float32 values at worst on the dense models
// (testdata/transformers_bf16.json), and the float32 model with only its
// weights rounded to bf16 lands 0.07–0.98 (scripts/bf16-reference.py).
// gosling's bf16 path must do at least as well as transformers', at every
// position and on average; so must its float16 path where the fixed 3e-2
// does not hold (noFixedF16Bound) and transformers' float16 distance is
// measured. A model with no measured bound is skipped, naming the script.
//
// In float16 one position may still land beyond the bound (mixtral,
// phi3): such a position passes only where the CPU, rounding exactly
// where the GPU's float16 path rounds (f16emu_test.go), lands as well, and
// the log names the cause: a router near-tie the rounding flips (mixtral's
// position 64: at token 63, MoE layer 2's second and third experts are
// 1.0e-2 apart in float32 router logits), or the rounding of the GEMM
// inputs alone (phi3's position 90, mostly its q/k/v input). Means stay
// bounded by transformers' as they are.
func TestGPUReferenceModels(t *testing.T) {
	needGPU(t)
	var meas struct {
		Max     map[string]float64 `json:"max_abs_logprob_error"`
		Mean    map[string]float64 `json:"mean_abs_logprob_error"`
		F16Max  map[string]float64 `json:"f16_max_abs_logprob_error"`
		F16Mean map[string]float64 `json:"f16_mean_abs_logprob_error"`
	}
	readJSON(t, "testdata/transformers_bf16.json", &meas)
	emulated := map[string]f16Emulation{} // by model, made when a float16 run needs it
	for _, name := range []string{"llama_gqa", "llama_mha_tied", "qwen2_bias", "qwen3_qknorm", "mistral_swa", "gemma2_softcap_swa", "deepseek_v3_mla_moe",
		"qwen3_moe", "qwen2_moe", "mixtral", "phi3", "gemma3_text", "qwen3_yarn", "gpt_oss"} {
		_, bf16Measured := meas.Max[name]
		f16 := struct {
			tol, meanTol float64
			bounded      bool
		}{3e-2, 3e-2, !noFixedF16Bound[name]}
		if mx, ok := meas.F16Max[name]; ok && noFixedF16Bound[name] {
			f16.tol, f16.meanTol, f16.bounded = mx*moeMaxHeadroom(name), meas.F16Mean[name], true
		}
		for _, e := range gpuBackends() {
			for _, dt := range []struct {
				dtype        string
				tol, meanTol float64
				bounded      bool
			}{{"float32", 2e-4, 2e-4, true}, {"float16", f16.tol, f16.meanTol, f16.bounded},
				{"bfloat16", meas.Max[name] * moeMaxHeadroom(name), meas.Mean[name], bf16Measured}} {
				for _, pageSize := range []int{1, 16} {
					t.Run(fmt.Sprintf("%s/%s/%s/page%d", name, e.Name, dt.dtype, pageSize), func(t *testing.T) {
						if !dt.bounded {
							t.Skipf("testdata/transformers_bf16.json has no %s bound for %s yet: run scripts/gpu-e2e.sh bf16ref", dt.dtype, name)
						}
						dir := shared.Path(t, "models/reference-tiny/"+name)
						var ref reference
						readJSON(t, filepath.Join(dir, "reference.json"), &ref)
						// The KV cache stays float32 so that the bound measures the
						// weights' precision (16-bit weights default to a bf16
						// cache, whose rounding the conformance battery checks).
						eng := newEngine(t, engine.Config{ModelPath: dir, Device: "cuda", DType: dt.dtype, KVCacheDType: "float32",
							AttentionBackend: e.Name, PageSize: pageSize, MaxRunningRequests: 4, ContextLength: 256})
						res, err := eng.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
						if err != nil {
							t.Fatal(err)
						}
						worst, sum := 0.0, 0.0
						var over []int // positions beyond dt.tol
						for i, want := range ref.PromptLogprobs {
							d := math.Abs(float64(*res.PromptLogprobs[i+1]) - want)
							worst, sum = max(worst, d), sum+d
							if d > dt.tol {
								over = append(over, i+1)
							}
						}
						mean := sum / float64(len(ref.PromptLogprobs))
						t.Logf("max |Δ prompt logprob| = %.2e, mean %.2e", worst, mean)
						if mean > dt.meanTol {
							t.Fatalf("max |Δ| %.3g (bound %.3g), mean %.3g (bound %.3g)", worst, dt.tol, mean, dt.meanTol)
						}
						if len(over) > 0 && dt.dtype != "float16" {
							t.Fatalf("max |Δ| %.3g (bound %.3g) at positions %v, mean %.3g (bound %.3g)", worst, dt.tol, over, mean, dt.meanTol)
						}
						// In float16 a position beyond the bound passes only where
						// the CPU running the GPU's float16 rounding lands too, and
						// the log says why (a router near-tie, or the rounding).
						for _, p := range over {
							e, ok := emulated[name]
							if !ok {
								e = emulateF16(t, dir, ref.InputIDs)
								emulated[name] = e
							}
							got, want := float64(*res.PromptLogprobs[p]), ref.PromptLogprobs[p-1]
							why, ok := e.explain(p, got, want)
							if !ok {
								t.Errorf("position %d: |Δ| %.3g beyond the bound %.3g, unexplained: %s", p, math.Abs(got-want), dt.tol, why)
								continue
							}
							t.Logf("position %d: |Δ| %.3g beyond transformers' float16 distance %.3g: %s", p, math.Abs(got-want), dt.tol, why)
						}
					})
				}
			}
		}
	}
}

// TestDeviceCUDAWithoutGPU: without a driver, --device cuda fails with one
// clear sentence and --device auto runs on the CPU.
func TestDeviceCUDAWithoutGPU(t *testing.T) {
	if cuda.DriverAvailable() == nil {
		t.Skip("a GPU driver is present")
	}
	model := shared.Path(t, "models/stories260K/stories260K.gguf")
	_, err := engine.New(engine.Config{ModelPath: model, Device: "cuda"})
	if err == nil || !strings.Contains(err.Error(), "libcuda.so.1") || !strings.Contains(err.Error(), "--device cpu") {
		t.Fatalf("err = %v, want one naming libcuda.so.1 and --device cpu", err)
	}
	e := newEngine(t, engine.Config{ModelPath: model, Device: "auto"})
	if got := e.Settings().Device; got != "cpu" {
		t.Fatalf("auto chose %q on a machine without a GPU", got)
	}
}

// noFixedF16Bound lists the reference models whose float16 runs exceed
// the fixed 3e-2 bound of the others (max |Δ| on an H200: qwen2_moe 0.161,
// mixtral 0.236, phi3 0.036, gpt_oss 0.599 with mean 0.020, every backend
// and page size alike, while their float32 runs agree to 3.0e-5): like
// bf16, they are held to transformers' own float16 distance.
var noFixedF16Bound = map[string]bool{"qwen2_moe": true, "mixtral": true, "phi3": true, "gpt_oss": true}

// moeMaxHeadroom widens the worst-position 16-bit bound by 10% for the
// mixtures of experts: under 16-bit rounding their top-k routing picks a
// different expert at a few positions, a discrete jump whose size differs
// between any two 16-bit implementations (transformers' own worst is 0.93
// on deepseek_v3_mla_moe). The mean bound, which such jumps hardly move,
// stays exact.
func moeMaxHeadroom(name string) float64 {
	switch name {
	case "deepseek_v3_mla_moe", "qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss":
		return 1.1
	}
	return 1
}

// TestGPUVisionModels: the vision-language references from their stored
// pixel values on the GPU (vision tower and language model, float32
// weights and KV cache) agree with the CPU's native backend within 2e-4
// per prompt log-probability, on every CUDA backend at page sizes 1 and 16.
func TestGPUVisionModels(t *testing.T) {
	needGPU(t)
	for _, tc := range vlmCases {
		dir := shared.Path(t, "models/reference-tiny/"+tc.name)
		var ref reference
		readJSON(t, filepath.Join(dir, "reference.json"), &ref)
		img := engine.Image{Pixels: storedPixels(t, dir, tc.grid)}
		base := promptLogprobs(t, newEngine(t, engine.Config{ModelPath: dir, Device: "cpu", AttentionBackend: "native"}), ref.InputIDs, img)
		for _, e := range gpuBackends() {
			for _, pageSize := range []int{1, 16} {
				t.Run(fmt.Sprintf("%s/%s/page%d", tc.name, e.Name, pageSize), func(t *testing.T) {
					eng := newEngine(t, engine.Config{ModelPath: dir, Device: "cuda", DType: "float32", KVCacheDType: "float32",
						AttentionBackend: e.Name, PageSize: pageSize, MaxRunningRequests: 4, ContextLength: 256})
					d := maxDelta(promptLogprobs(t, eng, ref.InputIDs, img), base)
					t.Logf("max |Δ prompt logprob| from the CPU: %.2e", d)
					if d > 2e-4 {
						t.Fatalf("max |Δ| %.3g > 2e-4", d)
					}
				})
			}
		}
	}
}

// TestGPUActivationReserve: at --mem-fraction-static 1 no memory is left
// beside the weights and the KV cache, and a cache that wants more than
// the card (64 contexts of 64K tokens at 64 KiB a token: 275 GB) takes
// all it is given; the
// activations of the largest forward are measured at start-up and kept
// out of it. A workload that builds forwards of that size (a prompt
// longer than the cap, chunked at it; 63 more prompts at once, one
// scored row by row) then runs without running out of
// memory. The model is a mixture of experts at dummy weights, its
// vocabulary Qwen3's (the logits rows are a forward's largest buffers).
func TestGPUActivationReserve(t *testing.T) {
	needGPU(t)
	dir := t.TempDir()
	cfg := `{"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 1024, "intermediate_size": 3072,
		"moe_intermediate_size": 512, "num_experts": 32, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
		"mlp_only_layers": [], "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 128,
		"vocab_size": 151936, "max_position_embeddings": 65536, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
		"tie_word_embeddings": false, "torch_dtype": "bfloat16"}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, engine.Config{ModelPath: dir, LoadFormat: "dummy", Device: "cuda", DType: "bfloat16",
		MemFractionStatic: 1, MaxRunningRequests: 64, ContextLength: 65536, ChunkedPrefillSize: 4096})
	set := e.Settings()
	reserve := e.ActivationReserveBytes()
	t.Logf("max forward %d tokens, activation reserve %d bytes, KV cache %d bytes (%d tokens)",
		set.MaxForwardTokens, reserve, set.KVCacheBytes, set.KVCacheTokens)
	if set.MaxForwardTokens != 4096 || reserve <= 0 {
		t.Fatalf("max forward %d tokens, reserve %d bytes: want 4096 and a measured reserve", set.MaxForwardTokens, reserve)
	}
	if set.KVCacheTokens >= 64*65536 {
		t.Fatalf("the KV cache holds %d tokens: it should have wanted more than the card", set.KVCacheTokens)
	}
	var wg sync.WaitGroup
	prompt := func(n, seed int) []int {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = (seed*7919 + i*104729) % 151000
		}
		return ids
	}
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := engine.Request{InputIDs: prompt(128, i), Sampling: greedy(16)}
			switch i {
			case 0: // a chunk of the cap on its own, whenever the others arrive
				req.InputIDs = prompt(5000, i)
			case 1:
				req.InputIDs, req.PromptLogprobs = prompt(3000, i), true
			}
			res, err := e.Generate(context.Background(), req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			if len(res.OutputIDs) != 16 {
				t.Errorf("request %d: %d tokens, want 16", i, len(res.OutputIDs))
			}
		}()
	}
	wg.Wait()
	if st := e.Stats(); st.LargestForward != set.MaxForwardTokens {
		t.Errorf("largest forward %d tokens, want the cap %d (the workload fills it)", st.LargestForward, set.MaxForwardTokens)
	}
}
