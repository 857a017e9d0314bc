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

// quant_row quantises one row of n values (n even), value(i) computing
// the i-th in float32, to q[i] = e4m3(value(i)·(1/sx)), *sx = max|value|/448
// (IEEE division and reciprocal, as tensor.QuantizeFP8Row computes them;
// an all-zero row has sx 0 and zero quants). A block a row; value is
// called twice for each i (the maximum first), so it must be pure.
template <typename F>
__device__ __forceinline__ void quant_row(u8* qr, float* sx, int n, F value) {
	float amax = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) amax = fmaxf(amax, fabsf(value(i)));
	amax = block_max(amax);
	const float s = __fdiv_rn(amax, 448.f);
	const float inv = s == 0.f ? 0.f : __frcp_rn(s);
	for (int i = 2 * threadIdx.x; i < n; i += 2 * blockDim.x)
		*reinterpret_cast<unsigned short*>(qr + i) = f32x2_e4m3(__fmul_rn(value(i), inv), __fmul_rn(value(i + 1), inv));
	if (threadIdx.x == 0) *sx = s;
}

// fp8_quant_rows_<T>: row t of x [m, in] (one block each) to e4m3 in q
// with its scale in sx[t] (quant_row). in is even.
template <typename T> __device__ void fp8_quant_rows(const T* x, u8* q, float* sx, int in) {
	FP8_NEEDS_SM89();
#if __CUDA_ARCH__ >= 890
	const T* xr = x + (i64)blockIdx.x * in;
	quant_row(q + (i64)blockIdx.x * in, sx + blockIdx.x, in, [&](int i) { return to_f32(xr[i]); });
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
	float ss = 0.f;
	for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += xr[i] * xr[i];
	ss = block_sum(ss);
	const float inv = 1.f / sqrtf(ss / (float)hidden + eps);
	quant_row(q + (i64)blockIdx.x * hidden, sx + blockIdx.x, hidden,
	          [&](int i) { return xr[i] * inv * (weight[i] + weight_offset); });
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
	const float st = sx[blockIdx.x];
	quant_row(hq + (i64)blockIdx.x * inter, sh + blockIdx.x, inter, [&](int i) {
		return silu(to_f32(gr[i]) * (st * sg[i])) * (to_f32(ur[i]) * (st * su[i]));
	});
#endif
}

// fp8_scale_out_<Ty>: y[t, o] = d[t, o]·(sx[t]·sw[o]) + bias[o], added to
// y with accumulate: d the raw e4m3 product in bf16 (whose range, unlike
// f16's, holds any sum of e4m3 products), y float32 or 16-bit and then
// possibly d itself (each thread reads its values before writing them).
// One block a row; eight columns a thread where out%8 == 0.
template <typename Ty>
__device__ void fp8_scale_out(Ty* y, const bf16_t* d, const float* sx, const float* sw, const float* bias, int out,
                              int accumulate) {
	const i64 row = (i64)blockIdx.x * out;
	const float st = sx[blockIdx.x];
	auto one = [&](int o, float v) {
		v = v * (st * sw[o]) + (bias ? bias[o] : 0.f);
		if (accumulate) v += to_f32(y[row + o]);
		y[row + o] = from_f32<Ty>(v);
	};
	if ((out & 7) == 0) {
		for (int o = 8 * threadIdx.x; o < out; o += 8 * blockDim.x) {
			const uint4 p = *reinterpret_cast<const uint4*>(d + row + o);
			const unsigned w[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
			for (int j = 0; j < 4; j++) {
				one(o + 2 * j, __uint_as_float(w[j] << 16));
				one(o + 2 * j + 1, __uint_as_float(w[j] & 0xffff0000u));
			}
		}
		return;
	}
	for (int o = threadIdx.x; o < out; o += blockDim.x) one(o, to_f32(d[row + o]));
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
