package cuda

import (
	"fmt"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// The vision encoders' operations (device.VisionOps, kernels/vision.cu),
// on float32 activations like the rest of ModelOps.

var _ device.VisionOps = (*ModelOps)(nil)

// LayerNorm returns (x − mean)/sqrt(var + eps)·w + b over rows of w.Len()
// values.  x: [T, n]
func (o *ModelOps) LayerNorm(x tensor.T, w, b device.Vector, eps float64) tensor.T {
	const op = "LayerNorm"
	wv, bv := asVector(op, w), asVector(op, b)
	must(op, checkActivation("x", x))
	if wv.n != bv.n || x.Cols() != wv.n {
		must(op, fmt.Errorf("x has %d columns, weight %d, bias %d", x.Cols(), wv.n, bv.n))
	}
	var out tensor.T
	o.do(op, func() (err error) {
		if out, err = o.newTensor(x.Shape); err != nil || x.Rows() == 0 {
			return err
		}
		return o.k.launchLayerNormF32(o.stream, LaunchConfig{Grid: D1(x.Rows()), Block: D1(256)},
			layerNormF32Args{Out: DevicePtr(out.DevPtr()), X: DevicePtr(x.DevPtr()), W: wv.ptr, B: bv.ptr, N: wv.n, Eps: float32(eps)})
	})
	return out
}

// GELU sets x = x·Φ(x) in place (erf form).
func (o *ModelOps) GELU(x tensor.T) { o.pointwise("GELU", "gelu", x) }

// GELUTanh sets x = gelu_tanh(x) in place.
func (o *ModelOps) GELUTanh(x tensor.T) { o.pointwise("GELUTanh", "gelu_tanh", x) }

// pointwise runs the GELU kernel of form (gelu_f32 or gelu_tanh_f32) over x.
func (o *ModelOps) pointwise(op, form string, x tensor.T) {
	must(op, checkActivation("x", x))
	n := x.NumElements()
	if n == 0 {
		return
	}
	o.do(op, func() error {
		return o.k.launchGeLUF32(o.stream, flatConfig(n), form, geLUF32Args{X: DevicePtr(x.DevPtr()), N: n})
	})
}

// SetRows overwrites rows[i] of dst with row i of src, a host tensor
// [len(rows), dst's width], uploaded through the forward's arena.
func (o *ModelOps) SetRows(dst tensor.T, rows []int32, src tensor.T) {
	const op = "SetRows"
	must(op, checkActivation("dst", dst))
	must(op, checkRows(rows, dst.Rows()))
	if src.OnDevice() || src.Rows() != len(rows) || (len(rows) > 0 && src.Cols() != dst.Cols()) {
		must(op, fmt.Errorf("src %v (on device: %v) for %d rows of width %d", src.Shape, src.OnDevice(), len(rows), dst.Cols()))
	}
	if len(rows) == 0 {
		return
	}
	s := o.Upload(src)
	o.do(op, func() error {
		dRows, err := o.uploadIndex(rows)
		if err != nil {
			return err
		}
		n := len(rows) * dst.Cols()
		return o.k.launchSetRowsF32(o.stream, flatConfig(n),
			setRowsF32Args{Dst: DevicePtr(dst.DevPtr()), Src: DevicePtr(s.DevPtr()), Rows: dRows, NRows: len(rows), Width: dst.Cols()})
	})
}

// AvgPool averages x, a gridH×gridW grid of rows, over k×k blocks (the
// last partial blocks dropped, as on the CPU).
func (o *ModelOps) AvgPool(x tensor.T, gridH, gridW, k int) tensor.T {
	const op = "AvgPool"
	must(op, checkActivation("x", x))
	if k <= 0 || x.Rows() != gridH*gridW {
		must(op, fmt.Errorf("x has %d rows for a %dx%d grid pooled by %d", x.Rows(), gridH, gridW, k))
	}
	oh, ow, width := gridH/k, gridW/k, x.Cols()
	var out tensor.T
	o.do(op, func() (err error) {
		if out, err = o.newTensor([]int{oh * ow, width}); err != nil {
			return err
		}
		return o.k.launchAvgPoolF32(o.stream, flatConfig(oh*ow*width),
			avgPoolF32Args{Out: DevicePtr(out.DevPtr()), X: DevicePtr(x.DevPtr()), GridW: gridW, Oh: oh, Ow: ow, K: k, Width: width})
	})
	return out
}
