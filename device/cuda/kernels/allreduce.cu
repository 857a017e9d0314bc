// One-shot all-reduce over peer memory for the GPUs of one process
// (cuda.P2PRank, --enable-custom-all-reduce): each rank copies x into its
// own staging buffer, block b of every rank meets block b of the others
// at a barrier of flags written into each other's memory, and each sums
// every rank's staging in rank order (so every rank ends with the same
// bits) back into x.
//
// Invariants the Go side keeps:
//   - every call launches P2P_BLOCKS blocks on every rank, so block b's
//     epoch (counters[b] + 1) is the same on every rank at every call, and
//     the staging half it selects (epoch parity) is the same for all
//     blocks of a call;
//   - a rank writes a staging half again two calls later, after block b's
//     barrier of the call between, which no peer passes before its whole
//     previous kernel (the reads of that half) is done (stream order);
//   - bufs and sigs hold every rank's staging and flag block, as peer
//     addresses this GPU may dereference (peer access enabled);
//   - sig: [P2P_BLOCKS][P2P_MAX_RANKS] u32, slot [b][p] written by rank p;
//   - stop_flag is host memory the Go side sets when the group fails, so a
//     barrier waiting for a rank that died gives up (x is then garbage).
// P2P_MAX_RANKS, generated from kernels.decl.
#include "cuda_gen.cuh"

__device__ __forceinline__ float p2p_load(const float* p) {
	float v;
	asm volatile("ld.volatile.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
	return v;
}
__device__ __forceinline__ float p2p_load(const bf16_t* p) {
	bf16_t v;
	asm volatile("ld.volatile.global.u16 %0, [%1];" : "=h"(v.bits) : "l"(p));
	return to_f32(v);
}

template <typename T>
__device__ __forceinline__ void p2p_allreduce(T* x, const unsigned long long* bufs, const unsigned long long* sigs,
		unsigned* counters, const unsigned* stop_flag, int rank, int nranks, i64 n, i64 half_bytes) {
	__shared__ unsigned epoch_s;
	if (threadIdx.x == 0) epoch_s = counters[blockIdx.x] + 1u;
	__syncthreads();
	const unsigned epoch = epoch_s;
	const i64 off = (i64)(epoch & 1u) * half_bytes;
	const i64 stride = (i64)gridDim.x * blockDim.x;
	const i64 first = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	T* mine = reinterpret_cast<T*>(bufs[rank] + off);
	for (i64 i = first; i < n; i += stride) mine[i] = x[i];
	__syncthreads();
	if (threadIdx.x < nranks) {
		__threadfence_system(); // the block's staging before the flag
		volatile unsigned* to = reinterpret_cast<volatile unsigned*>(sigs[threadIdx.x]) + blockIdx.x * P2P_MAX_RANKS + rank;
		*to = epoch;
		const volatile unsigned* from = reinterpret_cast<const volatile unsigned*>(sigs[rank]) + blockIdx.x * P2P_MAX_RANKS + threadIdx.x;
		const volatile unsigned* stop = stop_flag;
		// A peer may already be one call ahead: wait until the flag
		// reaches this epoch, wrapping.
		for (unsigned spins = 0; (int)(*from - epoch) < 0; spins++) {
			if ((spins & 255u) == 255u && *stop) break;
		}
		__threadfence_system();
	}
	__syncthreads();
	for (i64 i = first; i < n; i += stride) {
		float s = 0.f;
		for (int p = 0; p < nranks; p++) s += p2p_load(reinterpret_cast<const T*>(bufs[p] + off) + i);
		x[i] = from_f32<T>(s);
	}
	if (threadIdx.x == 0) counters[blockIdx.x] = epoch;
}

#define P2P_ALLREDUCE(suffix, T) \
	extern "C" __global__ void p2p_allreduce_##suffix(T* x, const unsigned long long* bufs, const unsigned long long* sigs, \
			unsigned* counters, const unsigned* stop_flag, int rank, int nranks, i64 n, i64 half_bytes) { \
		p2p_allreduce<T>(x, bufs, sigs, counters, stop_flag, rank, nranks, n, half_bytes); \
	}
P2P_ALLREDUCE(f32, float)
P2P_ALLREDUCE(bf16, bf16_t)
