package cpu

import (
	"math"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

var _ device.VisionOps = (*Ops)(nil)

// LayerNorm accumulates the mean and variance in float64: torch's float32
// kernel differs from it by rounding only, far inside the 2e-4 budget.
func (o *Ops) LayerNorm(x tensor.T, w, b device.Vector, eps float64) tensor.T {
	weight, bias := w.(vector), b.(vector)
	n := len(weight)
	out := o.arena.new(x.Shape...)
	for r := 0; r < len(x.HostData())/n; r++ {
		row, dst := x.HostData()[r*n:(r+1)*n], out.HostData()[r*n:(r+1)*n]
		var mean, sq float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(n)
		for _, v := range row {
			d := float64(v) - mean
			sq += d * d
		}
		inv := 1 / math.Sqrt(sq/float64(n)+eps)
		for i, v := range row {
			dst[i] = float32((float64(v)-mean)*inv)*weight[i] + bias[i]
		}
	}
	return out
}

func (o *Ops) GELU(x tensor.T) {
	for i, v := range x.HostData() {
		f := float64(v)
		x.HostData()[i] = float32(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
	}
}

func (o *Ops) GELUTanh(x tensor.T) {
	for i, v := range x.HostData() {
		x.HostData()[i] = GeLUTanh(v)
	}
}

func (o *Ops) SetRows(dst tensor.T, rows []int32, src tensor.T) {
	for i, r := range rows {
		copy(dst.Row(int(r)), src.Row(i))
	}
}

func (o *Ops) AvgPool(x tensor.T, gridH, gridW, k int) tensor.T {
	width := x.Cols()
	oh, ow := gridH/k, gridW/k
	out := o.arena.new(oh*ow, width)
	clear(out.HostData())
	area := float32(k * k) // divided, not multiplied by 1/area: torch's avg_pool2d rounding
	for y := range oh * k {
		for xx := range ow * k {
			dst := out.Row((y/k)*ow + xx/k)
			for i, v := range x.Row(y*gridW + xx) {
				dst[i] += v
			}
		}
	}
	for i := range out.HostData() {
		out.HostData()[i] /= area
	}
	return out
}

// Upload returns x: host tensors are the CPU's activations.
func (o *Ops) Upload(x tensor.T) tensor.T { return x }
