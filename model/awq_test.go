package model

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/model/safetensors"
)

// TestAWQShapeRefusals: a layer whose qzeros or scales disagree with its
// qweight and the group size, or are stored in another dtype, is refused
// with the tensor and its shape or dtype named.
func TestAWQShapeRefusals(t *testing.T) {
	q := &quantConfig{awqGroup: 32}
	for _, tc := range []struct {
		ts   []safetensors.Tensor
		want string
	}{
		{[]safetensors.Tensor{
			{Name: "x.qweight", DType: "I32", Shape: []int{64, 2}, Data: make([]byte, 4*64*2)},
			{Name: "x.qzeros", DType: "I32", Shape: []int{3, 2}, Data: make([]byte, 4*3*2)},
			{Name: "x.scales", DType: "F16", Shape: []int{2, 16}, Data: make([]byte, 2*2*16)},
		}, "tensor x.qzeros has shape [3 2]; x.qweight [64 2] in groups of 32 implies [2 2]"},
		{[]safetensors.Tensor{
			{Name: "x.qweight", DType: "I32", Shape: []int{64, 2}, Data: make([]byte, 4*64*2)},
			{Name: "x.qzeros", DType: "I32", Shape: []int{2, 2}, Data: make([]byte, 4*2*2)},
			{Name: "x.scales", DType: "F16", Shape: []int{2, 8}, Data: make([]byte, 2*2*8)},
		}, "tensor x.scales has shape [2 8]; x.qweight [64 2] in groups of 32 implies [2 16]"},
		{[]safetensors.Tensor{
			{Name: "x.qweight", DType: "I32", Shape: []int{64, 2}, Data: make([]byte, 4*64*2)},
			{Name: "x.qzeros", DType: "I32", Shape: []int{2, 2}, Data: make([]byte, 4*2*2)},
			{Name: "x.scales", DType: "BF16", Shape: []int{2, 16}, Data: make([]byte, 2*2*16)},
		}, "tensor x.scales is BF16 [2 16]; AWQ stores it as 2-D F16"},
		{[]safetensors.Tensor{
			{Name: "x.qweight", DType: "I32", Shape: []int{48, 2}, Data: make([]byte, 4*48*2)},
		}, "tensor x.qweight has shape [48 2]: 48 inputs are not whole groups of 32"},
		{[]safetensors.Tensor{
			{Name: "x.qweight", DType: "I32", Shape: []int{64, 2}, Data: make([]byte, 4*64*2)},
		}, "AWQ layer x: "},
	} {
		path := filepath.Join(t.TempDir(), "model.safetensors")
		if err := safetensors.Write(path, tc.ts); err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = newAWQSource(f, q)
		f.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}
