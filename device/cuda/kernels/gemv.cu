// Skinny linear layers (decode): y = x·Wᵀ (+ bias) for a few rows of x.
//
//	x: [m, in] in Tw     w: [out, in] in Tw (float or bf16)   bias: [out] float32 or null
//	y: [m, out] float32                                       1 <= m <= GEMV_MAX_ROWS
//
// A decode step reads every weight once and does 2·m flops per weight, so
// the kernel is a stream over W at memory bandwidth: one warp per output
// row, each lane loading 16 bytes of the row at a time (GEMV_UNROLL loads
// in flight), converting in registers and multiplying by all m rows of x
// (read through L1, shared by the block's warps); a warp sum finishes each
// output, accumulated in float32. With bf16 weights x comes in bf16, the
// copy the GEMM path makes too, so a row's result does not depend on which
// path its batch size takes.
//
// in must be a multiple of 8 (16-byte rows for bf16, two float4 for
// float). Launch: block 32·GEMV_WARPS, any grid (blocks stride over the
// rows, GEMV_WARPS / ks at a time); one that fills the GPU once is best.
#define GEMV_MAX_ROWS 8
#define GEMV_WARPS 8
#define GEMV_UNROLL 4

__device__ __forceinline__ void gemv_load8(const float* w, i64 at, float v[8]) {
	const float4 a = __ldg(reinterpret_cast<const float4*>(w + at));
	const float4 b = __ldg(reinterpret_cast<const float4*>(w + at + 4));
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void gemv_load8(const bf16_t* w, i64 at, float v[8]) {
	const uint4 p = __ldg(reinterpret_cast<const uint4*>(w + at));
	const unsigned u[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[2 * i] = __uint_as_float(u[i] << 16);
		v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
	}
}

// dot8 is w[0:8]·x[0:8], x in the weights' type (float, or bf16 rounded
// once by the caller).
__device__ __forceinline__ float gemv_dot8(const float w[8], const float* x) {
	float xv[8];
	gemv_load8(x, 0, xv);
	float s = 0.f;
#pragma unroll
	for (int i = 0; i < 8; i++) s += w[i] * xv[i];
	return s;
}

__device__ __forceinline__ float gemv_dot8(const float w[8], const bf16_t* x) {
	// A plain (generic) load: x may be in shared memory (gemv_bf16_xs).
	const uint4 p = *reinterpret_cast<const uint4*>(x);
	const unsigned u[4] = {p.x, p.y, p.z, p.w};
	float xv[8];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		xv[2 * i] = __uint_as_float(u[i] << 16);
		xv[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
	}
	float s = 0.f;
#pragma unroll
	for (int i = 0; i < 8; i++) s += w[i] * xv[i];
	return s;
}

// One launch serves up to three matrices that share x (q, k and v; gate
// and up): their rows are numbered one after another. Each row is taken by
// ks warps of a block (ks = 1, 2, 4 or 8), each summing a 1/ks share of the
// row, so that matrices with few rows still put enough loads in flight;
// the shares meet in shared memory.
struct GemvMat {
	float* y;
	const void* w;
	const float* bias;
	int out;
};

template <typename Tw>
__device__ void gemv(const Tw* x, int m, int in, int ks, GemvMat a, GemvMat b, GemvMat c) {
	__shared__ float part[GEMV_WARPS][GEMV_MAX_ROWS];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rows_per_block = GEMV_WARPS / ks;
	const int total = a.out + b.out + c.out;
	const int share = warp % ks;
	// Grid-stride over rows: the grid is sized to fill the GPU once, so no
	// partly filled last wave of blocks idles the memory system.
	for (int base = blockIdx.x * rows_per_block; base < total; base += gridDim.x * rows_per_block) {
		int row = base + warp / ks;
		GemvMat mat = a;
		if (row >= a.out) {
			row -= a.out;
			mat = b;
			if (row >= b.out) {
				row -= b.out;
				mat = c;
			}
		}
		const bool live = row < mat.out;
		float acc[GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[r] = 0.f;
		if (live) {
			const Tw* wr = reinterpret_cast<const Tw*>(mat.w) + (i64)row * in;
			const int step = ks * 32 * 8;
			int k = (share * 32 + lane) * 8;
			for (; k + (GEMV_UNROLL - 1) * step < in; k += GEMV_UNROLL * step) {
				float wv[GEMV_UNROLL][8];
#pragma unroll
				for (int u = 0; u < GEMV_UNROLL; u++) gemv_load8(wr, k + u * step, wv[u]);
#pragma unroll
				for (int u = 0; u < GEMV_UNROLL; u++) {
#pragma unroll
					for (int r = 0; r < GEMV_MAX_ROWS; r++)
						if (r < m) acc[r] += gemv_dot8(wv[u], x + (i64)r * in + k + u * step);
				}
			}
			for (; k < in; k += step) {
				float wv[8];
				gemv_load8(wr, k, wv);
#pragma unroll
				for (int r = 0; r < GEMV_MAX_ROWS; r++)
					if (r < m) acc[r] += gemv_dot8(wv, x + (i64)r * in + k);
			}
		}
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) {
			if (r < m) {
				const float s = warp_sum(acc[r]);
				if (lane == 0) part[warp][r] = s;
			}
		}
		__syncthreads();
		if (live && share == 0 && lane < m) {
			float s = 0.f;
			for (int i = 0; i < ks; i++) s += part[warp + i][lane];
			mat.y[(i64)lane * mat.out + row] = s + (mat.bias ? mat.bias[row] : 0.f);
		}
		__syncthreads(); // part is reused by the next rows
	}
}

#define GEMV_PARAMS(Tw)                                                                                              \
	const Tw *x, int m, int in, int ks, float *y0, const Tw *w0, const float *b0, int out0, float *y1, const Tw *w1, \
	    const float *b1, int out1, float *y2, const Tw *w2, const float *b2, int out2
#define GEMV_ARGS x, m, in, ks, GemvMat{y0, w0, b0, out0}, GemvMat{y1, w1, b1, out1}, GemvMat{y2, w2, b2, out2}

// gemv_bf16_xs: bf16 weights, float32 x, which each block first rounds to
// bf16 into shared memory ([m, in], dynamic): no conversion launch, and
// every warp reads x from shared memory. Shared memory 2·m·in bytes.
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)
    gemv_bf16_xs(const float* x, int m, int in, int ks, float* y0, const bf16_t* w0, const float* b0, int out0, float* y1,
                 const bf16_t* w1, const float* b1, int out1, float* y2, const bf16_t* w2, const float* b2, int out2) {
	extern __shared__ __attribute__((aligned(16))) bf16_t gemv_xs[];
	const int n = m * in; // a multiple of 8
	for (int i = threadIdx.x * 4; i < n; i += blockDim.x * 4) {
		const float4 v = *reinterpret_cast<const float4*>(x + i);
		gemv_xs[i] = from_f32<bf16_t>(v.x);
		gemv_xs[i + 1] = from_f32<bf16_t>(v.y);
		gemv_xs[i + 2] = from_f32<bf16_t>(v.z);
		gemv_xs[i + 3] = from_f32<bf16_t>(v.w);
	}
	__syncthreads();
	gemv<bf16_t>(gemv_xs, m, in, ks, GemvMat{y0, w0, b0, out0}, GemvMat{y1, w1, b1, out1}, GemvMat{y2, w2, b2, out2});
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f32(GEMV_PARAMS(float)) { gemv<float>(GEMV_ARGS); }
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_bf16(GEMV_PARAMS(bf16_t)) { gemv<bf16_t>(GEMV_ARGS); }
