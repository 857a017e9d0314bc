// All-reduce over peer memory for the GPUs of one process (cuda.P2PRank,
// the custom all-reduce): what vLLM and SGLang run instead of NCCL for
// decode-sized messages. The ranks PUSH: each writes its x with 16-byte
// stores straight into its slot of every peer's receive area (remote
// writes over NVLink are posted, no round trip per load), meets the peers
// at a flag barrier, then reads only its own GPU's memory.
//
// One-shot (p2p_oneshot_*): push all of x to every peer, one barrier, sum
// the ranks' vectors in rank order (own x from x itself: no copy of x into
// a staging buffer). Each rank writes (n-1)·bytes over the links: at two
// ranks that is already what a ring moves, so two ranks never need more.
// Two-shot (p2p_twoshot_*): reduce-scatter then all-gather. Rank q owns
// part q of each block's range; ranks push part q to q, q sums its part in
// rank order and pushes the packed result to every peer, who copy it into
// x after a second barrier: 2(n-1)/n·bytes per rank, for 4 and 8 ranks.
// Both sum in float32 in rank order and round once, so every rank (and
// either path) ends with the same bits.
//
// Layout. Block b of a launch of g blocks takes vectors [b·r, (b+1)·r) of
// x's ceil(n·size/16) 16-byte vectors, r = ceil(vecs/g) (the last vector
// zero-padded past n). Each GPU's receive memory is areas of area_bytes,
// area(b, half, slot) at ((b·2 + half)·nranks + slot)·area_bytes; slot s
// is what rank s sends. One-shot uses r vectors of it; two-shot, with
// parts of p = ceil(r/nranks) vectors, its first p for the scattered part
// and the next p for the gathered result (2p vectors). The Go side
// (ARPlan.grid) picks g so that this fits area_bytes.
//
// Invariants the Go side keeps:
//   - every rank launches the same kernel with the same grid for the same
//     call (same n, dtype and plan), in the same order, so block b's
//     counters (barrier epoch, call count) agree on every rank at every
//     call; blocks may differ between calls (the grid follows the size);
//   - only block b touches area b and flag row b, on any rank;
//   - block b writes half (call & 1) of area b on its peers only after its
//     previous call's barriers, which no peer passes before its whole
//     earlier kernel has finished (stream order): the peers' reads of
//     that half, two calls of block b back, are done;
//   - bufs and sigs hold every rank's receive memory and flag rows, as
//     peer addresses this GPU may dereference (peer access enabled);
//   - sig: [blocks][P2P_MAX_RANKS] u32, slot [b][p] written by rank p with
//     block b's barrier epoch (one per barrier, wrapping); counters:
//     [blocks][2] u32, this rank's own (epoch, calls) per block;
//   - stop_flag is host memory the Go side sets when the group fails, so a
//     barrier waiting for a rank that died gives up (x is then garbage).
//
// Memory ordering. x's vectors go to peers as weak 16-byte stores; each
// barrier's flag write is st.release.sys after a __syncthreads, so every
// store of the block is visible system-wide first (release is cumulative
// over the bar.sync). The waiting thread spins on its own GPU's flag with
// ld.relaxed.sys and ends with fence.acq_rel.sys, then __syncthreads hands
// the acquire to the block. Received vectors are read with
// ld.relaxed.sys.v4: a strong load at system scope is served at the
// point of coherence (this GPU's L2, where the peers' writes land), never
// from a stale L1 line, whatever L1 held from an earlier call; they are
// read once, so bypassing L1 costs nothing.
// P2P_MAX_RANKS, generated from kernels.decl.
#include "cuda_gen.cuh"

typedef unsigned long long u64;

