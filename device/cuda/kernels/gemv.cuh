// What the skinny linear kernels share (gemv.cu, and quant.cu for the
// GGUF block formats): the launch shape, staging x in shared memory, and
// the sums of the warps that share a row.
#ifndef GOSLING_GEMV_CUH
#define GOSLING_GEMV_CUH

// GEMV_MAX_ROWS, GEMV_WARPS and GEMV_STAGE_*, generated from kernels.decl.
#include "cuda_gen.cuh"

// 16-byte weight loads in flight per lane (GOSLING_NVRTC_DEFINES may set it).
#ifndef GEMV_UNROLL
#define GEMV_UNROLL 4
#endif

// gemv_mat returns the matrix that row (numbered through a, b, then c)
// falls in, and makes row its row there.
template <typename M> __device__ __forceinline__ M gemv_mat(int& row, const M& a, const M& b, const M& c) {
	if (row < a.out) return a;
	row -= a.out;
	if (row < b.out) return b;
	row -= b.out;
	return c;
}

// gemv_row_sync synchronises the ks warps that share a row (ks > 1) on a
// named barrier of their own (1 + warp / ks; barrier 0 is __syncthreads),
// so that the block's other rows go on loading meanwhile.
__device__ __forceinline__ void gemv_row_sync(int ks, int warp) {
	asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / ks), "r"(ks * 32) : "memory");
}

// gemv_sum finishes acc: the warp's lanes, then the ks warps of the row
// through shared memory. Lane r < m of the row's first warp (share 0)
// returns the sums for x row r in out. Every warp of the row must call it
// (with ks > 1 it synchronises them); warps of other rows do not wait.
template <int P>
__device__ __forceinline__ void gemv_sum(float (&acc)[P][GEMV_MAX_ROWS], int m, int ks, int share, int lane, int warp,
                                         float (&out)[P]) {
	__shared__ float part[GEMV_WARPS][P][GEMV_MAX_ROWS];
	if (ks == 1) { // the whole row is this warp's: lane r keeps x row r's sum
#pragma unroll
		for (int p = 0; p < P; p++)
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++) {
				if (r < m) {
					const float s = warp_sum(acc[p][r]);
					if (lane == r) out[p] = s;
				}
			}
		return;
	}
#pragma unroll
	for (int p = 0; p < P; p++)
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) {
			if (r < m) {
				const float s = warp_sum(acc[p][r]);
				if (lane == 0) part[warp][p][r] = s;
			}
		}
	gemv_row_sync(ks, warp);
	if (share == 0 && lane < m) {
#pragma unroll
		for (int p = 0; p < P; p++) {
			float s = 0.f;
			for (int i = 0; i < ks; i++) s += part[warp + i][p][lane];
			out[p] = s;
		}
	}
	gemv_row_sync(ks, warp); // part is reused by the next rows
}


// gemv_norm_inv is 1/rms of the row xr of in float32 values (in a
// multiple of 4), the RMSNorm's factor, for every thread of the block.
__device__ __forceinline__ float gemv_norm_inv(const float* xr, float eps, int in) {
	float ss = 0.f;
	for (int i = threadIdx.x * 4; i < in; i += blockDim.x * 4) {
		const float4 v = *reinterpret_cast<const float4*>(xr + i);
		ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
	}
	ss = block_sum(ss);
	return 1.f / sqrtf(ss / (float)in + eps);
}

// gemv_xperm is where a staged FP8 kernel keeps x value i of a row: in
// each 512 values (a warp's 32 loads of 16), lane l's first eight values
// among the first 256 and its last eight among the second, at 8·l, so
// that a warp's 16-byte reads of x from shared memory take consecutive
// banks (rows padded to a multiple of 512: gemv_fp8_ld).
__device__ __forceinline__ int gemv_xperm(int i) { return (i & ~511) | ((i & 8) << 5) | (((i >> 4) & 31) << 3) | (i & 7); }
__device__ __forceinline__ int gemv_fp8_ld(int in) { return (in + 511) & ~511; }

// gemv_stage writes m rows of float32 x, transformed by mode, to xs in
// shared memory, ldx values apart (Perm: bf16 in gemv_xperm's order). The
// arithmetic is the unfused rmsnorm kernel's, so only the order of the
// sum of squares differs.
template <typename Tw, bool Perm = false>
__device__ void gemv_stage(Tw* xs, const float* x, const float* norm, float eps, int mode, int m, int in, int ldx) {
	for (int r = 0; r < m; r++) {
		const float* xr = x + (i64)r * in;
		Tw* sr = xs + (i64)r * ldx;
		const float inv = mode == GEMV_STAGE_NORM ? gemv_norm_inv(xr, eps, in) : 1.f;
		for (int i = threadIdx.x * 4; i < in; i += blockDim.x * 4) {
			const float4 v = *reinterpret_cast<const float4*>(xr + i);
			float o[4] = {v.x, v.y, v.z, v.w};
			if (mode == GEMV_STAGE_NORM) {
				const float4 w = *reinterpret_cast<const float4*>(norm + i);
				o[0] = o[0] * inv * w.x, o[1] = o[1] * inv * w.y, o[2] = o[2] * inv * w.z, o[3] = o[3] * inv * w.w;
			}
			if constexpr (Perm) { // four consecutive values stay consecutive (i is a multiple of 4)
				*reinterpret_cast<uint2*>(sr + gemv_xperm(i)) =
				    make_uint2(pack_f2<bf16_t>(o[0], o[1]), pack_f2<bf16_t>(o[2], o[3]));
			} else {
#pragma unroll
				for (int j = 0; j < 4; j++) sr[i + j] = from_f32<Tw>(o[j]);
			}
		}
	}
}

// gemv_prefetch_row asks L2 for a row of weights, which does not depend on
// x, so that the memory system streams while x is staged (the staging's
// dependent loads and block sums would otherwise leave it idle at the
// start of every launch). The ks warps of the row share it: each lane
// names one 128-byte line at a time.
template <typename Tw> __device__ __forceinline__ void gemv_prefetch_row(const Tw* row, int in, int ks, int share, int lane) {
	const char* w = reinterpret_cast<const char*>(row);
	const int bytes = in * (int)sizeof(Tw);
	for (int at = (share * 32 + lane) * 128; at < bytes; at += ks * 32 * 128)
		asm volatile("prefetch.global.L2 [%0];" ::"l"(w + at));
}

#endif
