// FP8 linear layers (device.FP8Path): weights in e4m3 with float32
// scales over blocks of br×bc values (one block per row: per channel),
//
//	W[o, i] = Q[o, i] · scale[(o/br)·gc + i/bc],   gc = ceil(in/bc)
//
// fp8_gemv_*: the decode GEMV (FP8Skinny), x rounded to bf16;
// fp8_quant_rows: each row of x to e4m3 with its own scale, for the FP8
// GEMM (FP8Scaled), whose float32 product fp8_scale_out scales by
// sx[t]·s[o]; fp8_widen_bf16: W as bf16 for a bf16 GEMM (FP8Widened).
//
// The conversions are the hardware's (sm_89+: cvt to and from e4m3x2,
// round to nearest even, saturating at ±448), the rules of
// tensor.F32ToFP8E4M3 and tensor.QuantizeFP8Row; ModelOps launches these
// kernels only on such a device, and elsewhere they trap.
typedef unsigned char u8;
typedef unsigned int u32;

// FP8_GEMV_MAX_ROWS and FP8_GEMV_WARPS, generated from kernels.decl.
#include "cuda_gen.cuh"

#if __CUDA_ARCH__ >= 890
// e4m3x2_f32 widens two e4m3 values (lo: the low byte) exactly.
__device__ __forceinline__ void e4m3x2_f32(unsigned short v, float& lo, float& hi) {
	unsigned h;
	asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(v));
	asm("{ .reg .b16 l, u;\n\tmov.b32 {l, u}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, u; }" : "=f"(lo), "=f"(hi) : "r"(h));
}

// f32x2_e4m3 rounds two floats to e4m3 (lo to the low byte).
__device__ __forceinline__ unsigned short f32x2_e4m3(float lo, float hi) {
	unsigned short r;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
	return r;
}
#define FP8_NEEDS_SM89()
#else
#define FP8_NEEDS_SM89() __trap()
#endif

// bf16r is v rounded to bf16, as float.
__device__ __forceinline__ float bf16r(float v) { return to_f32(from_f32<bf16_t>(v)); }

// fp8_gemv: y[r, o] = Σ_b scale[o, b]·Σ_{i in block b} Q[o, i]·bf16(x[r, i]) + bias[o]
// (added to y with accumulate), for m <= FP8_GEMV_MAX_ROWS rows of x
// [m, in] float32. in and bc are multiples of 16: a lane loads 16
// quants (16 bytes) of one scale block at a time. One warp per output
// row; the grid strides over rows. Staged (fp8_gemv_fx): the block first
// writes bf16(x) to shared memory (2·m·in bytes); else each lane rounds x
// as it reads it from global memory.
template <bool Staged>
__device__ void fp8_gemv(const float* x, int m, int in, const u8* w, const float* scale, int br, int bc, int gc,
                         const float* bias, float* y, int out, int accumulate) {
	FP8_NEEDS_SM89();
#if __CUDA_ARCH__ >= 890
	extern __shared__ __attribute__((aligned(16))) unsigned char fp8_smem[];
	bf16_t* xs = reinterpret_cast<bf16_t*>(fp8_smem);
	if (Staged) { // four values a thread at a time (in is a multiple of 16)
		for (int i = threadIdx.x * 4; i < m * in; i += blockDim.x * 4) {
			const float4 v = *reinterpret_cast<const float4*>(x + i);
			*reinterpret_cast<uint2*>(xs + i) = make_uint2(pack_f2<bf16_t>(v.x, v.y), pack_f2<bf16_t>(v.z, v.w));
		}
		__syncthreads();
	}
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	for (int o = blockIdx.x * FP8_GEMV_WARPS + warp; o < out; o += gridDim.x * FP8_GEMV_WARPS) {
		const u8* wr = w + (i64)o * in;
		const float* sr = scale + (i64)(o / br) * gc;
		const float s1 = sr[0]; // the row's only scale when gc is 1 (per channel): no division per load
		float acc[FP8_GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < FP8_GEMV_MAX_ROWS; r++) acc[r] = 0.f;
#pragma unroll 4
		for (int k = lane * 16; k < in; k += 32 * 16) {
			const uint4 p = __ldg(reinterpret_cast<const uint4*>(wr + k));
			const unsigned u[4] = {p.x, p.y, p.z, p.w};
			float wv[16];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				e4m3x2_f32((unsigned short)(u[j] & 0xffff), wv[4 * j], wv[4 * j + 1]);
				e4m3x2_f32((unsigned short)(u[j] >> 16), wv[4 * j + 2], wv[4 * j + 3]);
			}
			const float s = gc == 1 ? s1 : sr[k / bc];
#pragma unroll
			for (int r = 0; r < FP8_GEMV_MAX_ROWS; r++) {
				if (r < m) {
					float xv[16];
					if (Staged) { // 32 bytes of bf16, 32-byte aligned (k is a multiple of 16)
						const uint4* p2 = reinterpret_cast<const uint4*>(xs + (i64)r * in + k);
						const uint4 a = p2[0], b = p2[1];
						const unsigned v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
						for (int j = 0; j < 8; j++) {
							xv[2 * j] = __uint_as_float(v[j] << 16);
							xv[2 * j + 1] = __uint_as_float(v[j] & 0xffff0000u);
						}
					} else {
#pragma unroll
						for (int j = 0; j < 16; j++) xv[j] = bf16r(x[(i64)r * in + k + j]);
					}
					float d = 0.f;
#pragma unroll
					for (int j = 0; j < 16; j++) d += wv[j] * xv[j];
					acc[r] += s * d;
				}
			}
		}
#pragma unroll
		for (int r = 0; r < FP8_GEMV_MAX_ROWS; r++) {
			if (r < m) {
				const float v = warp_sum(acc[r]);
				if (lane == 0) {
					float* yo = y + (i64)r * out + o;
					const float b = v + (bias ? bias[o] : 0.f);
					*yo = accumulate ? *yo + b : b;
				}
			}
		}
	}
#endif
}

#define FP8_GEMV_PARAMS                                                                                                \
	const float *x, int m, int in, const u8 *w, const float *scale, int br, int bc, int gc, const float *bias, float *y, \
	    int out, int accumulate
extern "C" __global__ void __launch_bounds__(32 * FP8_GEMV_WARPS) fp8_gemv_fx(FP8_GEMV_PARAMS) {
	fp8_gemv<true>(x, m, in, w, scale, br, bc, gc, bias, y, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(32 * FP8_GEMV_WARPS) fp8_gemv_f32(FP8_GEMV_PARAMS) {
	fp8_gemv<false>(x, m, in, w, scale, br, bc, gc, bias, y, out, accumulate);
}

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
