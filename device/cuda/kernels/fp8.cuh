// e4m3 conversions the FP8 kernels share (fp8.cu, gemv.cu): the
// hardware's (sm_89+: cvt to and from e4m3x2, round to nearest even,
// saturating at ±448), the rules of tensor.F32ToFP8E4M3 and
// tensor.QuantizeFP8Row. ModelOps launches FP8 kernels only on such a
// device; elsewhere they trap (FP8_NEEDS_SM89).
#ifndef GOSLING_FP8_CUH
#define GOSLING_FP8_CUH

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

// e4m3x16_f32 widens the 16 e4m3 values of a 16-byte load (byte j: v[j]).
__device__ __forceinline__ void e4m3x16_f32(uint4 p, float v[16]) {
	const unsigned u[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
	for (int j = 0; j < 4; j++) {
		e4m3x2_f32((unsigned short)(u[j] & 0xffff), v[4 * j], v[4 * j + 1]);
		e4m3x2_f32((unsigned short)(u[j] >> 16), v[4 * j + 2], v[4 * j + 3]);
	}
}
#define FP8_NEEDS_SM89()
#else
#define FP8_NEEDS_SM89() __trap()
#endif

#endif
