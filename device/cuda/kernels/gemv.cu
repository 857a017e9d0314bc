// Skinny linear layers (decode): y = x·Wᵀ (+ bias) for a few rows of x.
//
//	x: [m, in] in Tw     w: [out, in] in Tw (float, bf16 or f16)   bias: [out] float32 or null
//	y: [m, out] float32                                       1 <= m <= GEMV_MAX_ROWS
//
// A decode step reads every weight once and does 2·m flops per weight, so
// the kernel is a stream over W at memory bandwidth: one warp per output
// row, each lane loading 16 bytes of the row at a time (GEMV_UNROLL loads
// in flight), converting in registers and multiplying by all m rows of x
// (read through L1, shared by the block's warps); a warp sum finishes each
// output, accumulated in float32. With 16-bit weights x comes in their
// type, the copy the GEMM path makes too, so a row's result does not
// depend on which path its batch size takes.
//
// The _fx kernels take float32 x and stage it in shared memory in the
// weights' type, rounded as is or RMS-normalised (GEMV_STAGE_*: the norm
// before q/k/v), so the norm needs no launch of its own; _swiglu does the
// same for gate/up and applies the gated activation in its epilogue. With
// accumulate the result is added to y (the residual add after o_proj and
// down_proj).
//
// in must be a multiple of 8 (16-byte rows for bf16, two float4 for
// float). Launch: block 32·GEMV_WARPS, any grid (blocks stride over the
// rows, GEMV_WARPS / ks at a time); one that fills the GPU once is best.
// Every kernel here but _swiglu takes the same arguments (GEMV_PARAMS);
// the direct ones ignore norm, eps and mode.
#include "gemv.cuh"

__device__ __forceinline__ void gemv_load8(const float* w, i64 at, float v[8]) {
	const float4 a = __ldg(reinterpret_cast<const float4*>(w + at));
	const float4 b = __ldg(reinterpret_cast<const float4*>(w + at + 4));
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// gemv_ld16 is a 16-byte load of weights (read once, never written while
// the kernel runs). GEMV_LOAD (GOSLING_NVRTC_DEFINES) picks the cache
// hints: 0 __ldg; 1 with L2::256B (the L2 fetches whole 256-byte lines);
// 2, the default, also L1::no_allocate (weights are never reread; x and
// the staged rows keep L1).
#ifndef GEMV_LOAD
#define GEMV_LOAD 2
#endif
__device__ __forceinline__ uint4 gemv_ld16(const void* p) {
#if GEMV_LOAD == 1
	uint4 r;
	asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
	return r;
#elif GEMV_LOAD == 2
	uint4 r;
	asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
	    : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
	    : "l"(p));
	return r;
#else
	return __ldg(reinterpret_cast<const uint4*>(p));
#endif
}

__device__ __forceinline__ void gemv_load8(const bf16_t* w, i64 at, float v[8]) {
	const uint4 p = gemv_ld16(w + at);
	const unsigned u[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[2 * i] = __uint_as_float(u[i] << 16);
		v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
	}
}

// f16x2_to_f32 widens the two halves of a 32-bit word (cvt.f32.f16: an
// integer-and-multiply widening that also handles subnormals, infinities
// and NaNs measured a third slower at batch 1 on an H100).
__device__ __forceinline__ void f16x2_to_f32(unsigned u, float& lo, float& hi) {
	asm("{ .reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h; }"
	    : "=f"(lo), "=f"(hi)
	    : "r"(u));
}

__device__ __forceinline__ void gemv_load8(const f16_t* w, i64 at, float v[8]) {
	const uint4 p = gemv_ld16(w + at);
	f16x2_to_f32(p.x, v[0], v[1]);
	f16x2_to_f32(p.y, v[2], v[3]);
	f16x2_to_f32(p.z, v[4], v[5]);
	f16x2_to_f32(p.w, v[6], v[7]);
}

// dot8 is w[0:8]·x[0:8], x in the weights' type (float, or bf16 rounded
// once by the caller).
__device__ __forceinline__ float gemv_dot8(const float w[8], const float* x) {
	// Plain (generic) loads: x may be in shared memory (gemv_f32_fx).
	const float4 a = *reinterpret_cast<const float4*>(x);
	const float4 b = *reinterpret_cast<const float4*>(x + 4);
	const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
	float s = 0.f;
#pragma unroll
	for (int i = 0; i < 8; i++) s += w[i] * xv[i];
	return s;
}

