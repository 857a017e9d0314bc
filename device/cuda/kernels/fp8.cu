// FP8 linear layers (device.FP8Path): weights in e4m3 with float32
// scales over blocks of br×bc values (one block per row: per channel),
//
//	W[o, i] = Q[o, i] · scale[(o/br)·gc + i/bc],   gc = ceil(in/bc)
//
// The decode GEMV (FP8Skinny, x rounded to bf16) is gemv.cu's, with the
// skinny kernels' fusions. fp8_quant_rows: each row of x to e4m3 with its own scale, for the FP8
// GEMM (FP8Scaled), whose float32 product fp8_scale_out scales by
// sx[t]·s[o]; fp8_widen_bf16: W as bf16 for a bf16 GEMM (FP8Widened).
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

// fp8_quant_rows: row t of x [m, in] float32 (one block each) to
// q[t] = e4m3(x[t]·(1/sx[t])), sx[t] = max|x[t]|/448 (IEEE division and
// reciprocal, as the Go side computes them); an all-zero row has sx 0 and
// zero quants. in is even.
extern "C" __global__ void fp8_quant_rows(const float* x, u8* q, float* sx, int in) {
	FP8_NEEDS_SM89();
#if __CUDA_ARCH__ >= 890
	const float* xr = x + (i64)blockIdx.x * in;
	u8* qr = q + (i64)blockIdx.x * in;
	float amax = 0.f;
	for (int i = threadIdx.x; i < in; i += blockDim.x) amax = fmaxf(amax, fabsf(xr[i]));
	amax = block_max(amax);
	const float s = __fdiv_rn(amax, 448.f);
	const float inv = s == 0.f ? 0.f : __frcp_rn(s);
	for (int i = 2 * threadIdx.x; i < in; i += 2 * blockDim.x) {
		const unsigned short p = f32x2_e4m3(__fmul_rn(xr[i], inv), __fmul_rn(xr[i + 1], inv));
		*reinterpret_cast<unsigned short*>(qr + i) = p;
	}
	if (threadIdx.x == 0) sx[blockIdx.x] = s;
#endif
}

// fp8_scale_out: y[t, o] = d[t, o]·(sx[t]·sw[o]) + bias[o], added to y with
// accumulate; y may be d. y, d: [m, out] float32.
extern "C" __global__ void fp8_scale_out(float* y, const float* d, const float* sx, const float* sw, const float* bias,
                                         int m, int out, int accumulate) {
	FOR_EACH(i, (i64)m * out) {
		const int t = (int)(i / out), o = (int)(i % out);
		const float v = d[i] * (sx[t] * sw[o]) + (bias ? bias[o] : 0.f);
		y[i] = accumulate ? y[i] + v : v;
	}
}

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
