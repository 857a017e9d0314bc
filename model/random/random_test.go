package random_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

func generate(t *testing.T, path string, withTokenizer bool) []int {
	t.Helper()
	e, err := engine.New(engine.Config{ModelPath: path})
	if err != nil {
		t.Fatalf("engine.New(%s): %v", path, err)
	}
	defer e.Close()
	p := sample.DefaultParams()
	p.Temperature, p.MaxNewTokens, p.IgnoreEOS = 0, 8, true
	req := engine.Request{InputIDs: []int{1, 300, 301}, Sampling: p}
	if withTokenizer {
		req = engine.Request{Prompt: "Once upon a time", Sampling: p}
	}
	res, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.OutputIDs
}

// TestFormats writes the same random model in every format and dtype,
// reads it back, and runs it. llama2.c and GGUF share the interleaved RoPE
// layout, so with the same seed they are the same model: the same output.
func TestFormats(t *testing.T) {
	shape := random.Presets["stories260K"]
	shape.Layers = 2
	dir := t.TempDir()
	var first []int
	for _, tc := range []struct {
		format string
		dtype  tensor.DType
		path   string
	}{
		{"llama2c", tensor.F32, "l2c/model.bin"},
		{"gguf", tensor.F32, "model-f32.gguf"},
		{"gguf", tensor.Q8_0, "model-q8.gguf"},
		{"gguf", tensor.BF16, "model-bf16.gguf"},
		{"hf", tensor.BF16, "hf-bf16"},
		{"hf", tensor.F16, "hf-f16"},
	} {
		t.Run(tc.format+"/"+tc.dtype.String(), func(t *testing.T) {
			path := filepath.Join(dir, tc.path)
			if err := random.Write(path, random.Options{Shape: shape, Format: tc.format, DType: tc.dtype, Seed: 7}); err != nil {
				t.Fatal(err)
			}
			ck, err := model.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg := ck.Config
			if cfg.HiddenSize != shape.Dim || cfg.NumLayers != shape.Layers || cfg.NumKVHeads != shape.KVHeads || cfg.VocabSize != shape.Vocab || cfg.IntermediateSize != shape.Hidden {
				t.Errorf("read back %+v", cfg)
			}
			w, err := ck.Weights.Tensor("model.layers.1.self_attn.q_proj.weight")
			if err != nil || w.DType != tc.dtype {
				t.Errorf("q_proj: %v, dtype %v, want %v", err, w.DType, tc.dtype)
			}
			down, _ := ck.Weights.Tensor("model.layers.0.mlp.down_proj.weight")
			if tc.dtype == tensor.Q8_0 && down.DType != tensor.F32 {
				t.Errorf("down_proj rows of %d are not Q8_0 blocks but were stored as %v", shape.Hidden, down.DType)
			}
			ck.Close()
			out := generate(t, path, tc.format != "hf")
			if len(out) != 8 {
				t.Fatalf("generated %v", out)
			}
			if tc.format != "hf" && tc.dtype == tensor.F32 {
				if first == nil {
					first = out
				} else if !slices.Equal(first, out) {
					t.Errorf("same weights, different output: %v vs %v", out, first)
				}
			}
		})
	}
}

func TestWriteRejects(t *testing.T) {
	dir := t.TempDir()
	shape := random.Presets["stories260K"]
	for _, o := range []random.Options{
		{Shape: shape, Format: "llama2c", DType: tensor.BF16},
		{Shape: shape, Format: "hf", DType: tensor.Q8_0},
		{Shape: shape, Format: "onnx", DType: tensor.F32},
		{Shape: random.Shape{Dim: 64, Hidden: 10, Layers: 1, Heads: 3, KVHeads: 1, Vocab: 512, SeqLen: 8}, Format: "gguf"},
		{Shape: random.Shape{Dim: 64, Hidden: 10, Layers: 1, Heads: 4, KVHeads: 4, Vocab: 100, SeqLen: 8}, Format: "gguf"},
	} {
		if err := random.Write(filepath.Join(dir, "x"), o); err == nil {
			t.Errorf("Write accepted %+v", o)
		}
	}
}

// Tensors lists exactly what Write writes: every tensor of a Q4_K_M GGUF
// file (Q4_K, Q6_K where the mix puts it, float32 norms and the rows
// that are not whole super-blocks) under its name, shape and dtype.
func TestTensors(t *testing.T) {
	shape := random.Presets["stories260K"]
	shape.Dim, shape.Hidden, shape.Layers, shape.Tied = 256, 320, 3, false
	o := random.Options{Shape: shape, Format: "gguf", DType: tensor.Q4_K, MixQ6K: true, Seed: 3}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := random.Write(path, o); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	listed := o.Tensors()
	if len(listed) != len(ck.Weights.Names()) {
		t.Errorf("%d tensors listed, %d written", len(listed), len(ck.Weights.Names()))
	}
	kinds := map[tensor.DType]int{}
	for _, l := range listed {
		w, err := ck.Weights.Tensor(l.Name)
		if err != nil {
			t.Fatal(err)
		}
		if w.DType != l.DType || !slices.Equal(w.Shape, l.Shape) {
			t.Errorf("%s: listed %v %v, written %v %v", l.Name, l.DType, l.Shape, w.DType, w.Shape)
		}
		kinds[l.DType]++
	}
	// down_proj rows of 320 are not whole super-blocks: float32.
	if kinds[tensor.Q4_K] == 0 || kinds[tensor.Q6_K] == 0 || kinds[tensor.F32] == 0 {
		t.Errorf("dtypes listed: %v", kinds)
	}
}
