package model

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/model/safetensors"
)

// TestDecodeMXFP4: the byte layout transformers' MXFP4 dequantization
// defines: value 2j in byte j's low nibble, 2j+1 in its high one, codes
// 0-7 positive E2M1 values and 8-15 their negatives, scale 2^(s-127).
func TestDecodeMXFP4(t *testing.T) {
	blocks := make([]byte, 32)
	blocks[0] = 0x21  // values 0, 1: codes 1 (0.5) and 2 (1)
	blocks[1] = 0xF7  // values 2, 3: codes 7 (6) and 15 (-6)
	blocks[16] = 0x9D // group 1, values 32, 33: codes 13 (-3) and 9 (-0.5)
	dst := make([]float32, 64)
	DecodeMXFP4(blocks, []byte{128, 120}, dst)
	want := map[int]float32{0: 1, 1: 2, 2: 12, 3: -12, 32: -3.0 / 128, 33: -0.5 / 128}
	for i, v := range dst {
		if v != want[i] {
			t.Errorf("value %d = %g, want %g", i, v, want[i])
		}
	}
}

// TestMXFP4Refusals: blocks of a tensor other than GPT-OSS's experts, or
// without their scales, are refused by name.
func TestMXFP4Refusals(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"model.layers.0.self_attn.q_proj_blocks"}, "tensor model.layers.0.self_attn.q_proj_blocks: MXFP4 is read for GPT-OSS's experts"},
		{[]string{"model.layers.0.mlp.experts.down_proj_blocks"}, "has no model.layers.0.mlp.experts.down_proj_scales beside it"},
	} {
		var ts []safetensors.Tensor
		for _, n := range tc.names {
			ts = append(ts, safetensors.Tensor{Name: n, DType: "U8", Shape: []int{1, 1, 1, 16}, Data: make([]byte, 16)})
		}
		path := filepath.Join(t.TempDir(), "model.safetensors")
		if err := safetensors.Write(path, ts); err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = newMXFP4Source(f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.names, err, tc.want)
		}
	}
}
