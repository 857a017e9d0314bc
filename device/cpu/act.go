package cpu

import (
	"math"

	"github.com/gosling-ai/gosling/tensor"
)

// sqrt2OverPi is the constant of GeLU's tanh approximation.
const sqrt2OverPi = 0.7978845608028654

// GeLUTanh is GeLU with the tanh approximation (PyTorch's
// gelu(approximate="tanh"), transformers' "gelu_pytorch_tanh"), evaluated
// in float64 and rounded once.
func GeLUTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(sqrt2OverPi*(v+0.044715*v*v*v))))
}

// GeLUTanhMul computes gate = gelu_tanh(gate) * up, in place in gate.
func GeLUTanhMul(gate, up tensor.T) {
	for i, g := range gate.HostData() {
		gate.HostData()[i] = GeLUTanh(g) * up.HostData()[i]
	}
}

// ClampedSwiGLU is GPT-OSS's expert activation (see
// device.ClampedSwiGLUOps), in place: float32 throughout, as transformers
// computes it in the weights' dtype.
func ClampedSwiGLU(gate, up []float32, alpha, limit float32) {
	for i, g := range gate {
		g = min(g, limit)
		u := min(max(up[i], -limit), limit)
		gate[i] = (u + 1) * g * Sigmoid(alpha*g)
	}
}

// Softcap squashes every value into (-cap, cap) as cap*tanh(x/cap), in
// place (Gemma 2's final-logit softcap). cap <= 0 leaves x unchanged.
func Softcap(x []float32, cap float32) {
	if cap <= 0 {
		return
	}
	for i, v := range x {
		x[i] = cap * float32(math.Tanh(float64(v/cap)))
	}
}

// Scale multiplies every value by s, in place.
func Scale(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// Sigmoid is 1/(1+e^-x) in float64, rounded once.
func Sigmoid(x float32) float32 {
	return float32(1 / (1 + math.Exp(-float64(x))))
}
