package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/attention/registry"
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
// with graphs asked for or not: under TP the engine decodes eagerly (see
// setupGraphs), so no step may replay a graph either way.
func TestGPUTPStoriesGolden(t *testing.T) {
	needGPUs(t, 2)
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	for _, e := range registry.ForDevice("cuda") {
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
				if st := eng.Stats(); st.GraphReplays != 0 || st.GraphCaptures != 0 {
					t.Errorf("a decode step under TP went through a CUDA graph: %+v", st)
				}
			})
		}
	}
}

// TestGPUTPReferenceModels: float32 weights, TP=2 against TP=1 on the GPU
// for every reference-tiny text model and GPU attention backend: prompt
// log-probabilities within 1e-4 of each other and 2e-4 of transformers,
// greedy continuations matching transformers' (checkReference).
func TestGPUTPReferenceModels(t *testing.T) {
	needGPUs(t, 2)
	for _, name := range tpModels {
		for _, e := range registry.ForDevice("cuda") {
			t.Run(name+"/"+e.Name, func(t *testing.T) {
				dir := shared.Path(t, "models/reference-tiny/"+name)
				var ref reference
				readJSON(t, filepath.Join(dir, "reference.json"), &ref)
				compareTP(t, ref, func(tp int) engine.Config {
					return engine.Config{ModelPath: dir, Device: "cuda", TPSize: tp, DType: "float32",
						AttentionBackend: e.Name, MaxRunningRequests: 4, ContextLength: 512}
				})
			})
		}
	}
}
