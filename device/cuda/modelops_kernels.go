package cuda

// Go wrappers of kernels/model_ops.cu: the element-wise float32 kernels
// device.Ops needs beyond the ones in ops.go.

import "fmt"

// AddF32 sets dst += src.  dst, src: [n] float32
func (k *Kernels) AddF32(s Stream, dst, src DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	return k.launchAddF32(s, flatConfig(n), addF32Args{Dst: dst, Src: src, N: n})
}

// ScaleF32 sets x *= factor.  x: [n] float32
func (k *Kernels) ScaleF32(s Stream, x DevicePtr, n int, factor float32) error {
	if n == 0 {
		return nil
	}
	return k.launchScaleF32(s, flatConfig(n), scaleF32Args{X: x, N: n, S: factor})
}

// AddRowF32 adds row to every row of x (a linear layer's bias).
//
//	x: [rows, cols] float32, dense   row: [cols] float32
//
// Split3F32 copies the columns of src [rows, Σn] to outs[i] [rows, n[i]]
// (at most three), adding biases[i] when not 0.
func (k *Kernels) Split3F32(s Stream, src DevicePtr, rows int, outs, biases []DevicePtr, n []int) error {
	if len(outs) == 0 || len(outs) > 3 || len(biases) != len(outs) || len(n) != len(outs) {
		return fmt.Errorf("split: %d outputs (at most 3), %d biases, %d widths", len(outs), len(biases), len(n))
	}
	if rows == 0 {
		return nil
	}
	var o, b [3]DevicePtr
	var w [3]int
	copy(o[:], outs)
	copy(b[:], biases)
	copy(w[:], n)
	total := w[0] + w[1] + w[2]
	cfg := LaunchConfig{Grid: Dim3{(total + 255) / 256, min(rows, 65535), 1}, Block: D1(256)}
	return k.launchSplit3F32(s, cfg, split3F32Args{Src: src, Rows: rows,
		Out0: o[0], Bias0: b[0], N0: w[0], Out1: o[1], Bias1: b[1], N1: w[1], Out2: o[2], Bias2: b[2], N2: w[2]})
}

func (k *Kernels) AddRowF32(s Stream, x, row DevicePtr, rows, cols int) error {
	if rows == 0 || cols == 0 {
		return nil
	}
	return k.launchAddRowF32(s, flatConfig(rows*cols), addRowF32Args{X: x, Row: row, Rows: rows, Cols: cols})
}
