// The small element-wise kernels of device.Ops that the other files do not
// cover: the residual add, a scalar scale and a linear layer's bias.
// float32 activations only (ModelOps keeps activations in float32).
// Launch: 1-D grid over the elements (grid-stride past the grid cap).

// add_f32: dst += src.  dst, src: [n]
extern "C" __global__ void add_f32(float* dst, const float* src, i64 n) {
	FOR_EACH(i, n) { dst[i] += src[i]; }
}

// scale_f32: x *= s.  x: [n]
extern "C" __global__ void scale_f32(float* x, i64 n, float s) {
	FOR_EACH(i, n) { x[i] *= s; }
}

// add_row_f32: x[r, c] += row[c] (a bias added to every output row).
//
//	x: [rows, cols] dense   row: [cols]
extern "C" __global__ void add_row_f32(float* x, const float* row, i64 rows, int cols) {
	FOR_EACH(i, rows * cols) { x[i] += row[i % cols]; }
}
