package cpu

import (
	"math"

	"github.com/gosling-ai/gosling/tensor"
)

// Linear is y = x·Wᵀ (+ b) with W stored [out, in] in any weight dtype.
type Linear struct {
	W    tensor.Weight
	Bias []float32 // nil when absent
	f32  []float32 // W as float32 when it can be viewed without copying
}

// NewLinear prepares a linear layer.
func NewLinear(w tensor.Weight, bias []float32) *Linear {
	l := &Linear{W: w, Bias: bias}
	if w.DType == tensor.F32 {
		l.f32 = w.Float32()
	}
	return l
}

// Out is the output width.
func (l *Linear) Out() int { return l.W.Rows() }

// In is the input width.
func (l *Linear) In() int { return l.W.Cols() }

// Forward computes out[t, o] = Σ_i x[t, i]·W[o, i] + b[o].
//
//	x: [T, In] → out: [T, Out]
//
// Work is split over output rows so each weight row is read once for all T
// tokens (decode of a batch reads the weights once).
func (l *Linear) Forward(w *Workers, x tensor.T) tensor.T {
	in, outDim := l.In(), l.Out()
	nTok := x.Rows()
	out := tensor.New(nTok, outDim)
	w.For(outDim, 16, func(lo, hi int) {
		var scratch []float32
		if l.f32 == nil {
			scratch = make([]float32, in)
		}
		for o := lo; o < hi; o++ {
			var row []float32
			if l.f32 != nil {
				row = l.f32[o*in : (o+1)*in]
			} else {
				l.W.DecodeRow(o, scratch)
				row = scratch
			}
			var b float32
			if l.Bias != nil {
				b = l.Bias[o]
			}
			for t := range nTok {
				out.Data[t*outDim+o] = Dot(row, x.Data[t*in:(t+1)*in]) + b
			}
		}
	})
	return out
}

// Dot is Σ a[i]·b[i] with float32 accumulation over four lanes.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// RMSNorm normalises each row of x in place of out: out = x/rms(x) * weight.
// x and out may alias. Accumulation is float64 for stability across widths.
func RMSNorm(out, x tensor.T, weight []float32, eps float64) {
	cols := x.Cols()
	for r := range x.Rows() {
		xr := x.Data[r*cols : (r+1)*cols]
		or := out.Data[r*cols : (r+1)*cols]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(cols)+eps))
		for i, v := range xr {
			or[i] = v * inv * weight[i]
		}
	}
}

// SiLUMul computes gate = silu(gate) * up, in place in gate.
func SiLUMul(gate, up tensor.T) {
	for i, g := range gate.Data {
		gate.Data[i] = g / (1 + float32(math.Exp(float64(-g)))) * up.Data[i]
	}
}

// Add computes dst += src.
func Add(dst, src tensor.T) {
	for i, v := range src.Data {
		dst.Data[i] += v
	}
}
