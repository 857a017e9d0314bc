package gemma2

import (
	"math"

	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

func TestEmbedScale(t *testing.T) {
	for _, tc := range []struct {
		hidden int
		dtype  tensor.DType
		want   float32
	}{
		{64, tensor.F32, 8},
		{3584, tensor.F32, float32(math.Sqrt(3584))},
		{3584, tensor.BF16, 59.75},
		{3584, tensor.F16, 59.875},
	} {
		if got := embedScale(tc.hidden, tc.dtype); got != tc.want {
			t.Errorf("embedScale(%d, %v) = %v, want %v", tc.hidden, tc.dtype, got, tc.want)
		}
	}
}
