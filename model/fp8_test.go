package model

import (
	"math"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

func TestFP8Linear(t *testing.T) {
	for name, want := range map[string]bool{
		"model.layers.0.self_attn.q_proj.weight":              true,
		"model.layers.3.mlp.experts.7.down_proj.weight":       true,
		"model.layers.0.block_sparse_moe.experts.0.w1.weight": true,
		"model.embed_tokens.weight":                           false,
		"lm_head.weight":                                      false,
		"model.layers.0.mlp.gate.weight":                      false,
		"model.layers.0.block_sparse_moe.gate.weight":         false,
		"model.layers.0.mlp.shared_expert_gate.weight":        false,
		"model.layers.0.mlp.router.weight":                    false,
		"visual.blocks.0.attn.qkv.weight":                     false,
		"model.layers.0.self_attn.q_proj.bias":                false,
		"model.layers.0.self_attn.q_proj.weight_scale":        false,
	} {
		if got := FP8Linear(name); got != want {
			t.Errorf("FP8Linear(%s) = %v, want %v", name, got, want)
		}
	}
}

// TestFP8Quantizer: --quantization fp8 quantises a float checkpoint's
// projections per output channel (each row within e4m3's rounding of the
// original), hands an fp8 checkpoint's weights over as stored (the same
// values Tensor widens), and refuses a block-quantised weight by name.
func TestFP8Quantizer(t *testing.T) {
	src := shared.Path(t, "models/reference-tiny/llama_gqa")
	ckpt, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ckpt.Close()
	q, err := QuantizeFP8(ckpt.Weights)
	if err != nil {
		t.Fatal(err)
	}
	const name = "model.layers.1.mlp.down_proj.weight"
	s, ok, err := q.TensorFP8(name)
	if err != nil || !ok || !s.PerRow() || s.BlockRows != 1 {
		t.Fatalf("TensorFP8(%s): ok %v, err %v, blocks %dx%d", name, ok, err, s.BlockRows, s.BlockCols)
	}
	orig, _ := ckpt.Weights.Tensor(name)
	vals := orig.Float32()
	row := make([]float32, s.In())
	for o := range s.Out() {
		s.WidenRow(o, row)
		var amax float64
		for _, v := range vals[o*s.In() : (o+1)*s.In()] {
			amax = max(amax, math.Abs(float64(v)))
		}
		if got := float64(s.RowScales()[o]); math.Abs(got-amax/448) > 1e-7*amax {
			t.Fatalf("row %d: scale %g, max|w|/448 %g", o, got, amax/448)
		}
		for i, v := range row {
			// e4m3 keeps 3 mantissa bits: half a step is 2^-4 relative, and
			// the subnormal step (2^-9 of the scale) below 2^-6.
			w := float64(vals[o*s.In()+i])
			if d := math.Abs(float64(v) - w); d > math.Abs(w)/16+float64(s.RowScales()[o])/1024 {
				t.Fatalf("row %d col %d: %g quantised to %g", o, i, w, v)
			}
		}
	}
	if _, ok, _ := q.TensorFP8("model.embed_tokens.weight"); ok {
		t.Error("the embedding table was quantised")
	}
	if q.Served() != 1 {
		t.Errorf("Served() = %d, want 1", q.Served())
	}

	// An fp8 checkpoint in 32x32 blocks: served as stored.
	dir := t.TempDir()
	if _, err := random.WriteFP8(src, dir, []int{32, 32}); err != nil {
		t.Fatal(err)
	}
	fc, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	fq, _ := QuantizeFP8(fc.Weights)
	s, ok, err = fq.TensorFP8(name)
	if err != nil || !ok || s.BlockRows != 32 || s.BlockCols != 32 {
		t.Fatalf("fp8 checkpoint: ok %v, err %v, blocks %dx%d", ok, err, s.BlockRows, s.BlockCols)
	}
	wide, _ := fc.Weights.Tensor(name)
	if got, want := s.Widen(tensor.F32).Float32(), wide.Float32(); !equalF32(got, want) {
		t.Error("TensorFP8 widened differs from Tensor")
	}

	// A Q8_0 projection is refused by name.
	q8, err := tensor.Convert(orig, tensor.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	gq, _ := QuantizeFP8(mapWeights{name: q8})
	if _, _, err := gq.TensorFP8(name); err == nil || !strings.Contains(err.Error(), name+" is stored as Q8_0") {
		t.Errorf("Q8_0 weight: err = %v", err)
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
