package engine

import (
	"testing"

	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// gpuWeightDType: --dtype names the GPU's weight dtype; auto takes a
// 16-bit checkpoint's own, bf16 for a GGUF file of quantised blocks
// (its embedding's dtype is the file's torch_dtype), float32 otherwise.
func TestGPUWeightDType(t *testing.T) {
	for _, tc := range []struct {
		dtype, torch string
		want         tensor.DType
	}{
		{"", "bfloat16", tensor.BF16},
		{"auto", "float16", tensor.F16},
		{"", "float32", tensor.F32},
		{"", "q8_0", tensor.BF16},
		{"auto", "q4_k", tensor.BF16},
		{"", "q6_k", tensor.BF16},
		{"", "iq4_xs", tensor.BF16},
		{"float32", "q4_k", tensor.F32},
		{"float16", "q4_k", tensor.F16},
		{"", "", tensor.F32},
	} {
		e := &Engine{cfg: Config{DType: tc.dtype}, checkpoint: &model.Checkpoint{Config: model.Config{TorchDType: tc.torch}}}
		if got := e.gpuWeightDType(); got != tc.want {
			t.Errorf("--dtype %q, torch_dtype %q: %v, want %v", tc.dtype, tc.torch, got, tc.want)
		}
	}
}
