package engine_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// generateConcurrently runs one greedy request per prompt at the same time
// (so the scheduler batches them, and the batch shrinks as the shorter
// ones finish) and returns the results in prompt order.
func generateConcurrently(t *testing.T, eng *engine.Engine, prompts [][]int, maxNew []int, logprobs bool) []*engine.Result {
	t.Helper()
	reqs := make([]engine.Request, len(prompts))
	for i := range prompts {
		reqs[i] = engine.Request{InputIDs: prompts[i], Sampling: greedy(maxNew[i]), Logprobs: logprobs}
	}
	return runRequests(t, eng, reqs)
}

// runRequests runs reqs at the same time and returns the results in order.
func runRequests(t *testing.T, eng *engine.Engine, reqs []engine.Request) []*engine.Result {
	t.Helper()
	out := make([]*engine.Result, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = eng.Generate(context.Background(), reqs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return out
}

// TestGPUDecodeGraphs: decode steps replayed from CUDA graphs give the same
// tokens as eager steps, for every graph-capable GPU backend and page
// sizes 1 and 16, with batches of 5, 3, 2 and 1 requests padded to the
// captured sizes 8, 4, 2 and 1; graphs are captured once per size and
// split and replayed after, and no step falls back to eager.
func TestGPUDecodeGraphs(t *testing.T) {
	needGPU(t)
	path := shared.Path(t, "models/stories260K/stories260K.gguf")
	prompts := [][]int{{1}, {1, 403, 407}, {1, 365, 122, 263}, {1, 90}, {1, 320, 291}}
	maxNew := []int{200, 150, 90, 40, 20}
	for _, e := range registry.ForDevice("cuda") {
		if !e.Caps.CUDAGraph {
			continue
		}
		for _, pageSize := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/page%d", e.Name, pageSize), func(t *testing.T) {
				cfg := engine.Config{ModelPath: path, Device: "cuda", AttentionBackend: e.Name, PageSize: pageSize,
					MaxRunningRequests: 8, ContextLength: 512, DisableCUDAGraph: true}
				eager := generateConcurrently(t, newEngine(t, cfg), prompts, maxNew, false)
				cfg.DisableCUDAGraph = false
				eng := newEngine(t, cfg)
				graphed := generateConcurrently(t, eng, prompts, maxNew, false)
				for i := range prompts {
					if !slices.Equal(eager[i].OutputIDs, graphed[i].OutputIDs) {
						t.Errorf("request %d: graph decode %v differs from eager %v", i, head(graphed[i].OutputIDs), head(eager[i].OutputIDs))
					}
				}
				st := eng.Stats()
				t.Logf("graph replays %d, captures %d, eager %d", st.GraphReplays, st.GraphCaptures, st.GraphEager)
				if st.GraphEager != 0 || st.GraphReplays == 0 {
					t.Fatalf("stats %+v: want replays and no eager fallbacks", st)
				}
				// Sizes 8, 4, 2, 1, each re-captured at most a few times as the
				// longest sequence crosses powers of two (the attention split).
				if st.GraphCaptures > 4*5 {
					t.Fatalf("%d captures for 4 batch sizes", st.GraphCaptures)
				}
			})
		}
	}
}

// TestGPUDecodeGraphLogprobs: the per-token log-probabilities of graph
// decode steps equal the eager ones (same kernels, so to float rounding)
// on a reference model in float32.
func TestGPUDecodeGraphLogprobs(t *testing.T) {
	needGPU(t)
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	prompts := [][]int{ref.InputIDs[:10], ref.InputIDs[10:40], ref.InputIDs[40:45]}
	maxNew := []int{40, 25, 10}
	cfg := engine.Config{ModelPath: dir, Device: "cuda", AttentionBackend: "splitkv", MaxRunningRequests: 4, ContextLength: 256,
		DisableCUDAGraph: true}
	eager := generateConcurrently(t, newEngine(t, cfg), prompts, maxNew, true)
	cfg.DisableCUDAGraph = false
	eng := newEngine(t, cfg)
	graphed := generateConcurrently(t, eng, prompts, maxNew, true)
	worst := sameTokens(t, "graph decode", graphed, "eager", eager)
	t.Logf("max |Δ logprob| graph vs eager = %.2e; stats %+v", worst, eng.Stats())
	if worst > 1e-4 {
		t.Fatalf("graph decode log-probabilities differ from eager by %.3g", worst)
	}
	if eng.Stats().GraphReplays == 0 {
		t.Fatal("no step was replayed from a graph")
	}
}