__device__ __forceinline__ float gemv_dot8(const float w[8], const bf16_t* x) {
	// A plain (generic) load: x may be in shared memory (gemv_bf16_fx).
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

__device__ __forceinline__ float gemv_dot8(const float w[8], const f16_t* x) {
	// A plain (generic) load: x may be in shared memory (gemv_f16_fx).
	const uint4 p = *reinterpret_cast<const uint4*>(x);
	float xv[8];
	f16x2_to_f32(p.x, xv[0], xv[1]);
	f16x2_to_f32(p.y, xv[2], xv[3]);
	f16x2_to_f32(p.z, xv[4], xv[5]);
	f16x2_to_f32(p.w, xv[6], xv[7]);
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

// gemv_rows accumulates acc[p][r] += w_p·x_r over this warp's share of
// the row, for P weight rows w_p (one, or a gate row and its up row) and
// the m rows of x. GEMV_UNROLL 16-byte loads per lane stay in flight,
// split between the P rows.
template <typename Tw, int P>
__device__ __forceinline__ void gemv_rows(const Tw* x, int m, int in, int ks, int share, int lane, const Tw* const (&wr)[P],
                                          float (&acc)[P][GEMV_MAX_ROWS]) {
	constexpr int U = GEMV_UNROLL / P;
	const int step = ks * 32 * 8;
	int k = (share * 32 + lane) * 8;
	for (; k + (U - 1) * step < in; k += U * step) {
		float wv[P][U][8];
#pragma unroll
		for (int p = 0; p < P; p++)
#pragma unroll
			for (int u = 0; u < U; u++) gemv_load8(wr[p], k + u * step, wv[p][u]);
#pragma unroll
		for (int p = 0; p < P; p++)
#pragma unroll
			for (int u = 0; u < U; u++)
#pragma unroll
				for (int r = 0; r < GEMV_MAX_ROWS; r++)
					if (r < m) acc[p][r] += gemv_dot8(wv[p][u], x + (i64)r * in + k + u * step);
	}
	for (; k < in; k += step) {
#pragma unroll
		for (int p = 0; p < P; p++) {
			float wv[8];
			gemv_load8(wr[p], k, wv);
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++)
				if (r < m) acc[p][r] += gemv_dot8(wv, x + (i64)r * in + k);
		}
	}
}

template <typename Tw>
__device__ void gemv(const Tw* x, int m, int in, int ks, int accumulate, GemvMat a, GemvMat b, GemvMat c) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rows_per_block = GEMV_WARPS / ks;
	const int total = a.out + b.out + c.out;
	const int share = warp % ks;
	// Grid-stride over rows: the grid is sized to fill the GPU once, so no
	// partly filled last wave of blocks idles the memory system.
	for (int base = blockIdx.x * rows_per_block; base < total; base += gridDim.x * rows_per_block) {
		int row = base + warp / ks;
		const GemvMat mat = gemv_mat(row, a, b, c);
		const bool live = row < mat.out;
		float acc[1][GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[0][r] = 0.f;
		if (live) {
			const Tw* const wr[1] = {reinterpret_cast<const Tw*>(mat.w) + (i64)row * in};
			gemv_rows<Tw, 1>(x, m, in, ks, share, lane, wr, acc);
		}
		float s[1];
		gemv_sum<1>(acc, m, ks, share, lane, warp, s);
		if (live && share == 0 && lane < m) {
			float* y = mat.y + (i64)lane * mat.out + row;
			const float v = s[0] + (mat.bias ? mat.bias[row] : 0.f);
			*y = accumulate ? *y + v : v;
		}
	}
}

#define GEMV_PARAMS(Tx, Tw)                                                                                          \
	const Tx *x, const float *norm, float eps, int mode, int accumulate, int m, int in, int ks, float *y0,           \
	    const Tw *w0, const float *b0, int out0, float *y1, const Tw *w1, const float *b1, int out1, float *y2,      \
	    const Tw *w2, const float *b2, int out2
#define GEMV_MATS GemvMat{y0, w0, b0, out0}, GemvMat{y1, w1, b1, out1}, GemvMat{y2, w2, b2, out2}

// gemv_<w>_fx: float32 x staged in shared memory ([m, in] in Tw, dynamic:
// sizeof(Tw)·m·in bytes), every warp reading it from there; the block's
// first rows are prefetched meanwhile.
template <typename Tw> __device__ void gemv_fx(GEMV_PARAMS(float, Tw)) {
	extern __shared__ __attribute__((aligned(16))) unsigned char gemv_smem[];
	Tw* xs = reinterpret_cast<Tw*>(gemv_smem);
	{
		const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
		int row = blockIdx.x * (GEMV_WARPS / ks) + warp / ks;
		const GemvMat mat = gemv_mat(row, GEMV_MATS);
		if (row < mat.out) gemv_prefetch_row(reinterpret_cast<const Tw*>(mat.w) + (i64)row * in, in, ks, warp % ks, lane);
	}
	gemv_stage<Tw>(xs, x, norm, eps, mode, m, in);
	__syncthreads();
	gemv<Tw>(xs, m, in, ks, accumulate, GEMV_MATS);
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_bf16_fx(GEMV_PARAMS(float, bf16_t)) {
	gemv_fx<bf16_t>(x, norm, eps, mode, accumulate, m, in, ks, y0, w0, b0, out0, y1, w1, b1, out1, y2, w2, b2, out2);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f16_fx(GEMV_PARAMS(float, f16_t)) {
	gemv_fx<f16_t>(x, norm, eps, mode, accumulate, m, in, ks, y0, w0, b0, out0, y1, w1, b1, out1, y2, w2, b2, out2);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f32_fx(GEMV_PARAMS(float, float)) {
	gemv_fx<float>(x, norm, eps, mode, accumulate, m, in, ks, y0, w0, b0, out0, y1, w1, b1, out1, y2, w2, b2, out2);
}
// Direct: x already in the weights' type.
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f32(GEMV_PARAMS(float, float)) {
	gemv<float>(x, m, in, ks, accumulate, GEMV_MATS);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_bf16(GEMV_PARAMS(bf16_t, bf16_t)) {
	gemv<bf16_t>(x, m, in, ks, accumulate, GEMV_MATS);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f16(GEMV_PARAMS(f16_t, f16_t)) {
	gemv<f16_t>(x, m, in, ks, accumulate, GEMV_MATS);
}

// gemv_<w>_swiglu: an MLP's gate and up projections of RMSNorm(x) with the
// gated activation in the epilogue,
//
//	h = silu(xn·Wgᵀ + bg) · (xn·Wuᵀ + bu),   xn = x / sqrt(mean(x²) + eps) · norm
//
// x: [m, in] float32 (staged as gemv_fx does, sizeof(Tw)·m·in bytes of
// dynamic shared memory); wg, wu: [inter, in]; h: [m, inter] in Tw, which
// the down projection reads directly (gemv_<w>). One warp takes row j of
// both matrices, so the activation needs no second pass over memory.
template <typename Tw>
__device__ void gemv_swiglu(const float* x, const float* norm, float eps, int m, int in, int ks, Tw* h, const Tw* wg,
                            const float* bg, const Tw* wu, const float* bu, int inter) {
	extern __shared__ __attribute__((aligned(16))) unsigned char gemv_smem[];
	Tw* xs = reinterpret_cast<Tw*>(gemv_smem);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rows_per_block = GEMV_WARPS / ks;
	const int share = warp % ks;
	const int first = blockIdx.x * rows_per_block + warp / ks;
	if (first < inter) {
		gemv_prefetch_row(wg + (i64)first * in, in, ks, share, lane);
		gemv_prefetch_row(wu + (i64)first * in, in, ks, share, lane);
	}
	gemv_stage<Tw>(xs, x, norm, eps, GEMV_STAGE_NORM, m, in);
	__syncthreads();
	for (int base = blockIdx.x * rows_per_block; base < inter; base += gridDim.x * rows_per_block) {
		const int row = base + warp / ks;
		const bool live = row < inter;
		float acc[2][GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[0][r] = acc[1][r] = 0.f;
		if (live) {
			const Tw* const wr[2] = {wg + (i64)row * in, wu + (i64)row * in};
			gemv_rows<Tw, 2>(xs, m, in, ks, share, lane, wr, acc);
		}
		float s[2];
		gemv_sum<2>(acc, m, ks, share, lane, warp, s);
		if (live && share == 0 && lane < m) {
			const float g = s[0] + (bg ? bg[row] : 0.f), u = s[1] + (bu ? bu[row] : 0.f);
			h[(i64)lane * inter + row] = from_f32<Tw>(silu(g) * u);
		}
	}
}

#define GEMV_SWIGLU(suffix, Tw)                                                                                       \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                                     \
	    gemv_##suffix##_swiglu(const float* x, const float* norm, float eps, int m, int in, int ks, Tw* h,            \
	                           const Tw* wg, const float* bg, const Tw* wu, const float* bu, int inter) {            \
		gemv_swiglu<Tw>(x, norm, eps, m, in, ks, h, wg, bg, wu, bu, inter);                                       \
	}
GEMV_SWIGLU(f32, float)
GEMV_SWIGLU(bf16, bf16_t)
GEMV_SWIGLU(f16, f16_t)

// moe_dot accumulates acc[p][r] += w_p·x_r for P weight rows w_p of in
// values and the nr <= GEMV_MAX_ROWS rows x_r (float32, 16-byte aligned),
// each lane of the warp taking 8 values at a time: 16 bytes of each weight
// row per load, and each x row's 8 values read once (two float4, through
// L1) for all P weight rows. The warp's sum is the caller's. Every row's
// sum is taken in the same order whatever nr, P and the row's place among
// the others.
template <typename Tw, int P>
__device__ __forceinline__ void moe_dot(const Tw* (&w)[P], const float* (&x)[GEMV_MAX_ROWS], int nr, int in,
                                        int lane, float (&acc)[P][GEMV_MAX_ROWS]) {
#pragma unroll 2
	for (int k = lane * 8; k < in; k += 32 * 8) {
		float wv[P][8];
#pragma unroll
		for (int p = 0; p < P; p++) gemv_load8(w[p], k, wv[p]);
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) {
			if (r < nr) {
				const float4 a = *reinterpret_cast<const float4*>(x[r] + k);
				const float4 b = *reinterpret_cast<const float4*>(x[r] + k + 4);
				const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
				for (int p = 0; p < P; p++) {
					float s = 0.f;
#pragma unroll
					for (int i = 0; i < 8; i++) s += wv[p][i] * xv[i];
					acc[p][r] += s;
				}
			}
		}
	}
}

// MOE_GEMV_OUTS is the outputs one warp of moe_gemv takes (adjacent rows
// of the matrix), sharing its loads of x.
#define MOE_GEMV_OUTS 2

// moe_gemv: moe_linear (moe.cu) for a decode step's experts: each warp
// takes MOE_GEMV_OUTS outputs of one tile's expert, streaming their
// weight rows (moe_dot) for GEMV_MAX_ROWS of the tile's rows at a time; a
// warp sum finishes each output, accumulated in float32. A tile of more
// rows reads its weight rows again for each further GEMV_MAX_ROWS, from L1
// or L2; a tile of no rows (the unused end of a list sized by the step's
// shape, moe_sort) reads nothing.
//
//	x: [rows, in] float32   w: [n_experts] pointers to [out, in] matrices
//	bias: [n_experts] pointers to [out] float32 (bias null, or an entry null: none)
//	tiles: [n_tiles][3] int: expert, first row, rows (0 or more)   y: [rows, out] float32
//
// in must be a multiple of 8. Launch: grid (ceil(out/(GEMV_WARPS·MOE_GEMV_OUTS)),
// n_tiles), block 32·GEMV_WARPS.
template <typename Tw>
__device__ __forceinline__ void moe_gemv(float* y, const float* x, const Tw* const* w, const float* const* bias,
                                         const int* tiles, int in, int out) {
	const int* tile = tiles + 3 * (i64)blockIdx.y;
	const int e = tile[0], r0 = tile[1], nr = tile[2];
	const int lane = threadIdx.x & 31;
	const int o0 = (blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * MOE_GEMV_OUTS;
	if (nr <= 0 || o0 >= out) return; // a whole warp: o0 is the warp's
	const Tw* wr[MOE_GEMV_OUTS];
	float b[MOE_GEMV_OUTS];
	const float* be = bias != 0 ? bias[e] : 0;
#pragma unroll
	for (int p = 0; p < MOE_GEMV_OUTS; p++) {
		const int o = min(o0 + p, out - 1); // past out: a row read again, never written
		wr[p] = w[e] + (i64)o * in;
		b[p] = be != 0 ? be[o] : 0.f;
	}
	for (int c = 0; c < nr; c += GEMV_MAX_ROWS) {
		const int m = min(nr - c, GEMV_MAX_ROWS);
		const float* xr[GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) xr[r] = x + (i64)(r0 + c + min(r, m - 1)) * in;
		float acc[MOE_GEMV_OUTS][GEMV_MAX_ROWS];
#pragma unroll
		for (int p = 0; p < MOE_GEMV_OUTS; p++)
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[p][r] = 0.f;
		moe_dot<Tw, MOE_GEMV_OUTS>(wr, xr, m, in, lane, acc);
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) {
			if (r < m) { // m is the warp's: every lane takes part in the sums
#pragma unroll
				for (int p = 0; p < MOE_GEMV_OUTS; p++) {
					const float s = warp_sum(acc[p][r]);
					if (lane == 0 && o0 + p < out) y[(i64)(r0 + c + r) * out + o0 + p] = s + b[p];
				}
			}
		}
	}
}

#define MOE_GEMV(suffix, Tw)                                                                                      \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                                 \
	    moe_gemv_##suffix(float* y, const float* x, const Tw* const* w, const float* const* bias, const int* tiles, \
	                      int in, int out) {                                                                      \
		moe_gemv<Tw>(y, x, w, bias, tiles, in, out);                                                          \
	}
MOE_GEMV(f32, float)
MOE_GEMV(bf16, bf16_t)
MOE_GEMV(f16, f16_t)

// moe_gemv_glu: the gate and up projections of a mixture's routed experts
// with the gated activation in the epilogue, x's rows gathered through
// order, so that a step needs no gather and no activation launch:
//
//	h[r] = act(x[order[r]]·Wg_eᵀ + bg_e, x[order[r]]·Wu_eᵀ + bu_e) for the rows r of expert e,
//	act = silu(g)·u, or (MOE_ACT_CLAMPED) GPT-OSS's (clamp(u, ±limit) + 1)·g'·sigmoid(alpha·g'), g' = min(g, limit)
//
// with the arithmetic of moe_gemv followed by silu_mul_f32 or
// clamped_swiglu_f32, which the host-routed path runs.
//
//	x: [tokens, in] float32   order: [rows] the token of each row
//	wg, wu: [n_experts] pointers to [inter, in]   bg, bu: [n_experts] pointers to [inter] float32 (null, or an entry null: none)
//	tiles: [n_tiles][3] int: expert, first row, rows (0 or more)   h: [rows, inter] float32
//
// in must be a multiple of 8. Launch: grid (ceil(inter/GEMV_WARPS),
// n_tiles), block 32·GEMV_WARPS; one warp takes output j of both
// matrices.
template <typename Tw>
__device__ __forceinline__ void moe_gemv_glu(float* h, const float* x, const int* order, const Tw* const* wg,
                                             const Tw* const* wu, const float* const* bg, const float* const* bu,
                                             const int* tiles, int in, int inter, int act, float alpha, float limit) {
	const int* tile = tiles + 3 * (i64)blockIdx.y;
	const int e = tile[0], r0 = tile[1], nr = tile[2];
	const int lane = threadIdx.x & 31;
	const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	if (nr <= 0 || o >= inter) return; // a whole warp: o is the warp's
	const Tw* wr[2] = {wg[e] + (i64)o * in, wu[e] + (i64)o * in};
	const float* bge = bg != 0 ? bg[e] : 0;
	const float* bue = bu != 0 ? bu[e] : 0;
	const float bgo = bge != 0 ? bge[o] : 0.f, buo = bue != 0 ? bue[o] : 0.f;
	for (int c = 0; c < nr; c += GEMV_MAX_ROWS) {
		const int m = min(nr - c, GEMV_MAX_ROWS);
		const float* xr[GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) xr[r] = x + (i64)order[r0 + c + min(r, m - 1)] * in;
		float acc[2][GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[0][r] = acc[1][r] = 0.f;
		moe_dot<Tw, 2>(wr, xr, m, in, lane, acc);
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) {
			if (r < m) {
				const float g = warp_sum(acc[0][r]) + bgo, u = warp_sum(acc[1][r]) + buo;
				if (lane == 0) {
					h[(i64)(r0 + c + r) * inter + o] = expert_act(g, u, act == MOE_ACT_CLAMPED, alpha, limit);
				}
			}
		}
	}
}

#define MOE_GEMV_GLU(suffix, Tw)                                                                                    \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                                   \
	    moe_gemv_glu_##suffix(float* h, const float* x, const int* order, const Tw* const* wg, const Tw* const* wu, \
	                          const float* const* bg, const float* const* bu, const int* tiles, int in, int inter,   \
	                          int act, float alpha, float limit) {                                                  \
		moe_gemv_glu<Tw>(h, x, order, wg, wu, bg, bu, tiles, in, inter, act, alpha, limit);                          \
	}
MOE_GEMV_GLU(f32, float)
MOE_GEMV_GLU(bf16, bf16_t)
MOE_GEMV_GLU(f16, f16_t)

// ---------------------------------------------------------------------------
// gemv_bulk_<w>, gemv_bulk_<w>_fx, gemv_bulk_<w>_swiglu (sm_90 and newer):
// the launches of gemv_<w>, gemv_<w>_fx and gemv_<w>_swiglu (the same
// arguments, the same results up to the order of the sums), with the
// weights brought into shared memory by the bulk-copy engine
// (cp.async.bulk) instead of by each lane's loads, so that a block keeps a
// whole ring of weight bytes in flight while its warps multiply.
//
// A block is GEMV_WARPS consumer warps and one producer warp (the last).
// The grid splits the rounds evenly over its blocks, each taking a
// contiguous run; a round is GEMV_WARPS tasks, one a consumer warp: a
// weight row (rows numbered through the matrices as gemv_mat does), or for
// _swiglu a gate row and its up row. A task is taken in pieces of GB_PIECE
// values: stage s of the ring holds one piece of every task of a round,
// [GEMV_WARPS][P][GB_PIECE] in Tw (P = 2 for _swiglu, else 1), which the
// producer's lanes fill with one bulk copy each, completing on the stage's
// full barrier with their bytes (one arrival: the expect_tx). Each consumer
// warp multiplies its piece by the m rows of x (staged in shared memory in
// Tw: the _fx rounding or RMSNorm, or copied as is), lane l taking values
// 256j + 8l … of the piece (16-byte shared loads without bank conflicts),
// arrives on the stage's empty barrier (GEMV_WARPS arrivals), and after a
// task's last piece sums its lanes and writes the outputs.
//
// Shared memory (dynamic): gemv_bulk_ring bytes of ring (GB_STAGES stages
// of GEMV_WARPS·P·GB_PIECE values in Tw), then x, m·in values in Tw.
// Launch: block 32·(GEMV_WARPS + 1), any grid. in must be a multiple of 8
// and every weight row 16-byte aligned (bulk copies move 16-byte units).
#if __CUDA_ARCH__ >= 900
static_assert(GB_PIECE % 256 == 0, "a lane takes 8 values of every 256");
#define GB_THREADS (32 * GEMV_WARPS)

__device__ __forceinline__ void gb_init(u32 bar, int count) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count)); }
__device__ __forceinline__ void gb_arrive(u32 bar) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory"); }
__device__ __forceinline__ void gb_expect(u32 bar, u32 bytes) {
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void gb_wait(u32 bar, int parity) {
	asm volatile("{\n.reg .pred p;\nW:\n"
	             "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
	             "@!p bra W;\n}\n" ::"r"(bar),
	             "r"(parity)
	             : "memory");
}
// gb_copy: bytes (a multiple of 16) from global src to shared dst, both
// 16-byte aligned, completing on bar.
__device__ __forceinline__ void gb_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst), "l"(src),
	             "r"(bytes), "r"(bar)
	             : "memory");
}
// gb_sync: the consumer warps alone (named barrier 1).
__device__ __forceinline__ void gb_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(GB_THREADS) : "memory"); }

