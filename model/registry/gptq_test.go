package registry

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/model/safetensors"
	"github.com/gosling-ai/gosling/tensor"
)

// TestGPTQ: reference models written in GPTQ's layout (qweight packing
// eight inputs per int32, qzeros eight outputs, float16 scales, g_idx;
// groups of 32, 64 and one per row; symmetric and min-max; zero points
// stored as z − 1 in the original format and as z in gptq_v2) load with
// their projections as AWQ4 matrices whose every value is the dequantized
// twin's float32 value bit for bit, and whose logits (I4 panels over
// float32 activations on the CPU) equal the twin's within 1e-4.
func TestGPTQ(t *testing.T) {
	for _, tc := range []struct {
		model string
		o     random.GPTQOptions
	}{
		{"llama_gqa", random.GPTQOptions{Group: 32, Sym: true}},
		{"llama_gqa", random.GPTQOptions{Group: 64, V2: true}},
		{"qwen2_bias", random.GPTQOptions{Group: -1}},
		{"qwen3_moe", random.GPTQOptions{Group: 32, V2: true}},
	} {
		t.Run(fmt.Sprintf("%s/%+v", tc.model, tc.o), func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+tc.model)
			ref := modeltest.LoadReference(t, dir)
			quantized, dequantized := t.TempDir(), t.TempDir()
			names, err := random.WriteGPTQ(dir, quantized, dequantized, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if len(names) == 0 {
				t.Fatal("no matrix was quantized")
			}
			ck, got := promptLogits(t, quantized, ref.InputIDs)
			twin, want := promptLogits(t, dequantized, ref.InputIDs)
			dtypes := map[tensor.DType]int{}
			for _, n := range names {
				w, err := ck.Weights.Tensor(n)
				if err != nil {
					t.Fatal(err)
				}
				dtypes[w.DType]++
				if !tensor.IsBlockQuant(w.DType) || w.DType == tensor.MXFP4 {
					t.Fatalf("%s: %v, want an AWQ4 matrix", n, w.DType)
				}
				tw, err := twin.Weights.Tensor(n)
				if err != nil {
					t.Fatal(err)
				}
				vals, row := tw.Float32(), make([]float32, w.Cols())
				for o := range w.Rows() {
					w.DecodeRow(o, row)
					for k, v := range row {
						if math.Float32bits(v) != math.Float32bits(vals[o*w.Cols()+k]) {
							t.Fatalf("%s [%d, %d] = %v, the twin's %v", n, o, k, v, vals[o*w.Cols()+k])
						}
					}
				}
			}
			base := strings.TrimSuffix(names[0], ".weight")
			for _, part := range []string{".qweight", ".g_idx"} {
				if ck.Weights.Has(base + part) {
					t.Errorf("%s%s must be presented as %s", base, part, names[0])
				}
			}
			if d := maxDiff(want, got); d > 1e-4 {
				t.Errorf("GPTQ load vs dequantized checkpoint: max |Δ logit| = %.3g, want ≤ 1e-4", d)
			}
			t.Logf("%d GPTQ matrices as %v; logits max |Δ| vs dequantized %.3g", len(names), dtypes, maxDiff(want, got))
		})
	}
}

