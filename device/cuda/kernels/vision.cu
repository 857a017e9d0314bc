// Vision-encoder kernels (device.VisionOps), float32 activations.

// LayerNorm over rows of n values: (x − mean)/sqrt(var + eps)·w + b, the
// biased variance (torch.nn.LayerNorm), two passes over the row.
//
//	out, x: [rows, n]   w, b: [n]
// Launch: grid rows, block 256.
extern "C" __global__ void layernorm_f32(float* out, const float* x, const float* w, const float* b, int n, float eps) {
	const float* row = x + (i64)blockIdx.x * n;
	float* dst = out + (i64)blockIdx.x * n;
	float s = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) s += row[i];
	const float mean = block_sum(s) / n;
	float sq = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		const float d = row[i] - mean;
		sq += d * d;
	}
	const float inv = rsqrtf(block_sum(sq) / n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = (row[i] - mean) * inv * w[i] + b[i];
}

// GELU in place: exact (erf, torch's nn.GELU()) or the tanh form.
//	x: [n]
extern "C" __global__ void gelu_f32(float* x, i64 n) {
	FOR_EACH(i, n) { x[i] = 0.5f * x[i] * (1.f + erff(x[i] * 0.7071067811865476f)); }
}
extern "C" __global__ void gelu_tanh_f32(float* x, i64 n) {
	FOR_EACH(i, n) { x[i] = gelu_tanh(x[i]); }
}

// dst[rows[r]] = src[r] for each of n_rows rows of width values.
//	dst: [*, width]   src: [n_rows, width]   rows: [n_rows]
// Launch: 1-D grid over n_rows·width.
extern "C" __global__ void set_rows_f32(float* dst, const float* src, const int* rows, int n_rows, int width) {
	FOR_EACH(i, (i64)n_rows * width) {
		const i64 r = i / width, c = i - r * width;
		dst[(i64)rows[r] * width + c] = src[i];
	}
}

// Average of k×k blocks of a grid_h×grid_w grid of rows (row-major):
// out row (y, x) = Σ of in rows (y·k+dy, x·k+dx) / k² (divided, as torch's
// avg_pool2d rounds).
//	x: [grid_h·grid_w, width]   out: [(grid_h/k)·(grid_w/k), width]
// Launch: 1-D grid over the output's elements.
extern "C" __global__ void avg_pool_f32(float* out, const float* x, int grid_w, int oh, int ow, int k, int width) {
	FOR_EACH(i, (i64)oh * ow * width) {
		const i64 o = i / width;
		const int c = (int)(i - o * width), oy = (int)(o / ow), ox = (int)(o % ow);
		float s = 0.f;
		for (int dy = 0; dy < k; dy++)
			for (int dx = 0; dx < k; dx++) s += x[((i64)(oy * k + dy) * grid_w + ox * k + dx) * width + c];
		out[i] = s / (float)(k * k);
	}
}