// sameTokens fails the test unless got and want generated the same tokens,
// and returns the largest difference of their log-probabilities.
func sameTokens(t *testing.T, gotName string, got []*engine.Result, wantName string, want []*engine.Result) float64 {
	t.Helper()
	worst := 0.0
	for i := range want {
		if !slices.Equal(want[i].OutputIDs, got[i].OutputIDs) {
			t.Fatalf("request %d: %s %v differs from %s %v", i, gotName, head(got[i].OutputIDs), wantName, head(want[i].OutputIDs))
		}
		for j := range want[i].OutputLogprobs {
			worst = max(worst, math.Abs(float64(want[i].OutputLogprobs[j]-got[i].OutputLogprobs[j])))
		}
	}
	return worst
}

func head(ids []int) []int { return ids[:min(len(ids), 8)] }

// TestGPUMoEGraphs: mixtures of experts route on the device, so their
// decode steps run as CUDA graphs (no step falls back to eager), and the
// tokens and log-probabilities equal the host-routed reference's
// (GOSLING_MOE_HOST_ROUTING=1: the choice read back, no graphs) on the
// reference models in float32: Qwen3-MoE, Qwen2-MoE (the shared expert's
// sigmoid gate), Mixtral, GPT-OSS (router bias, clamped SwiGLU, expert
// biases) and DeepSeek-V3 (grouped, biased sigmoid routing).
func TestGPUMoEGraphs(t *testing.T) {
	needGPU(t)
	for _, name := range []string{"qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "deepseek_v3_mla_moe"} {
		t.Run(name, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+name)
			var ref reference
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)
			prompts := [][]int{ref.InputIDs[:10], ref.InputIDs[10:40], ref.InputIDs[40:45]}
			maxNew := []int{24, 16, 8}
			cfg := engine.Config{ModelPath: dir, Device: "cuda", DType: "float32", AttentionBackend: "splitkv", MaxRunningRequests: 4,
				ContextLength: 256, DisableCUDAGraph: true}
			t.Setenv("GOSLING_MOE_HOST_ROUTING", "1")
			host := generateConcurrently(t, newEngine(t, cfg), prompts, maxNew, true)
			t.Setenv("GOSLING_MOE_HOST_ROUTING", "")
			cfg.DisableCUDAGraph = false
			eng := newEngine(t, cfg)
			graphed := generateConcurrently(t, eng, prompts, maxNew, true)
			worst := sameTokens(t, "device-routed graph decode", graphed, "host-routed", host)
			st := eng.Stats()
			t.Logf("max |Δ logprob| device- vs host-routed = %.2e; graph replays %d, captures %d, eager %d", worst, st.GraphReplays, st.GraphCaptures, st.GraphEager)
			if worst > 1e-4 {
				t.Errorf("device-routed log-probabilities differ from host-routed by %.3g", worst)
			}
			if st.GraphEager != 0 || st.GraphReplays == 0 {
				t.Errorf("stats %+v: want replays and no eager decode steps", st)
			}
		})
	}
}

