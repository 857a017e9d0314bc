// Greedy sampling.
//
//	logits: [n_rows, vocab] rows of stride elements    out: [n_rows] int32
//
// out[r] is the index of the largest logit, the lowest index on ties,
// skipping NaN, and 0 when nothing is above -inf: the rule of the CPU
// sampler, so greedy decoding picks the same token on both devices.
// Launch: grid n_rows, block 1024 (any multiple of 32).
#define NO_INDEX 0x7fffffff

__device__ __forceinline__ void better(float& bv, int& bi, float v, int i) {
	if (v > bv || (v == bv && i < bi)) {
		bv = v;
		bi = i;
	}
}

template <typename T>
__device__ void argmax(int* out, const T* logits, int vocab, i64 stride) {
	const T* row = logits + (i64)blockIdx.x * stride;
	float bv = -__int_as_float(0x7f800000); // -inf
	int bi = NO_INDEX;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
		float v = to_f32(row[i]);
		if (v > bv) { // strict, and false for NaN
			bv = v;
			bi = i;
		}
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		better(bv, bi, ov, oi);
	}
	__shared__ float sv[32];
	__shared__ int si[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0) {
		sv[warp] = bv;
		si[warp] = bi;
	}
	__syncthreads();
	if (warp == 0) {
		int nwarps = (blockDim.x + 31) >> 5;
		bv = lane < nwarps ? sv[lane] : -__int_as_float(0x7f800000);
		bi = lane < nwarps ? si[lane] : NO_INDEX;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			float ov = __shfl_xor_sync(0xffffffffu, bv, o);
			int oi = __shfl_xor_sync(0xffffffffu, bi, o);
			better(bv, bi, ov, oi);
		}
		if (lane == 0) out[blockIdx.x] = bi == NO_INDEX ? 0 : bi;
	}
}

#define ARGMAX(suffix, T)                                                                             \
	extern "C" __global__ void argmax_##suffix(int* out, const T* logits, int vocab, i64 stride) { \
		argmax<T>(out, logits, vocab, stride);                                                       \
	}
ARGMAX(f32, float)
ARGMAX(bf16, bf16_t)
ARGMAX(f16, f16_t)
