package random_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

// TestRandomAWQ: --format hf --dtype awq4_g64 writes AutoAWQ's layout for
// the projections (read back as AWQ4_G64 matrices within a quantization
// step of the float32 file's values, whose generator they share) and
// float16 for the other matrices (those whose rows are not whole groups
// among them).
func TestRandomAWQ(t *testing.T) {
	shape := random.Presets["stories15M"]
	shape.Layers = 2
	dir := t.TempDir()
	awq, f32 := filepath.Join(dir, "awq"), filepath.Join(dir, "f32")
	for path, dt := range map[string]tensor.DType{awq: tensor.AWQ4_G64, f32: tensor.F32} {
		if err := random.Write(path, random.Options{Shape: shape, Format: "hf", DType: dt, Seed: 3}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := model.Open(awq)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ref, err := model.Open(f32)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for name, want := range map[string]tensor.DType{
		"model.layers.1.mlp.down_proj.weight": tensor.AWQ4_G64,
		"model.layers.0.mlp.up_proj.weight":   tensor.F16, // 288 inputs: not whole groups
		"model.embed_tokens.weight":           tensor.F16,
	} {
		w, err := q.Weights.Tensor(name)
		if err != nil || w.DType != want {
			t.Fatalf("%s: %v %v, want %v", name, w.DType, err, want)
		}
		r, err := ref.Weights.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		got, vals := w.Float32(), r.Float32()
		// Each group's step is its range over 15; 0.02-σ normals over 64
		// values span well under 0.2.
		worst := 0.0
		for i := range vals {
			worst = max(worst, math.Abs(float64(got[i]-vals[i])))
		}
		if worst > 0.2/15 {
			t.Errorf("%s: values off the float32 file's by up to %.3g", name, worst)
		}
	}
}
