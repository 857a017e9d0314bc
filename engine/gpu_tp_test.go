package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

func needGPUs(t *testing.T, n int) {
	t.Helper()
	needGPU(t)
	if count, err := cuda.DeviceCount(); err != nil || count < n {
		t.Skipf("tensor parallelism over %d GPUs: %d visible (%v)", n, count, err)
	}
}

// TestGPUTPStoriesGolden: `--device cuda --tp-size 2` (NCCL between GPUs 0
// and 1) reproduces run.c's greedy output with every GPU attention backend,
// with graphs and without; with graphs (on a backend that can run in one)
// the decode steps replay graphs with the all-reduces inside, both ranks
// in lock-step (checkTPGraphs).
func TestGPUTPStoriesGolden(t *testing.T) {
	needGPUs(t, 2)
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	for _, e := range gpuBackends() {
		for _, graphs := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/graphs=%v", e.Name, graphs), func(t *testing.T) {
				eng := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), Device: "cuda", TPSize: 2,
					AttentionBackend: e.Name, MaxRunningRequests: 4, ContextLength: 512, DisableCUDAGraph: !graphs})
				res, err := eng.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
				if err != nil {
					t.Fatal(err)
				}
				for i := range golden.OutputIDs {
					if i >= len(res.OutputIDs) || res.OutputIDs[i] != golden.OutputIDs[i] {
						t.Fatalf("token %d differs: got %v, want %v", i, res.OutputIDs[i:min(i+5, len(res.OutputIDs))], golden.OutputIDs[i:min(i+5, len(golden.OutputIDs))])
					}
				}
				checkTPGraphs(t, eng, 2, graphs && e.Caps.CUDAGraph)
			})
		}
	}
}

// checkTPGraphs: an engine of tp ranks decoded through CUDA graphs (want)
// or never did, in lock-step (tpLockstep).
func checkTPGraphs(t *testing.T, eng *engine.Engine, tp int, want bool) {
	t.Helper()
	switch c := tpLockstep(t, eng, tp); {
	case want && (c.Replays == 0 || c.Captures == 0 || c.Eager != 0):
		t.Errorf("TP=%d decode: %+v, want captured and replayed graphs and no eager step", tp, c)
	case !want && c != (engine.GraphCounts{}):
		t.Errorf("TP=%d decode without graphs went through one: %+v", tp, c)
	}
}

// tpLockstep: every rank of an engine of tp ranks took the same graph path
// at every step (the same captures, replays and eager steps: NCCL requires
// every rank to capture a collective together and replay that capture's
// graph). It returns rank 0's counts.
func tpLockstep(t *testing.T, eng *engine.Engine, tp int) engine.GraphCounts {
	t.Helper()
	st := eng.Stats()
	t.Logf("TP=%d graphs by rank (replays, captures, eager): %v", tp, st.RankGraphs)
	if len(st.RankGraphs) != tp {
		t.Fatalf("%d ranks' graph counts, want %d", len(st.RankGraphs), tp)
	}
	for r, c := range st.RankGraphs[1:] {
		if c != st.RankGraphs[0] {
			t.Errorf("rank %d's graph path %+v differs from rank 0's %+v", r+1, c, st.RankGraphs[0])
		}
	}
	return st.RankGraphs[0]
}

// TestGPUTPReferenceModels: float32 weights, TP=2 against TP=1 on the GPU
// for every reference-tiny text model and GPU attention backend: prompt
// log-probabilities within 1e-4 of each other and 2e-4 of transformers,
// greedy continuations matching transformers' (checkReference), decoded
// at TP=2 through CUDA graphs where the backend can (checkTPGraphs; a
// model whose decode cannot be captured, DeepSeek's MoE routing, runs
// eagerly on every rank alike).
func TestGPUTPReferenceModels(t *testing.T) {
	needGPUs(t, 2)
	for _, name := range tpModels {
		for _, e := range gpuBackends() {
			t.Run(name+"/"+e.Name, func(t *testing.T) {
				dir := shared.Path(t, "models/reference-tiny/"+name)
				var ref reference
				readJSON(t, filepath.Join(dir, "reference.json"), &ref)
				compareTP(t, ref, func(tp int) engine.Config {
					return engine.Config{ModelPath: dir, Device: "cuda", TPSize: tp, DType: "float32",
						AttentionBackend: e.Name, MaxRunningRequests: 4, ContextLength: 512}
				}, func(tp int, eng *engine.Engine) {
					if tp > 1 {
						tpLockstep(t, eng, tp)
					}
				})
			})
		}
	}
}

// TestGPUTPDecodeGraphs: at TP=2, concurrent requests batched 5, 3, 2 and
// 1 at a time (padded to the captured sizes 8, 4, 2, 1) decode through
// CUDA graphs with both ranks in lock-step, and give the same tokens and
// log-probabilities (to float rounding: a graph runs the batch padded to
// its captured size, whose GEMMs may round differently) as TP=2 without
// graphs, for every
// graph-capable GPU backend, with the custom all-reduce (the peer-memory
// kernels in place of NCCL for every all-reduce of this model) and
// without (--disable-custom-all-reduce).
func TestGPUTPDecodeGraphs(t *testing.T) {
	needGPUs(t, 2)
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	ids := ref.InputIDs
	prompts := [][]int{ids, ids[:len(ids)/2], ids[1:9], ids[:3], ids[20:25]}
	maxNew := []int{120, 90, 50, 25, 10}
	for _, e := range gpuBackends() {
		if !e.Caps.CUDAGraph {
			continue
		}
		t.Run(e.Name, func(t *testing.T) {
			run := func(graphs, custom bool) ([]*engine.Result, *engine.Engine) {
				eng := newEngine(t, engine.Config{ModelPath: dir, Device: "cuda", DType: "float32", TPSize: 2, AttentionBackend: e.Name,
					MaxRunningRequests: 8, ContextLength: 512, DisableCUDAGraph: !graphs,
					EnableCustomAllReduce: custom, DisableCustomAllReduce: !custom})
				reqs := make([]engine.Request, len(prompts))
				for i := range prompts {
					p := greedy(maxNew[i])
					p.IgnoreEOS = true // a random model's EOS would end requests early, and the batch sizes meant with them
					reqs[i] = engine.Request{InputIDs: prompts[i], Sampling: p, Logprobs: true}
				}
				return runRequests(t, eng, reqs), eng
			}
			eager, _ := run(false, false)
			for _, custom := range []bool{false, true} {
				graphed, eng := run(true, custom)
				worst := sameTokens(t, "graph decode", graphed, "eager", eager)
				t.Logf("custom all-reduce %v: max |Δ logprob| graph vs eager = %.2e", custom, worst)
				if worst > 1e-4 {
					t.Errorf("custom all-reduce %v: graph decode's log-probabilities differ from eager's by %.3g", custom, worst)
				}
				checkTPGraphs(t, eng, 2, true)
			}
		})
	}
}
