package cpu

import (
	"fmt"

	"github.com/gosling-ai/gosling/tensor"
)

// Linear is y = x·Wᵀ (+ b) with W stored [out, in] in any weight dtype.
// F32, BF16, F16, Q8_0, the other GGUF block formats and AWQ4 are served
// in their own dtype (converted in registers by the kernels; qk.go,
// i4.go); others are widened to F32 at load.
type Linear struct {
	W    tensor.Weight
	Bias []float32 // nil when absent

	packed packedWeight
}

// NewLinear prepares a linear layer, repacking W into the kernels' panel
// layout (a copy; W itself may alias a read-only memory map). It panics on
// a weight whose bytes do not match its dtype and shape, which every
// weight source checks before handing a tensor out.
func NewLinear(w tensor.Weight, bias []float32) *Linear {
	return newLinear(w, bias, weightBytes)
}

// newLinear is NewLinear with the packed weights in memory from alloc.
func newLinear(w tensor.Weight, bias []float32, alloc func(int) []byte) *Linear {
	p, err := packWeight(w, alloc)
	if err != nil {
		panic(fmt.Sprintf("cpu.NewLinear: %v", err))
	}
	return &Linear{W: w, Bias: bias, packed: p}
}

// Out is the output width.
func (l *Linear) Out() int { return l.W.Rows() }

// In is the input width.
func (l *Linear) In() int { return l.W.Cols() }

// DType is the dtype the weights are served in.
func (l *Linear) DType() tensor.DType {
	if l.packed.kind == kindQK || l.packed.kind == kindI4 {
		return l.W.DType
	}
	return [...]tensor.DType{kindF32: tensor.F32, kindBF16: tensor.BF16, kindF16: tensor.F16, kindQ8: tensor.Q8_0}[l.packed.kind]
}

// Bytes is the memory one pass over the weights reads (panel padding
// excluded): the numerator of the decode roofline.
func (l *Linear) Bytes() int64 { return l.packed.bytes() }

// Forward computes out[t, o] = Σ_i x[t, i]·W[o, i] + b[o].
//
//	x: [T, In] → out: [T, Out]
//
// The weights are read from memory once for all T tokens (decode of a
// batch reads them once per step); see gemm.go.
func (l *Linear) Forward(w *Workers, x tensor.T) tensor.T {
	return ForwardGroup(w, x, l)[0]
}
