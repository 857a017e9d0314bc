package cpu

import (
	"math"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

func TestGeLUTanh(t *testing.T) {
	// 0.5x(1+tanh(√(2/π)(x+0.044715x³))), the formula of PyTorch's
	// gelu(approximate="tanh"), evaluated in float64.
	for _, tc := range []struct{ x, want float64 }{
		{0, 0}, {1, 0.8411919906082768}, {-1, -0.15880800939172324}, {3, 2.996362607918227}, {-3, -0.0036373920817729943},
	} {
		if got := GeLUTanh(float32(tc.x)); math.Abs(float64(got)-tc.want) > 1e-6 {
			t.Errorf("GeLUTanh(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	gate := tensor.From([]float32{1, -1}, 1, 2)
	GeLUTanhMul(gate, tensor.From([]float32{2, 3}, 1, 2))
	if math.Abs(float64(gate.HostData()[0])-2*0.8411919906082768) > 1e-6 || math.Abs(float64(gate.HostData()[1])+3*0.15880800939172324) > 1e-6 {
		t.Errorf("GeLUTanhMul: %v", gate.HostData())
	}
}

func TestSoftcap(t *testing.T) {
	x := []float32{0, 15, -1000, 3}
	Softcap(x, 15)
	want := []float64{0, 15 * math.Tanh(1), -15, 15 * math.Tanh(0.2)}
	for i := range x {
		if math.Abs(float64(x[i])-want[i]) > 1e-5 {
			t.Errorf("Softcap: %v, want %v", x, want)
			break
		}
	}
	y := []float32{100}
	Softcap(y, 0)
	if y[0] != 100 {
		t.Errorf("cap 0 must leave values unchanged, got %v", y)
	}
}