// gb_sum is v summed over the consumer warps, for each of them.
__device__ __forceinline__ float gb_sum(float v, float* part) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = warp_sum(v);
	gb_sync(); // part may still be read by a previous call
	if (lane == 0) part[warp] = v;
	gb_sync();
	return warp_sum(lane < GEMV_WARPS ? part[lane] : 0.f);
}

// gb_stage writes m rows of x to xs in Tw: float32 x transformed by mode
// (gemv_stage's arithmetic), or (fx false) x already in Tw, copied.
template <typename Tw>
__device__ void gb_stage(Tw* xs, const void* x, bool fx, const float* norm, float eps, int mode, int m, int in, float* part) {
	const int t = threadIdx.x;
	if (!fx) {
		const uint4* src = reinterpret_cast<const uint4*>(x);
		uint4* dst = reinterpret_cast<uint4*>(xs);
		const int n = m * in * (int)sizeof(Tw) / 16;
		for (int i = t; i < n; i += GB_THREADS) dst[i] = src[i];
		return;
	}
	for (int r = 0; r < m; r++) {
		const float* xr = reinterpret_cast<const float*>(x) + (i64)r * in;
		Tw* sr = xs + (i64)r * in;
		float inv = 1.f;
		if (mode == GEMV_STAGE_NORM) {
			float ss = 0.f;
			for (int i = t * 4; i < in; i += GB_THREADS * 4) {
				const float4 v = *reinterpret_cast<const float4*>(xr + i);
				ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
			}
			inv = 1.f / sqrtf(gb_sum(ss, part) / (float)in + eps);
		}
		for (int i = t * 4; i < in; i += GB_THREADS * 4) {
			const float4 v = *reinterpret_cast<const float4*>(xr + i);
			float o[4] = {v.x, v.y, v.z, v.w};
			if (mode == GEMV_STAGE_NORM) {
				const float4 w = *reinterpret_cast<const float4*>(norm + i);
				o[0] = o[0] * inv * w.x, o[1] = o[1] * inv * w.y, o[2] = o[2] * inv * w.z, o[3] = o[3] * inv * w.w;
			}
#pragma unroll
			for (int j = 0; j < 4; j++) sr[i + j] = from_f32<Tw>(o[j]);
		}
	}
}