// TestGPUMoEGroupedPrefill: a prefill past the streaming kernels' size
// (the 96-token reference prompt in one chunk: 192 routed rows over 8
// experts, 24 an expert on average, past their 16) runs its experts
// through the grouped GEMMs, routed and sorted on the device, and its
// prompt log-probabilities equal those of the path before them
// (GOSLING_MOE_PREFILL_LOOP=1: the choice read back, each expert's own
// GEMMs), on the five MoE reference models: in float32 within the 1e-4
// the MoE graph test holds device routing to (float32 weights take
// moe_linear's tiles), and the reference's 2e-4 beside. In bf16
// (moe_gemm's tensor cores against cuBLASLt, both rounding x and the
// activation to bf16) no fixed distance between the two paths is honest:
// a last-bit difference in a float32 sum rounds an activation to the next
// bf16 value, and the tiny models' large logits amplify it. The grouped
// path must instead be as accurate as the one it replaces: no farther
// from transformers' float32 values than it, by more than 2e-2 at any
// position or on average, and within TestGPUReferenceModels' bf16 bound
// (transformers' own bf16 distance, testdata/transformers_bf16.json).
func TestGPUMoEGroupedPrefill(t *testing.T) {
	needGPU(t)
	var meas struct {
		Max  map[string]float64 `json:"max_abs_logprob_error"`
		Mean map[string]float64 `json:"mean_abs_logprob_error"`
	}
	readJSON(t, "testdata/transformers_bf16.json", &meas)
	for _, name := range []string{"qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "deepseek_v3_mla_moe"} {
		for _, dt := range []struct {
			dtype string
			tol   float64
		}{{"float32", 1e-4}, {"bfloat16", 2e-2}} {
			t.Run(name+"/"+dt.dtype, func(t *testing.T) {
				dir := shared.Path(t, "models/reference-tiny/"+name)
				var ref reference
				readJSON(t, filepath.Join(dir, "reference.json"), &ref)
				cfg := engine.Config{ModelPath: dir, Device: "cuda", DType: dt.dtype, KVCacheDType: "float32", AttentionBackend: "splitkv",
					MaxRunningRequests: 4, ContextLength: 256, ChunkedPrefillSize: len(ref.InputIDs)}
				prefill := func() []float64 {
					res, err := newEngine(t, cfg).Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
					if err != nil {
						t.Fatal(err)
					}
					out := make([]float64, len(ref.PromptLogprobs))
					for i := range out {
						out[i] = float64(*res.PromptLogprobs[i+1])
					}
					return out
				}
				t.Setenv("GOSLING_MOE_PREFILL_LOOP", "1")
				loop := prefill()
				t.Setenv("GOSLING_MOE_PREFILL_LOOP", "")
				grouped := prefill()
				worst, worstRef, loopRef, meanRef, loopMean := 0.0, 0.0, 0.0, 0.0, 0.0
				for i := range grouped {
					worst = max(worst, math.Abs(grouped[i]-loop[i]))
					g, l := math.Abs(grouped[i]-ref.PromptLogprobs[i]), math.Abs(loop[i]-ref.PromptLogprobs[i])
					worstRef, loopRef = max(worstRef, g), max(loopRef, l)
					meanRef, loopMean = meanRef+g/float64(len(grouped)), loopMean+l/float64(len(grouped))
				}
				t.Logf("max |Δ prompt logprob| grouped vs one by one %.2e; from transformers: grouped %.2e (mean %.2e), one by one %.2e (mean %.2e)",
					worst, worstRef, meanRef, loopRef, loopMean)
				if dt.dtype == "float32" {
					if worst > dt.tol {
						t.Errorf("grouped prefill differs from the experts one by one by %.3g (bound %.3g)", worst, dt.tol)
					}
					if worstRef > 2e-4 {
						t.Errorf("grouped prefill differs from transformers by %.3g (bound 2e-4)", worstRef)
					}
					return
				}
				if worstRef > loopRef+dt.tol || meanRef > loopMean+dt.tol {
					t.Errorf("grouped prefill is %.3g (mean %.3g) from transformers, the experts one by one %.3g (mean %.3g): more than %.3g worse",
						worstRef, meanRef, loopRef, loopMean, dt.tol)
				}
				if bound, ok := meas.Max[name]; ok && (worstRef > bound*moeMaxHeadroom(name) || meanRef > meas.Mean[name]) {
					t.Errorf("grouped prefill is %.3g (mean %.3g) from transformers, beyond transformers' own bf16 %.3g (mean %.3g)",
						worstRef, meanRef, bound*moeMaxHeadroom(name), meas.Mean[name])
				}
			})
		}
	}
}