// TestGPTQRefusals: a GPTQ configuration gosling does not read, and a
// qweight whose shape disagrees with it, are errors naming the field or
// tensor and the value.
func TestGPTQRefusals(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	quantized := t.TempDir()
	if _, err := random.WriteGPTQ(dir, quantized, t.TempDir(), random.GPTQOptions{Group: 32, Sym: true}); err != nil {
		t.Fatal(err)
	}
	checkConfigRefusals(t, quantized, []configEdit{
		{`"group_size": 32`, `"group_size": 256`, "quantization_config.group_size 256 is not supported (GPTQ groups of 32, 64, 128 or -1)"},
		{`"group_size": 32`, `"group_size": 16`, "quantization_config.group_size 16 is not supported"},
		{`"bits": 4`, `"bits": 8`, "quantization_config.bits 8 is not supported (GPTQ 4-bit only)"},
		{`"bits": 4`, `"bits": 2`, "quantization_config.bits 2 is not supported (GPTQ 4-bit only)"},
		{`"desc_act": false`, `"desc_act": true`, "quantization_config.desc_act true is not supported"},
		{`"checkpoint_format": "gptq"`, `"checkpoint_format": "gptq_v3"`, `quantization_config.checkpoint_format "gptq_v3" is not supported`},
		// down_proj has 160 inputs: not whole groups of 64 or 128.
		{`"group_size": 32`, `"group_size": 64`, "tensor model.layers.0.mlp.down_proj.qweight has shape [20 64]: 160 inputs are not whole groups of 64"},
		{`"group_size": 32`, `"group_size": 128`, "tensor model.layers.0.mlp.down_proj.qweight has shape [20 64]: 160 inputs are not whole groups of 128"},
		// The g_idx of groups of 32 (input k in group k/32) read as
		// groups of one per row.
		{`"group_size": 32`, `"group_size": -1`, "tensor model.layers.0.mlp.down_proj.qzeros has shape [5 8]; model.layers.0.mlp.down_proj.qweight [20 64] in groups of -1 implies [1 8]"},
	})
}

// TestGPTQTensorRefusals: a GPTQ layer whose g_idx puts an input out of
// its consecutive group (act-order's permutation under desc_act false),
// or whose qweight, qzeros or g_idx disagree in shape, is refused with the
// tensor and the value named.
func TestGPTQTensorRefusals(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	quantized := t.TempDir()
	if _, err := random.WriteGPTQ(dir, quantized, t.TempDir(), random.GPTQOptions{Group: 32}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(quantized, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var orig []safetensors.Tensor
	for _, n := range f.Names() {
		r, err := f.Raw(n)
		if err != nil {
			t.Fatal(err)
		}
		orig = append(orig, safetensors.Tensor{Name: n, DType: r.DType, Shape: r.Shape, Data: slices.Clone(r.Data)})
	}
	f.Close()
	const layer = "model.layers.1.self_attn.o_proj" // [64, 64]: qweight [8 64]
	for _, tc := range []struct {
		edit func(t *safetensors.Tensor)
		want string
	}{
		{func(t *safetensors.Tensor) {
			if t.Name == layer+".g_idx" {
				binary.LittleEndian.PutUint32(t.Data[4*40:], 0) // input 40 in group 0
			}
		}, "tensor " + layer + ".g_idx[40] is 0, not 1: inputs out of order (act-order) are not supported"},
		{func(t *safetensors.Tensor) {
			if t.Name == layer+".g_idx" {
				t.Shape, t.Data = []int{32}, t.Data[:4*32]
			}
		}, "tensor " + layer + ".g_idx has shape [32]; " + layer + ".qweight [8 64] implies [64]"},
		{func(t *safetensors.Tensor) {
			if t.Name == layer+".qweight" {
				t.Shape, t.Data = []int{8, 60}, t.Data[:4*8*60]
			}
		}, "tensor " + layer + ".qweight has shape [8 60]: 60 outputs are not whole words of 8 zero points"},
		{func(t *safetensors.Tensor) {
			if t.Name == layer+".qweight" {
				t.Shape = []int{4, 128}
			}
		}, "tensor " + layer + ".qzeros has shape [2 8]; " + layer + ".qweight [4 128] in groups of 32 implies [1 16]"},
		{func(t *safetensors.Tensor) {
			if t.Name == layer+".qweight" {
				t.DType = "U32"
			}
		}, "tensor " + layer + ".qweight is U32 [8 64]; GPTQ stores it as 2-D I32"},
	} {
		ts := make([]safetensors.Tensor, len(orig))
		for i, o := range orig {
			ts[i] = o
			ts[i].Data = slices.Clone(o.Data)
			tc.edit(&ts[i])
		}
		if err := safetensors.Write(path, ts); err != nil {
			t.Fatal(err)
		}
		ck, err := model.Open(quantized)
		if err == nil {
			ck.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}
