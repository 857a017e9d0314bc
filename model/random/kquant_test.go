package random_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// greedyTop2 generates n tokens greedily and returns them with each
// step's two most likely tokens' log-probabilities.
func greedyTop2(t *testing.T, cfg engine.Config, n int) ([]int, [][]sample.TokenLogprob) {
	t.Helper()
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatalf("engine.New(%s): %v", cfg.ModelPath, err)
	}
	defer e.Close()
	p := sample.DefaultParams()
	p.Temperature, p.MaxNewTokens, p.IgnoreEOS = 0, n, true
	res, err := e.Generate(context.Background(), engine.Request{Prompt: "Once upon a time", Sampling: p, TopLogprobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	return res.OutputIDs, res.TopLogprobs
}

// TestKQuantModels writes Q4_K_M- and Q6_K-quantised GGUF models and runs
// them with their weights served compactly (integer products over
// quantised activations), against the same files with every matrix
// dequantised exactly to float32 (--dtype float32) as the reference:
// greedy output must agree, except where the reference's two best tokens
// are a near-tie, which the test reports.
func TestKQuantModels(t *testing.T) {
	shape := random.Presets["stories260K"]
	// Rows of whole 256-value super-blocks, so that every matrix is stored
	// in the K-quant (the embedding and output: dim 256).
	shape.Dim, shape.Hidden, shape.Layers, shape.Heads, shape.KVHeads = 256, 512, 2, 4, 2
	shape.Tied = false
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		dtype tensor.DType
		mix   bool
	}{{"Q4_K_M", tensor.Q4_K, true}, {"Q6_K", tensor.Q6_K, false}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".gguf")
			if err := random.Write(path, random.Options{Shape: shape, Format: "gguf", DType: tc.dtype, MixQ6K: tc.mix, Seed: 24, Std: 0.08}); err != nil {
				t.Fatal(err)
			}
			ck, err := model.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[tensor.DType]int{}
			for _, name := range ck.Weights.Names() {
				w, err := ck.Weights.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				counts[w.DType]++
			}
			ck.Close()
			t.Logf("%s tensors by type: %v", tc.name, counts)
			if tc.mix && (counts[tensor.Q4_K] == 0 || counts[tensor.Q6_K] == 0 || counts[tensor.F32] == 0) {
				t.Errorf("a Q4_K_M file mixes Q4_K, Q6_K and F32; got %v", counts)
			}
			const n = 24
			got, _ := greedyTop2(t, engine.Config{ModelPath: path, Device: "cpu"}, n)
			want, top := greedyTop2(t, engine.Config{ModelPath: path, Device: "cpu", DType: "float32"}, n)
			if len(got) != n || len(want) != n {
				t.Fatalf("generated %d and %d tokens, want %d", len(got), len(want), n)
			}
			minGap := math.Inf(1)
			for i := range want {
				gap := float64(top[i][0].Logprob - top[i][1].Logprob)
				minGap = min(minGap, gap)
				if got[i] != want[i] {
					// Quantising the activations moves logits by about 1e-2
					// here; a smaller top-two gap is a tie.
					t.Logf("first divergence at token %d: %d against the reference's %d, whose top-two gap is %.4f", i, got[i], want[i], gap)
					if gap > 0.05 {
						t.Errorf("diverged at token %d (%v vs %v) with a clear reference gap %.4f", i, got[:i+1], want[:i+1], gap)
					}
					return
				}
			}
			t.Logf("%d greedy tokens identical to the float32 reference; smallest top-two gap %.4f", n, minGap)
		})
	}
}

// TestMXFP4GGUF: a GGUF model with every matrix in MXFP4 (ggml type 39,
// block_mxfp4) serves on the CPU in bfloat16 panels, which hold its
// values exactly: prompt log-probabilities within 1e-4 of the same file
// dequantised to float32 (--dtype float32), the two differing only in
// the kernels' summation.
func TestMXFP4GGUF(t *testing.T) {
	shape := random.Presets["stories260K"]
	shape.Dim, shape.Hidden, shape.Layers, shape.Heads, shape.KVHeads = 128, 256, 2, 4, 2
	shape.Tied = false
	path := filepath.Join(t.TempDir(), "mxfp4.gguf")
	if err := random.Write(path, random.Options{Shape: shape, Format: "gguf", DType: tensor.MXFP4, Seed: 24, Std: 0.08}); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ck.Weights.Tensor("model.layers.1.mlp.down_proj.weight")
	ck.Close()
	if err != nil || w.DType != tensor.MXFP4 {
		t.Fatalf("down_proj: %v %v, want MXFP4", w.DType, err)
	}
	ids := make([]int, 40)
	for i := range ids {
		ids[i] = 3 + i*37%(shape.Vocab-3)
	}
	logprobs := func(cfg engine.Config) []float32 {
		e, err := engine.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		p := sample.DefaultParams()
		p.Temperature, p.MaxNewTokens = 0, 1
		res, err := e.Generate(context.Background(), engine.Request{InputIDs: ids, Sampling: p, PromptLogprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, len(ids)-1)
		for i := range out {
			out[i] = *res.PromptLogprobs[i+1]
		}
		return out
	}
	// The KV cache in float32 for both: auto stores a file of quantised
	// blocks' KV in bf16 on the CPU, which is not what this compares.
	got := logprobs(engine.Config{ModelPath: path, Device: "cpu", KVCacheDType: "float32"})
	want := logprobs(engine.Config{ModelPath: path, Device: "cpu", DType: "float32", KVCacheDType: "float32"})
	worst := 0.0
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i]-want[i])))
	}
	t.Logf("max |Δ prompt logprob| %.2e", worst)
	if worst > 1e-4 {
		t.Errorf("MXFP4 in bf16 panels vs float32: prompt log-probabilities differ by up to %.3g", worst)
	}
}
