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
		args := new(Args).Ptr(DevicePtr(out.Dev)).Ptr(DevicePtr(x.Dev)).Ptr(wv.ptr).Ptr(bv.ptr).Int32(wv.n).Float32(float32(eps))
		return o.k.launch("layernorm_f32", LaunchConfig{Grid: D1(x.Rows()), Block: D1(256)}, o.stream, args)
	})
	return out
}

// GELU sets x = x·Φ(x) in place (erf form).
func (o *ModelOps) GELU(x tensor.T) { o.pointwise("GELU", "gelu_f32", x) }

// GELUTanh sets x = gelu_tanh(x) in place.
func (o *ModelOps) GELUTanh(x tensor.T) { o.pointwise("GELUTanh", "gelu_tanh_f32", x) }

func (o *ModelOps) pointwise(op, kernel string, x tensor.T) {
	must(op, checkActivation("x", x))
	n := x.NumElements()
	if n == 0 {
		return
	}
	o.do(op, func() error {
		return o.k.launch(kernel, flatConfig(n), o.stream, new(Args).Ptr(DevicePtr(x.Dev)).Int64(int64(n)))
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
		args := new(Args).Ptr(DevicePtr(dst.Dev)).Ptr(DevicePtr(s.Dev)).Ptr(dRows).Int32(len(rows)).Int32(dst.Cols())
		return o.k.launch("set_rows_f32", flatConfig(n), o.stream, args)
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
		args := new(Args).Ptr(DevicePtr(out.Dev)).Ptr(DevicePtr(x.Dev)).Int32(gridW).Int32(oh).Int32(ow).Int32(k).Int32(width)
		return o.k.launch("avg_pool_f32", flatConfig(oh*ow*width), o.stream, args)
	})
	return out
}
