package engine_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// widened writes the weights of the fp8 checkpoint in dir as a float32
// checkpoint (what its loader hands the model) and returns its directory.
func widened(t *testing.T, dir string) string {
	t.Helper()
	ckpt, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ckpt.Close()
	var out []safetensors.Tensor
	for _, name := range ckpt.Weights.Names() {
		if strings.HasSuffix(name, "_scale") || strings.HasSuffix(name, "_scale_inv") {
			continue
		}
		w, err := ckpt.Weights.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if w, err = tensor.Convert(w, tensor.F32); err != nil {
			t.Fatal(err)
		}
		out = append(out, safetensors.Tensor{Name: name, DType: "F32", Shape: w.Shape, Data: append([]byte(nil), w.Data...)})
	}
	dst := t.TempDir()
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	plain := strings.Replace(string(data), `"quantization_config"`, `"removed_quantization_config"`, 1)
	if err := os.WriteFile(filepath.Join(dst, "config.json"), []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func scoreLogprobs(t *testing.T, cfg engine.Config, ids []int) []float64 {
	t.Helper()
	e := newEngine(t, cfg)
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ids, Sampling: greedy(0), PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(ids)-1)
	for i := range out {
		out[i] = float64(*res.PromptLogprobs[i+1])
	}
	return out
}

// TestFP8CheckpointReference: reference-tiny models rewritten as fp8
// checkpoints (every projection in e4m3, per-tensor or 32×32 block scales)
// serve on the CPU, widened at load, exactly as a float32 checkpoint of
// the widened weights does (the same prompt log-probabilities to 1e-6).
// Their distance from transformers' float32 values is logged: e4m3 moves
// these tiny random models' large logits by 1-2 at worst, so it bounds
// nothing useful here.
func TestFP8CheckpointReference(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block []int
	}{{"llama_gqa", nil}, {"llama_gqa", []int{32, 32}}, {"qwen3_moe", []int{32, 32}}} {
		t.Run(fmt.Sprintf("%s/block%v", tc.name, tc.block), func(t *testing.T) {
			src := shared.Path(t, "models/reference-tiny/"+tc.name)
			var ref reference
			readJSON(t, filepath.Join(src, "reference.json"), &ref)
			dir := t.TempDir()
			if _, err := random.WriteFP8(src, dir, tc.block); err != nil {
				t.Fatal(err)
			}
			got := scoreLogprobs(t, engine.Config{ModelPath: dir}, ref.InputIDs)
			want := scoreLogprobs(t, engine.Config{ModelPath: widened(t, dir)}, ref.InputIDs)
			worst, fromRef := 0.0, 0.0
			for i := range got {
				worst = max(worst, math.Abs(got[i]-want[i]))
				fromRef = max(fromRef, math.Abs(got[i]-ref.PromptLogprobs[i]))
			}
			t.Logf("max |Δ prompt logprob|: %.2g from the widened float32 checkpoint, %.3g from transformers' float32 model", worst, fromRef)
			if worst > 1e-6 {
				t.Fatalf("max |Δ| %.3g from the widened float32 checkpoint", worst)
			}
		})
	}
}