// A received vector, at system scope (see Memory ordering above).
__device__ __forceinline__ uint4 ld_sys_v4(const uint4* p) {
	uint4 v;
	asm volatile("ld.relaxed.sys.global.v4.b32 {%0, %1, %2, %3}, [%4];"
		: "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
	return v;
}

// A vector to a peer's memory (or this GPU's), weak: the barrier's
// release orders it.
__device__ __forceinline__ void st_v4(uint4* p, uint4 v) {
	asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

template <typename T> union p2p_vec {
	uint4 u;
	T t[16 / sizeof(T)];
};

// Vector v of x (n elements), zeros past n. x itself need only be
// aligned to its element (aligned: to 16 bytes, the same on every thread).
template <typename T>
__device__ __forceinline__ uint4 load_x(const T* x, i64 v, i64 n, bool aligned) {
	constexpr int per = 16 / sizeof(T);
	const i64 e = v * per;
	if (aligned && e + per <= n) return *reinterpret_cast<const uint4*>(x + e);
	p2p_vec<T> r;
	r.u = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
	for (int j = 0; j < per; j++) {
		if (e + j < n) r.t[j] = x[e + j];
	}
	return r.u;
}

// Writes vector v of x, only its elements below n.
template <typename T>
__device__ __forceinline__ void store_x(T* x, i64 v, i64 n, bool aligned, uint4 u) {
	constexpr int per = 16 / sizeof(T);
	const i64 e = v * per;
	if (aligned && e + per <= n) {
		*reinterpret_cast<uint4*>(x + e) = u;
		return;
	}
	p2p_vec<T> r;
	r.u = u;
#pragma unroll
	for (int j = 0; j < per; j++) {
		if (e + j < n) x[e + j] = r.t[j];
	}
}

// The float32 sum of the ranks' vectors in rank order (u[0] first, no +0),
// rounded once to T.
template <typename T>
__device__ __forceinline__ uint4 sum_vecs(const uint4 (&u)[P2P_MAX_RANKS], int nranks) {
	constexpr int per = 16 / sizeof(T);
	float a[per];
	p2p_vec<T> r;
	r.u = u[0];
#pragma unroll
	for (int j = 0; j < per; j++) a[j] = to_f32(r.t[j]);
#pragma unroll
	for (int p = 1; p < P2P_MAX_RANKS; p++) {
		if (p < nranks) {
			r.u = u[p];
#pragma unroll
			for (int j = 0; j < per; j++) a[j] += to_f32(r.t[j]);
		}
	}
#pragma unroll
	for (int j = 0; j < per; j++) r.t[j] = from_f32<T>(a[j]);
	return r.u;
}

// area(b, half, slot) of the receive memory at base.
__device__ __forceinline__ uint4* p2p_area(u64 base, unsigned half, int slot, int nranks, i64 area_bytes) {
	return reinterpret_cast<uint4*>(base + (((i64)blockIdx.x * 2 + half) * nranks + slot) * area_bytes);
}

// Block b of every rank meets block b of the others: afterwards every
// store the peers' blocks made before it is visible here. One thread per
// peer writes that peer's flag and waits for its own.
__device__ __forceinline__ void p2p_barrier(const u64* sigs, const unsigned* stop_flag, int rank, int nranks,
		unsigned epoch) {
	__syncthreads();
	const int p = threadIdx.x;
	if (p < nranks && p != rank) {
		unsigned* to = reinterpret_cast<unsigned*>(sigs[p]) + blockIdx.x * P2P_MAX_RANKS + rank;
		asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(to), "r"(epoch) : "memory");
		const unsigned* from = reinterpret_cast<const unsigned*>(sigs[rank]) + blockIdx.x * P2P_MAX_RANKS + p;
		const volatile unsigned* stop = stop_flag;
		// A peer may already be one barrier ahead: wait until the flag
		// reaches this epoch, wrapping.
		for (unsigned spins = 0;; spins++) {
			unsigned f;
			asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(f) : "l"(from) : "memory");
			if ((int)(f - epoch) >= 0) break;
			if ((spins & 255u) == 255u && *stop) break;
		}
		asm volatile("fence.acq_rel.sys;" ::: "memory");
	}
	__syncthreads();
}

// The block's range of vectors, and its (epoch, call) from counters.
struct p2p_block {
	i64 lo, hi;
	unsigned epoch, calls, half;
};

