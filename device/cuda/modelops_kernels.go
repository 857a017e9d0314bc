package cuda

// Go wrappers of kernels/model_ops.cu: the element-wise float32 kernels
// device.Ops needs beyond the ones in ops.go.

// AddF32 sets dst += src.  dst, src: [n] float32
func (k *Kernels) AddF32(s Stream, dst, src DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	args := new(Args).Ptr(dst).Ptr(src).Int64(int64(n))
	return k.launch("add_f32", flatConfig(n), s, args)
}

// ScaleF32 sets x *= factor.  x: [n] float32
func (k *Kernels) ScaleF32(s Stream, x DevicePtr, n int, factor float32) error {
	if n == 0 {
		return nil
	}
	args := new(Args).Ptr(x).Int64(int64(n)).Float32(factor)
	return k.launch("scale_f32", flatConfig(n), s, args)
}

// AddRowF32 adds row to every row of x (a linear layer's bias).
//
//	x: [rows, cols] float32, dense   row: [cols] float32
func (k *Kernels) AddRowF32(s Stream, x, row DevicePtr, rows, cols int) error {
	if rows == 0 || cols == 0 {
		return nil
	}
	args := new(Args).Ptr(x).Ptr(row).Int64(int64(rows)).Int32(cols)
	return k.launch("add_row_f32", flatConfig(rows*cols), s, args)
}
