package registry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

// TestAWQ: reference models written in AutoAWQ's GEMM layout (int32
// qweight and qzeros, float16 scales, groups of 32) load with their
// projections as AWQ4 matrices, and their logits (the CPU's I4 panels
// over float32 activations) equal those of the same models with the
// dequantized values stored plainly in float32, within 1e-4: the int4
// unpacking (nibble order, zero points, the transposition) is what the
// two share nothing of.
func TestAWQ(t *testing.T) {
	for _, name := range []string{"llama_gqa", "qwen2_bias", "qwen3_moe"} {
		t.Run(name, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+name)
			ref := modeltest.LoadReference(t, dir)
			quantized, dequantized := t.TempDir(), t.TempDir()
			names, err := random.WriteAWQ(dir, quantized, dequantized, 32)
			if err != nil {
				t.Fatal(err)
			}
			ck, got := promptLogits(t, quantized, ref.InputIDs)
			for _, n := range names {
				w, err := ck.Weights.Tensor(n)
				if err != nil || w.DType != tensor.AWQ4_G32 {
					t.Fatalf("%s: %v %v, want an AWQ4_G32 matrix", n, w.DType, err)
				}
			}
			base := strings.TrimSuffix(names[0], ".weight")
			if ck.Weights.Has(base+".qweight") || !ck.Weights.Has(names[0]) {
				t.Errorf("%s's qweight must be presented as %s", base, names[0])
			}
			_, want := promptLogits(t, dequantized, ref.InputIDs)
			if d := maxDiff(want, got); d > 1e-4 {
				t.Errorf("AWQ load vs dequantized checkpoint: max |Δ logit| = %.3g, want ≤ 1e-4", d)
			}
			_, full := promptLogits(t, dir, ref.InputIDs)
			t.Logf("%d AWQ matrices; logits max |Δ| vs dequantized %.3g, vs the float32 model %.3g", len(names), maxDiff(want, got), maxDiff(full, got))
		})
	}
}

// TestAWQRefusals: a configuration gosling does not read, and a qweight,
// qzeros or scales whose shape disagrees with the config, are errors
// naming the field or tensor and the value.
func TestAWQRefusals(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	quantized := t.TempDir()
	if _, err := random.WriteAWQ(dir, quantized, t.TempDir(), 32); err != nil {
		t.Fatal(err)
	}
	checkConfigRefusals(t, quantized, []configEdit{
		{`"group_size": 32`, `"group_size": 256`, "quantization_config.group_size 256 is not supported (AWQ groups of 32, 64 or 128)"},
		{`"group_size": 32`, `"group_size": -1`, "quantization_config.group_size -1 is not supported"},
		{`"bits": 4`, `"bits": 8`, "quantization_config.bits 8 is not supported (AWQ 4-bit only)"},
		{`"version": "gemm"`, `"version": "gemv"`, `quantization_config.version "gemv" is not supported`},
		{`"zero_point": true`, `"zero_point": false`, "quantization_config.zero_point false is not supported"},
		// down_proj has 160 inputs: not whole groups of 64.
		{`"group_size": 32`, `"group_size": 64`, "tensor model.layers.0.mlp.down_proj.qweight has shape [160 8]: 160 inputs are not whole groups of 64"},
	})
}

// configEdit replaces from with to in a checkpoint's config.json; opening
// it must then fail with an error containing want.
type configEdit struct{ from, to, want string }

// checkConfigRefusals applies each edit to the original config.json of
// the checkpoint in dir and opens it.
func checkConfigRefusals(t *testing.T, dir string, edits []configEdit) {
	t.Helper()
	cfgPath := filepath.Join(dir, "config.json")
	orig, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range edits {
		cfg := strings.Replace(string(orig), tc.from, tc.to, 1)
		if cfg == string(orig) {
			t.Fatalf("config.json has no %s", tc.from)
		}
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		ck, err := model.Open(dir)
		if err == nil {
			ck.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.to, err, tc.want)
		}
	}
}