template <typename T>
__device__ __forceinline__ p2p_block p2p_begin(const unsigned* counters, i64 n) {
	__shared__ unsigned ctr[2];
	if (threadIdx.x == 0) {
		ctr[0] = counters[blockIdx.x * 2];
		ctr[1] = counters[blockIdx.x * 2 + 1];
	}
	__syncthreads();
	constexpr int per = 16 / sizeof(T);
	const i64 vecs = (n + per - 1) / per;
	const i64 r = (vecs + gridDim.x - 1) / gridDim.x;
	p2p_block b;
	b.lo = min((i64)blockIdx.x * r, vecs);
	b.hi = min(b.lo + r, vecs);
	b.epoch = ctr[0];
	b.calls = ctr[1] + 1u;
	b.half = b.calls & 1u;
	return b;
}

__device__ __forceinline__ void p2p_end(unsigned* counters, const p2p_block& b, unsigned epoch) {
	if (threadIdx.x == 0) {
		counters[blockIdx.x * 2] = epoch;
		counters[blockIdx.x * 2 + 1] = b.calls;
	}
}

// Vectors a thread keeps in flight: its loads of a batch are issued
// together, then its stores (the asm's memory clobbers keep a load from
// moving past an earlier store, so without batches a thread looping over
// a large range would wait out each load's latency in turn). Up to 256
// KiB a thread has one vector and the batches change nothing.
#define P2P_PUSH_BATCH 4
#define P2P_SUM_BATCH 2

template <typename T>
__device__ __forceinline__ void p2p_oneshot(T* x, const u64* bufs, const u64* sigs, unsigned* counters,
		const unsigned* stop_flag, int rank, int nranks, i64 n, i64 area_bytes) {
	const p2p_block b = p2p_begin<T>(counters, n);
	const bool aligned = (reinterpret_cast<u64>(x) & 15u) == 0;
	const i64 step = blockDim.x;
	for (i64 v0 = b.lo + threadIdx.x; v0 < b.hi; v0 += P2P_PUSH_BATCH * step) {
		uint4 u[P2P_PUSH_BATCH];
#pragma unroll
		for (int k = 0; k < P2P_PUSH_BATCH; k++) {
			if (v0 + k * step < b.hi) u[k] = load_x(x, v0 + k * step, n, aligned);
		}
#pragma unroll
		for (int k = 0; k < P2P_PUSH_BATCH; k++) {
			const i64 v = v0 + k * step;
#pragma unroll
			for (int p = 0; p < P2P_MAX_RANKS; p++) {
				if (v < b.hi && p < nranks && p != rank) st_v4(p2p_area(bufs[p], b.half, rank, nranks, area_bytes) + (v - b.lo), u[k]);
			}
		}
	}
	const unsigned epoch = b.epoch + 1u;
	p2p_barrier(sigs, stop_flag, rank, nranks, epoch);
	for (i64 v0 = b.lo + threadIdx.x; v0 < b.hi; v0 += P2P_SUM_BATCH * step) {
		uint4 u[P2P_SUM_BATCH][P2P_MAX_RANKS];
#pragma unroll
		for (int k = 0; k < P2P_SUM_BATCH; k++) {
			const i64 v = v0 + k * step;
#pragma unroll
			for (int p = 0; p < P2P_MAX_RANKS; p++) {
				if (v < b.hi && p < nranks) {
					u[k][p] = p == rank ? load_x(x, v, n, aligned)
						: ld_sys_v4(p2p_area(bufs[rank], b.half, p, nranks, area_bytes) + (v - b.lo));
				}
			}
		}
#pragma unroll
		for (int k = 0; k < P2P_SUM_BATCH; k++) {
			if (v0 + k * step < b.hi) store_x(x, v0 + k * step, n, aligned, sum_vecs<T>(u[k], nranks));
		}
	}
	p2p_end(counters, b, epoch);
}

