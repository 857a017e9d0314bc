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

// split3_f32: the columns of one product of adjacent matrices (q, k, v)
// into their own outputs, each with its optional bias.
//
//	src: [rows, n0+n1+n2] dense   out_i: [rows, n_i] dense   bias_i: [n_i] or null
//
// Launch: grid (ceil((n0+n1+n2)/256), min(rows, 65535)), block 256;
// blocks stride over the rows.
extern "C" __global__ void split3_f32(const float* src, i64 rows, float* out0, const float* bias0, int n0, float* out1,
                                      const float* bias1, int n1, float* out2, const float* bias2, int n2) {
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	const int n = n0 + n1 + n2;
	if (c >= n) return;
	float* out = out0;
	const float* bias = bias0;
	int w = n0;
	if (c >= n0 + n1) {
		c -= n0 + n1, out = out2, bias = bias2, w = n2;
	} else if (c >= n0) {
		c -= n0, out = out1, bias = bias1, w = n1;
	}
	const float b = bias ? bias[c] : 0.f;
	for (i64 r = blockIdx.y; r < rows; r += gridDim.y) out[r * w + c] = src[r * n + (blockIdx.x * blockDim.x + threadIdx.x)] + b;
}

// add_row_f32: x[r, c] += row[c] (a bias added to every output row).
//
//	x: [rows, cols] dense   row: [cols]
extern "C" __global__ void add_row_f32(float* x, const float* row, i64 rows, int cols) {
	FOR_EACH(i, rows * cols) { x[i] += row[i % cols]; }
}
