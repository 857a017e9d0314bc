// FP8 linear layers (device.FP8Path): weights in e4m3 with float32
// scales over blocks of br×bc values (one block per row: per channel),
//
//	W[o, i] = Q[o, i] · scale[(o/br)·gc + i/bc],   gc = ceil(in/bc)
//
// The decode GEMV (FP8Skinny, x rounded to bf16) is gemv.cu's, with the
// skinny kernels' fusions. A larger batch (FP8Scaled) quantises each row
// of x to e4m3 with its own scale (fp8_quant_rows_*, or rmsnorm_f32_to_e4m3
// after a norm), multiplies in cuBLASLt's e4m3 GEMM into raw bf16 products
// and scales them by sx[t]·s[o] (fp8_scale_out_*, or fp8_swiglu_quant,
// which takes gate and up to the down projection's e4m3 input);
// fp8_widen_bf16: W as bf16 for a bf16 GEMM (FP8Widened).
// The conversions are fp8.cuh's.
typedef unsigned char u8;

#include "fp8.cuh"
#include "cuda_gen.cuh"

// block_max is the largest v over the block, to every thread (blockDim.x
// a multiple of 32, at most 1024).
__device__ __forceinline__ float block_max(float v) {
	__shared__ float partial[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	if (lane == 0) partial[warp] = v;
	__syncthreads();
	v = lane < (int)((blockDim.x + 31) >> 5) ? partial[lane] : 0.f;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// The row kernels below (a block a row) hold a row in registers where it
// fits: FP8_ROW_CHUNKS chunks of 8 values a thread, chunk c (columns
// 8c..8c+7) in thread c % blockDim.x, loaded in 16-byte vectors, so each
// value is read from memory once; other rows take a loop that computes
// each value twice (the maximum first). FP8_ROW_CHUNKS is kernels.decl's.

// load8 widens 8 values of p (16-byte aligned for 16-bit T, 32 for
// float) to float32.
__device__ __forceinline__ void load8(const float* p, float v[8]) {
	const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
template <typename T> __device__ __forceinline__ void load8(const T* p, float v[8]) {
	const uint4 q = *reinterpret_cast<const uint4*>(p);
	const T* h = reinterpret_cast<const T*>(&q);
#pragma unroll
	for (int j = 0; j < 8; j++) v[j] = to_f32(h[j]);
}

// store8 rounds 8 float32 values into p (aligned as load8's).
__device__ __forceinline__ void store8(float* p, const float v[8]) {
	reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
	reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
template <typename T> __device__ __forceinline__ void store8(T* p, const float v[8]) {
	uint4 q;
	T* h = reinterpret_cast<T*>(&q);
#pragma unroll
	for (int j = 0; j < 8; j++) h[j] = from_f32<T>(v[j]);
	*reinterpret_cast<uint4*>(p) = q;
}

// row_v8 reports whether a row of n values takes the register path with
// this block: the same answer in every thread of it.
__device__ __forceinline__ bool row_v8(int n, const void* a, const void* b = 0) {
	return (n & 7) == 0 && n <= 8 * FP8_ROW_CHUNKS * (int)blockDim.x &&
	       ((((unsigned long long)a) | ((unsigned long long)b)) & 15) == 0;
}

// row_scale is e4m3's scale for a row of largest magnitude amax (every
// thread's) and its reciprocal: amax/448 and 1/that (IEEE division and
// reciprocal, as tensor.QuantizeFP8Row; 0 and 0 for an all-zero row).
__device__ __forceinline__ float row_scale(float amax, float& inv) {
	const float s = __fdiv_rn(amax, 448.f);
	inv = s == 0.f ? 0.f : __frcp_rn(s);
	return s;
}

// quant_v8 quantises the chunks a thread holds (v[k]: chunk threadIdx.x +
// k·blockDim.x, those below n/8) to q[i] = e4m3(v·(1/sx)), *sx =
// max|row|/448.
__device__ __forceinline__ void quant_v8(u8* qr, float* sx, int n, float (&v)[FP8_ROW_CHUNKS][8]) {
	float amax = 0.f;
#pragma unroll
	for (int k = 0; k < FP8_ROW_CHUNKS; k++)
		if ((int)(threadIdx.x + k * blockDim.x) < (n >> 3))
#pragma unroll
			for (int j = 0; j < 8; j++) amax = fmaxf(amax, fabsf(v[k][j]));
	float inv;
	const float s = row_scale(block_max(amax), inv);
#pragma unroll
	for (int k = 0; k < FP8_ROW_CHUNKS; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (c < (n >> 3)) {
			unsigned w[4];
#pragma unroll
			for (int j = 0; j < 4; j++) w[j] = f32x2_e4m3(__fmul_rn(v[k][2 * j], inv), __fmul_rn(v[k][2 * j + 1], inv));
			*reinterpret_cast<uint2*>(qr + 8 * c) = make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
		}
	}
	if (threadIdx.x == 0) *sx = s;
}

// quant_row is quant_v8 for any row: value(i) computes the i-th value in
// float32, twice for each i, so it must be pure. n is even.
template <typename F>
__device__ __forceinline__ void quant_row(u8* qr, float* sx, int n, F value) {
	float amax = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) amax = fmaxf(amax, fabsf(value(i)));
	float inv;
	const float s = row_scale(block_max(amax), inv);
	for (int i = 2 * threadIdx.x; i < n; i += 2 * blockDim.x)
		*reinterpret_cast<unsigned short*>(qr + i) = f32x2_e4m3(__fmul_rn(value(i), inv), __fmul_rn(value(i + 1), inv));
	if (threadIdx.x == 0) *sx = s;
}

// fp8_quant_rows_<T>: row t of x [m, in] (one block each) to e4m3 in q
// with its scale in sx[t] (tensor.QuantizeFP8Row). in is even.
template <typename T> __device__ void fp8_quant_rows(const T* x, u8* q, float* sx, int in) {
	FP8_NEEDS_SM89();
#if __CUDA_ARCH__ >= 890
	const T* xr = x + (i64)blockIdx.x * in;
	u8* qr = q + (i64)blockIdx.x * in;
	if (row_v8(in, xr, qr)) {
		float v[FP8_ROW_CHUNKS][8];
#pragma unroll
		for (int k = 0; k < FP8_ROW_CHUNKS; k++)
			if ((int)(threadIdx.x + k * blockDim.x) < (in >> 3)) load8(xr + 8 * (threadIdx.x + k * blockDim.x), v[k]);
		quant_v8(qr, sx + blockIdx.x, in, v);
		return;
	}
	quant_row(qr, sx + blockIdx.x, in, [&](int i) { return to_f32(xr[i]); });
#endif
}

// rmsnorm_f32_to_e4m3: row t of float32 x (x_stride apart) normalised as
// rmsnorm does, x·(1/sqrt(mean(x²) + eps))·(weight + weight_offset), then
// quantised as fp8_quant_rows: the input of the FP8 GEMMs after a norm,
// without the float32 rows written between. One block a row.
extern "C" __global__ void rmsnorm_f32_to_e4m3(u8* q, float* sx, const float* x, const float* weight, int hidden,
                                              i64 x_stride, float eps, float weight_offset) {
	FP8_NEEDS_SM89();
#if __CUDA_ARCH__ >= 890
	const float* xr = x + (i64)blockIdx.x * x_stride;
	u8* qr = q + (i64)blockIdx.x * hidden;
	if (row_v8(hidden, xr, weight) && (((unsigned long long)qr) & 7) == 0) {
		float v[FP8_ROW_CHUNKS][8], ss = 0.f;
#pragma unroll
		for (int k = 0; k < FP8_ROW_CHUNKS; k++)
			if ((int)(threadIdx.x + k * blockDim.x) < (hidden >> 3)) {
				load8(xr + 8 * (threadIdx.x + k * blockDim.x), v[k]);
#pragma unroll
				for (int j = 0; j < 8; j++) ss += v[k][j] * v[k][j];
			}
		const float inv = 1.f / sqrtf(block_sum(ss) / (float)hidden + eps);
#pragma unroll
		for (int k = 0; k < FP8_ROW_CHUNKS; k++) {
			const int c = threadIdx.x + k * blockDim.x;
			if (c < (hidden >> 3)) {
				float w[8];
				load8(weight + 8 * c, w);
#pragma unroll
				for (int j = 0; j < 8; j++) v[k][j] = v[k][j] * inv * (w[j] + weight_offset);
			}
		}
		quant_v8(qr, sx + blockIdx.x, hidden, v);
		return;
	}
	float ss = 0.f;
	for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += xr[i] * xr[i];
	const float inv = 1.f / sqrtf(block_sum(ss) / (float)hidden + eps);
	quant_row(qr, sx + blockIdx.x, hidden, [&](int i) { return xr[i] * inv * (weight[i] + weight_offset); });
#endif
}

// fp8_swiglu_quant: h = silu(g)·u per row t, g and u the raw e4m3 products
// (bf16, rows stride apart) scaled by sx[t]·sg[i] and sx[t]·su[i], then
// quantised as fp8_quant_rows into hq [m, inter] and sh: the down
// projection's input, the float32 h never stored. One block a row.
extern "C" __global__ void fp8_swiglu_quant(u8* hq, float* sh, const bf16_t* g, const bf16_t* u, const float* sx,
                                           const float* sg, const float* su, int inter, i64 stride) {
	FP8_NEEDS_SM89();
#if __CUDA_ARCH__ >= 890
	const bf16_t* gr = g + (i64)blockIdx.x * stride;
	const bf16_t* ur = u + (i64)blockIdx.x * stride;
	u8* qr = hq + (i64)blockIdx.x * inter;
	const float st = sx[blockIdx.x];
	if (row_v8(inter, gr, ur) && ((((unsigned long long)sg) | ((unsigned long long)su)) & 15) == 0 &&
	    (((unsigned long long)qr) & 7) == 0) {
		float v[FP8_ROW_CHUNKS][8];
#pragma unroll
		for (int k = 0; k < FP8_ROW_CHUNKS; k++) {
			const int c = threadIdx.x + k * blockDim.x;
			if (c < (inter >> 3)) {
				float gv[8], uv[8], gs[8], us[8];
				load8(gr + 8 * c, gv);
				load8(ur + 8 * c, uv);
				load8(sg + 8 * c, gs);
				load8(su + 8 * c, us);
#pragma unroll
				for (int j = 0; j < 8; j++) v[k][j] = silu(gv[j] * (st * gs[j])) * (uv[j] * (st * us[j]));
			}
		}
		quant_v8(qr, sh + blockIdx.x, inter, v);
		return;
	}
	quant_row(qr, sh + blockIdx.x, inter, [&](int i) {
		return silu(to_f32(gr[i]) * (st * sg[i])) * (to_f32(ur[i]) * (st * su[i]));
	});
#endif
}

// fp8_scale_out_<Ty>: y[t, o] = d[t, o]·(sx[t]·sw[o]) + bias[o], added to
// y with accumulate: d the raw e4m3 product in bf16 (whose range, unlike
// f16's, holds any sum of e4m3 products), y float32 or 16-bit and then
// possibly d itself (each thread reads its values before writing them).
// One block a row; eight columns a thread in 16-byte vectors where the
// row allows.
template <typename Ty>
__device__ void fp8_scale_out(Ty* y, const bf16_t* d, const float* sx, const float* sw, const float* bias, int out,
                              int accumulate) {
	const i64 row = (i64)blockIdx.x * out;
	const float st = sx[blockIdx.x];
	if ((out & 7) == 0 && ((((unsigned long long)(y + row)) | ((unsigned long long)(d + row)) |
	                        ((unsigned long long)sw) | ((unsigned long long)bias)) & 15) == 0) {
		for (int o = 8 * threadIdx.x; o < out; o += 8 * blockDim.x) {
			float v[8], w[8], b[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, acc[8];
			load8(d + row + o, v);
			load8(sw + o, w);
			if (bias) load8(bias + o, b);
			if (accumulate) load8(y + row + o, acc);
#pragma unroll
			for (int j = 0; j < 8; j++) {
				v[j] = v[j] * (st * w[j]) + b[j];
				if (accumulate) v[j] += acc[j];
			}
			store8(y + row + o, v);
		}
		return;
	}
	for (int o = threadIdx.x; o < out; o += blockDim.x) {
		float v = to_f32(d[row + o]) * (st * sw[o]) + (bias ? bias[o] : 0.f);
		if (accumulate) v += to_f32(y[row + o]);
		y[row + o] = from_f32<Ty>(v);
	}
}

#define FP8_ROWS(T, name)                                                                                  \
	extern "C" __global__ void fp8_quant_rows_##name(const T* x, u8* q, float* sx, int in) {               \
		fp8_quant_rows<T>(x, q, sx, in);                                                                   \
	}                                                                                                      \
	extern "C" __global__ void fp8_scale_out_##name(T* y, const bf16_t* d, const float* sx, const float* sw, \
	                                                const float* bias, int out, int accumulate) {          \
		fp8_scale_out<T>(y, d, sx, sw, bias, out, accumulate);                                             \
	}
FP8_ROWS(float, f32)
FP8_ROWS(bf16_t, bf16)
FP8_ROWS(f16_t, f16)

// fp8_widen_bf16: wb[o, i] = bf16(Q[o, i]·scale[(o/br)·gc + i/bc]) for a
// [out, in] weight.
extern "C" __global__ void fp8_widen_bf16(bf16_t* wb, const u8* w, const float* scale, int br, int bc, int gc, int out,
                                          int in) {
	FP8_NEEDS_SM89();
#if __CUDA_ARCH__ >= 890
	FOR_EACH(i, (i64)out * in) {
		const int o = (int)(i / in), c = (int)(i % in);
		float v, zero;
		e4m3x2_f32((unsigned short)w[i], v, zero);
		wb[i] = from_f32<bf16_t>(v * scale[(i64)(o / br) * gc + c / bc]);
	}
#endif
}