template <typename T>
__device__ __forceinline__ void p2p_twoshot(T* x, const u64* bufs, const u64* sigs, unsigned* counters,
		const unsigned* stop_flag, int rank, int nranks, i64 n, i64 area_bytes) {
	const p2p_block b = p2p_begin<T>(counters, n);
	const bool aligned = (reinterpret_cast<u64>(x) & 15u) == 0;
	const i64 step = blockDim.x;
	// Part q of the block's range is [b.lo + q·part, ...); this rank owns
	// part `rank`. In a slot: [0, part) scattered, [part, 2·part) gathered.
	const i64 part = (b.hi - b.lo + nranks - 1) / nranks;
	// Reduce-scatter: part q of x to rank q.
	for (i64 v0 = b.lo + threadIdx.x; v0 < b.hi; v0 += P2P_PUSH_BATCH * step) {
		uint4 u[P2P_PUSH_BATCH];
#pragma unroll
		for (int k = 0; k < P2P_PUSH_BATCH; k++) {
			if (v0 + k * step < b.hi) u[k] = load_x(x, v0 + k * step, n, aligned);
		}
#pragma unroll
		for (int k = 0; k < P2P_PUSH_BATCH; k++) {
			const i64 v = v0 + k * step;
			const int q = (int)((v - b.lo) / part);
			if (v < b.hi && q != rank) st_v4(p2p_area(bufs[q], b.half, rank, nranks, area_bytes) + (v - b.lo - q * part), u[k]);
		}
	}
	p2p_barrier(sigs, stop_flag, rank, nranks, b.epoch + 1u);
	// Reduce this rank's part, and all-gather: the packed sum to every
	// peer's slot `rank`.
	const i64 mine = b.lo + rank * part, mine_hi = min(mine + part, b.hi);
	for (i64 v0 = mine + threadIdx.x; v0 < mine_hi; v0 += P2P_SUM_BATCH * step) {
		uint4 u[P2P_SUM_BATCH][P2P_MAX_RANKS];
#pragma unroll
		for (int k = 0; k < P2P_SUM_BATCH; k++) {
			const i64 v = v0 + k * step;
#pragma unroll
			for (int p = 0; p < P2P_MAX_RANKS; p++) {
				if (v < mine_hi && p < nranks) {
					u[k][p] = p == rank ? load_x(x, v, n, aligned)
						: ld_sys_v4(p2p_area(bufs[rank], b.half, p, nranks, area_bytes) + (v - mine));
				}
			}
		}
#pragma unroll
		for (int k = 0; k < P2P_SUM_BATCH; k++) {
			const i64 v = v0 + k * step;
			if (v >= mine_hi) continue;
			const uint4 s = sum_vecs<T>(u[k], nranks);
			store_x(x, v, n, aligned, s);
#pragma unroll
			for (int p = 0; p < P2P_MAX_RANKS; p++) {
				if (p < nranks && p != rank) st_v4(p2p_area(bufs[p], b.half, rank, nranks, area_bytes) + part + (v - mine), s);
			}
		}
	}
	const unsigned epoch = b.epoch + 2u;
	p2p_barrier(sigs, stop_flag, rank, nranks, epoch);
	// The other ranks' sums into x.
	for (i64 v0 = b.lo + threadIdx.x; v0 < b.hi; v0 += P2P_PUSH_BATCH * step) {
		uint4 u[P2P_PUSH_BATCH];
#pragma unroll
		for (int k = 0; k < P2P_PUSH_BATCH; k++) {
			const i64 v = v0 + k * step;
			const int q = (int)((v - b.lo) / part);
			if (v < b.hi && q != rank) u[k] = ld_sys_v4(p2p_area(bufs[rank], b.half, q, nranks, area_bytes) + part + (v - b.lo - q * part));
		}
#pragma unroll
		for (int k = 0; k < P2P_PUSH_BATCH; k++) {
			const i64 v = v0 + k * step;
			const int q = (int)((v - b.lo) / part);
			if (v < b.hi && q != rank) store_x(x, v, n, aligned, u[k]);
		}
	}
	p2p_end(counters, b, epoch);
}

#define P2P_ALLREDUCE(algo, suffix, T) \
	extern "C" __global__ void __launch_bounds__(512) p2p_##algo##_##suffix(T* x, const u64* bufs, const u64* sigs, \
			unsigned* counters, const unsigned* stop_flag, int rank, int nranks, i64 n, i64 area_bytes) { \
		p2p_##algo<T>(x, bufs, sigs, counters, stop_flag, rank, nranks, n, area_bytes); \
	}
P2P_ALLREDUCE(oneshot, f32, float)
P2P_ALLREDUCE(oneshot, bf16, bf16_t)
P2P_ALLREDUCE(twoshot, f32, float)
P2P_ALLREDUCE(twoshot, bf16, bf16_t)