// gb_load8 widens 8 weights from shared memory.
__device__ __forceinline__ void gb_load8(const bf16_t* w, float v[8]) {
	const uint4 p = *reinterpret_cast<const uint4*>(w);
	const unsigned u[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[2 * i] = __uint_as_float(u[i] << 16);
		v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
	}
}
__device__ __forceinline__ void gb_load8(const f16_t* w, float v[8]) {
	const uint4 p = *reinterpret_cast<const uint4*>(w);
	f16x2_to_f32(p.x, v[0], v[1]);
	f16x2_to_f32(p.y, v[2], v[3]);
	f16x2_to_f32(p.z, v[4], v[5]);
	f16x2_to_f32(p.w, v[6], v[7]);
}

// gemv_bulk_ring is the bytes of the ring of a launch with P weight rows
// a task.
__host__ __device__ constexpr int gemv_bulk_ring(int P, int elem) { return GB_STAGES * GEMV_WARPS * P * GB_PIECE * elem; }

template <typename Tw, int P>
__device__ void gemv_bulk(const void* x, bool fx, const float* norm, float eps, int mode, int accumulate, int m, int in,
                          GemvMat a, GemvMat b, GemvMat c, Tw* h) {
	extern __shared__ __attribute__((aligned(128))) unsigned char gb_smem[];
	__shared__ __align__(8) unsigned long long gb_bars[2 * GB_STAGES]; // full, then empty
	__shared__ float gb_part[GEMV_WARPS];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int tasks = P == 2 ? a.out : a.out + b.out + c.out;
	const int rounds = (tasks + GEMV_WARPS - 1) / GEMV_WARPS;
	const int r0 = rounds * blockIdx.x / gridDim.x, r1 = rounds * (blockIdx.x + 1) / gridDim.x;
	const int pieces = (in + GB_PIECE - 1) / GB_PIECE;
	const int steps = (r1 - r0) * pieces;
	const u32 ring = smem_u32(gb_smem), full0 = smem_u32(&gb_bars[0]), empty0 = full0 + 8 * GB_STAGES;
	constexpr u32 STAGE = GEMV_WARPS * P * GB_PIECE * sizeof(Tw);
	if (threadIdx.x == 0) {
		for (int s = 0; s < GB_STAGES; s++) {
			gb_init(full0 + 8 * s, 1);
			gb_init(empty0 + 8 * s, GEMV_WARPS);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();

	if (warp == GEMV_WARPS) {
		// Producer: lane i < GEMV_WARPS·P copies row i%P of task i/P.
		for (int i = 0, round = r0, piece = 0; i < steps; i++) {
			const int s = i % GB_STAGES;
			if (i >= GB_STAGES) gb_wait(empty0 + 8 * s, (i / GB_STAGES + 1) & 1);
			const int k0 = piece * GB_PIECE, len = min(GB_PIECE, in - k0);
			const int live = min(GEMV_WARPS, tasks - round * GEMV_WARPS);
			const u32 bytes = (u32)len * sizeof(Tw);
			if (lane == 0) gb_expect(full0 + 8 * s, bytes * live * P);
			__syncwarp();
			if (lane < live * P) {
				const int t = lane / P, p = lane % P;
				int row = round * GEMV_WARPS + t;
				const Tw* w;
				if (P == 2) w = reinterpret_cast<const Tw*>(p ? b.w : a.w);
				else w = reinterpret_cast<const Tw*>(gemv_mat(row, a, b, c).w);
				gb_copy(ring + s * STAGE + (u32)((t * P + p) * GB_PIECE * sizeof(Tw)), w + (i64)row * in + k0, bytes, full0 + 8 * s);
			}
			if (++piece == pieces) piece = 0, round++;
		}
		return;
	}

	Tw* xs = reinterpret_cast<Tw*>(gb_smem + gemv_bulk_ring(P, sizeof(Tw)));
	gb_stage<Tw>(xs, x, fx, norm, eps, mode, m, in, gb_part);
	gb_sync();
	float acc[P][GEMV_MAX_ROWS];
#pragma unroll
	for (int p = 0; p < P; p++)
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[p][r] = 0.f;
	for (int i = 0, round = r0, piece = 0; i < steps; i++) {
		const int s = i % GB_STAGES, k0 = piece * GB_PIECE, len = min(GB_PIECE, in - k0);
		int row = round * GEMV_WARPS + warp;
		const bool live = row < tasks;
		gb_wait(full0 + 8 * s, (i / GB_STAGES) & 1);
		if (live) {
			const Tw* ws = reinterpret_cast<const Tw*>(gb_smem + s * STAGE) + warp * P * GB_PIECE;
#pragma unroll
			for (int j = 0; j < GB_PIECE / 256; j++) {
				const int kk = j * 256 + lane * 8;
				if (kk < len) {
					float wv[P][8];
#pragma unroll
					for (int p = 0; p < P; p++) gb_load8(ws + p * GB_PIECE + kk, wv[p]);
#pragma unroll
					for (int r = 0; r < GEMV_MAX_ROWS; r++) {
						if (r < m) {
#pragma unroll
							for (int p = 0; p < P; p++) acc[p][r] += gemv_dot8(wv[p], xs + (i64)r * in + k0 + kk);
						}
					}
				}
			}
		}
		__syncwarp();
		if (lane == 0) gb_arrive(empty0 + 8 * s);
		if (piece == pieces - 1) {
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++) {
				if (r < m) {
					float v[P];
#pragma unroll
					for (int p = 0; p < P; p++) {
						v[p] = warp_sum(acc[p][r]);
						acc[p][r] = 0.f;
					}
					if (live && lane == r) {
						if (P == 2) {
							const float g = v[0] + (a.bias ? a.bias[row] : 0.f), u = v[P - 1] + (b.bias ? b.bias[row] : 0.f);
							h[(i64)r * a.out + row] = from_f32<Tw>(silu(g) * u);
						} else {
							int j = row; // its row in its matrix
							const GemvMat mat = gemv_mat(j, a, b, c);
							float* y = mat.y + (i64)r * mat.out + j;
							const float o = v[0] + (mat.bias ? mat.bias[j] : 0.f);
							*y = accumulate ? *y + o : o;
						}
					}
				}
			}
		}
		if (++piece == pieces) piece = 0, round++;
	}
}

#define GEMV_BULK(suffix, Tw)                                                                                           \
	extern "C" __global__ void __launch_bounds__(GB_THREADS + 32) gemv_bulk_##suffix(GEMV_PARAMS(Tw, Tw)) {            \
		gemv_bulk<Tw, 1>(x, false, norm, eps, mode, accumulate, m, in, GEMV_MATS, nullptr);                            \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(GB_THREADS + 32) gemv_bulk_##suffix##_fx(GEMV_PARAMS(float, Tw)) {    \
		gemv_bulk<Tw, 1>(x, true, norm, eps, mode, accumulate, m, in, GEMV_MATS, nullptr);                             \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(GB_THREADS + 32)                                                      \
	    gemv_bulk_##suffix##_swiglu(const float* x, const float* norm, float eps, int m, int in, int ks, Tw* h,        \
	                                const Tw* wg, const float* bg, const Tw* wu, const float* bu, int inter) {         \
		gemv_bulk<Tw, 2>(x, true, norm, eps, GEMV_STAGE_NORM, 0, m, in, GemvMat{nullptr, wg, bg, inter},              \
		                 GemvMat{nullptr, wu, bu, inter}, GemvMat{nullptr, nullptr, nullptr, 0}, h);                  \
	}
GEMV_BULK(bf16, bf16_t)
GEMV_BULK(f16, f16_t)
#endif // __CUDA_ARCH__ >= 900
