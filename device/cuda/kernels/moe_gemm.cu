// Grouped expert GEMMs on the tensor cores, for routed steps too large for
// the streaming kernels (prefill, large batches): the step's (token,
// expert) rows sorted by expert (moe_align) and cut into tiles of at most
// MOE_GEMM_BM rows of one expert, and each projection of every expert one
// launch over the tiles, the weights reached through arrays of the
// experts' addresses, so that no launch depends on the routing.
//
// mma.sync m16n8k16 with float32 accumulation, 16-bit weights: x is
// float32 and rounded to the weights' type as it is staged (the rounding
// the cuBLASLt path's conversion makes), the weights copied as they are
// by cp.async, two stages deep. Shared rows are MOE_GEMM_LD values
// (80 bytes), so the 8 rows an ldmatrix reads fall in distinct banks.
#include "cuda_gen.cuh"

typedef unsigned int u32;

#define GEMM_BK 32
#define MOE_GEMM_LD (GEMM_BK + 8)

__device__ __forceinline__ u32 gemm_smem_addr(const void* p) {
	u32 a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}

// The sm_80 instructions; the host launches moe_gemm only there, and
// older targets trap.
#if __CUDA_ARCH__ >= 800
// 16 bytes global → shared, bypassing L1; zero-filled when !valid (src
// is then not read, but stays an address of the matrix).
__device__ __forceinline__ void gemm_cp16(u32 dst, const void* src, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void gemm_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void gemm_wait1() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void gemm_ldsm4(u32* r, u32 addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
}
template <typename Tw> __device__ __forceinline__ void gemm_mma(float* c, const u32* a, const u32* b);
template <> __device__ __forceinline__ void gemm_mma<bf16_t>(float* c, const u32* a, const u32* b) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void gemm_mma<f16_t>(float* c, const u32* a, const u32* b) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// gemm_pack2 rounds two floats to Tw (nearest even, as from_f32), lo in
// the low half.
template <typename Tw> __device__ __forceinline__ u32 gemm_pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 gemm_pack2<bf16_t>(float lo, float hi) {
	u32 r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}
template <> __device__ __forceinline__ u32 gemm_pack2<f16_t>(float lo, float hi) {
	u32 r;
	asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}
#else
__device__ __forceinline__ void gemm_cp16(u32, const void*, bool) { __trap(); }
__device__ __forceinline__ void gemm_commit() {}
__device__ __forceinline__ void gemm_wait1() {}
__device__ __forceinline__ void gemm_ldsm4(u32*, u32) { __trap(); }
template <typename Tw> __device__ __forceinline__ void gemm_mma(float*, const u32*, const u32*) { __trap(); }
template <typename Tw> __device__ __forceinline__ u32 gemm_pack2(float, float) {
	__trap();
	return 0;
}
#endif

// moe_gemm: y[r] = x[src(r)]·W_eᵀ + b_e for the rows r of each tile's
// expert e, src(r) = order[r] (x gathered: the gate and up projection) or
// r (order null: the down projection). With w2 (GLU) the block computes
// the same outputs of W2_e too and stores act(x·W_eᵀ + b_e, x·W2_eᵀ + b2_e)
// (expert_act: silu(g)·u, or GPT-OSS's clamped SwiGLU when act is
// MOE_ACT_CLAMPED): the gate and up projections and the activation of
// every chosen expert in one launch.
//
//	x: [*, in] float32   order: [rows] the x row of each sorted row, or null
//	w, w2: [n_experts] pointers to [out, in] matrices (w2 null: no GLU)
//	bias, bias2: [n_experts] pointers to [out] float32 (null, or an entry null: none)
//	tiles: [n_tiles][3] int: expert, first sorted row, rows (0..MOE_GEMM_BM; 0: no work)
//	y: [rows, out] float32
//
// in must be a multiple of 8 (whole 16-byte weight chunks and float4
// loads of x). Launch: grid (ceil(out/MOE_GEMM_BN), n_tiles), block
// MOE_GEMM_THREADS (4 warps, 2×2 over the 64×64 tile, 32×32 each).
template <typename Tw, bool GLU>
__device__ __forceinline__ void moe_gemm(u16* smem, float* y, const float* x, const int* order, const Tw* const* w,
                                         const Tw* const* w2, const float* const* bias, const float* const* bias2,
                                         const int* tiles, int in, int out, int act, float alpha, float limit) {
	constexpr int NB = GLU ? 2 * MOE_GEMM_BN : MOE_GEMM_BN;                   // weight rows staged: W's outputs, then W2's
	constexpr int A_PER = MOE_GEMM_BM * GEMM_BK / 4 / MOE_GEMM_THREADS;       // float4 of x per thread per stage
	constexpr int B_PER = NB * (GEMM_BK / 8) / MOE_GEMM_THREADS;              // 16-byte weight chunks per thread per stage
	u16* const as = smem;                              // [stage][row][k], x rounded to Tw
	u16* const bs = smem + 2 * MOE_GEMM_BM * MOE_GEMM_LD; // [stage][output][k]
	const int* tile = tiles + 3 * (i64)blockIdx.y;
	const int e = tile[0], r0 = tile[1], nr = tile[2];
	if (nr <= 0) return; // the whole block: an unused tile
	const int o0 = blockIdx.x * MOE_GEMM_BN;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32; // the warp's rows and outputs in the tile

	// What each thread stages: A_PER float4 of x and B_PER chunks of the
	// weights per k step, at fixed places of the tile.
	const float* arow[A_PER];
	int aoff[A_PER], acol[A_PER];
#pragma unroll
	for (int j = 0; j < A_PER; j++) {
		const int idx = tid + j * MOE_GEMM_THREADS, r = idx / (GEMM_BK / 4), c = (idx % (GEMM_BK / 4)) * 4;
		const int src = r < nr ? (order != 0 ? order[r0 + r] : r0 + r) : -1;
		arow[j] = src >= 0 ? x + (i64)src * in : 0;
		acol[j] = c;
		aoff[j] = r * MOE_GEMM_LD + c;
	}
	const Tw* brow[B_PER];
	int boff[B_PER], bcol[B_PER];
	bool bok[B_PER];
#pragma unroll
	for (int j = 0; j < B_PER; j++) {
		const int idx = tid + j * MOE_GEMM_THREADS, r = idx / (GEMM_BK / 8), c = (idx % (GEMM_BK / 8)) * 8;
		const Tw* m = GLU && r >= MOE_GEMM_BN ? w2[e] : w[e];
		const int o = o0 + r % MOE_GEMM_BN;
		bok[j] = o < out;
		brow[j] = m + (i64)(bok[j] ? o : 0) * in + c;
		bcol[j] = c;
		boff[j] = r * MOE_GEMM_LD + c;
	}
	float4 areg[A_PER];
	auto load_a = [&](int k0) {
#pragma unroll
		for (int j = 0; j < A_PER; j++)
			areg[j] = arow[j] != 0 && k0 + acol[j] < in ? *(const float4*)(arow[j] + k0 + acol[j]) : make_float4(0.f, 0.f, 0.f, 0.f);
	};
	auto store_a = [&](int st) {
#pragma unroll
		for (int j = 0; j < A_PER; j++) {
			u32* d = (u32*)&as[st * MOE_GEMM_BM * MOE_GEMM_LD + aoff[j]];
			d[0] = gemm_pack2<Tw>(areg[j].x, areg[j].y);
			d[1] = gemm_pack2<Tw>(areg[j].z, areg[j].w);
		}
	};
	auto load_b = [&](int st, int k0) {
#pragma unroll
		for (int j = 0; j < B_PER; j++) {
			const bool valid = bok[j] && k0 + bcol[j] < in;
			gemm_cp16(gemm_smem_addr(&bs[st * NB * MOE_GEMM_LD + boff[j]]), valid ? brow[j] + k0 : brow[j], valid);
		}
	};

	float acc[GLU ? 2 : 1][2][4][4];
#pragma unroll
	for (int m = 0; m < (GLU ? 2 : 1); m++)
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int nt = 0; nt < 4; nt++) acc[m][mt][nt][0] = acc[m][mt][nt][1] = acc[m][mt][nt][2] = acc[m][mt][nt][3] = 0.f;

	const int nk = (in + GEMM_BK - 1) / GEMM_BK;
	load_a(0);
	load_b(0, 0);
	gemm_commit();
	store_a(0);
	for (int kt = 0; kt < nk; kt++) {
		const int st = kt & 1;
		if (kt + 1 < nk) {
			load_a((kt + 1) * GEMM_BK);
			load_b(st ^ 1, (kt + 1) * GEMM_BK);
		}
		gemm_commit();
		gemm_wait1();
		__syncthreads(); // stage st's x and weights are in
#pragma unroll
		for (int ks = 0; ks < GEMM_BK; ks += 16) {
			u32 a[2][4];
#pragma unroll
			for (int mt = 0; mt < 2; mt++)
				gemm_ldsm4(a[mt], gemm_smem_addr(&as[st * MOE_GEMM_BM * MOE_GEMM_LD + (wm + mt * 16 + (lane & 15)) * MOE_GEMM_LD + ks + (lane >> 4) * 8]));
#pragma unroll
			for (int m = 0; m < (GLU ? 2 : 1); m++) {
#pragma unroll
				for (int np = 0; np < 2; np++) {
					// Two 8-output tiles by 16 k: b[0..1] the first, b[2..3] the second.
					u32 b[4];
					const int row = m * MOE_GEMM_BN + wn + np * 16 + (lane & 7) + ((lane >> 4) << 3);
					gemm_ldsm4(b, gemm_smem_addr(&bs[st * NB * MOE_GEMM_LD + row * MOE_GEMM_LD + ks + ((lane >> 3) & 1) * 8]));
#pragma unroll
					for (int mt = 0; mt < 2; mt++) {
						gemm_mma<Tw>(acc[m][mt][2 * np], a[mt], b);
						gemm_mma<Tw>(acc[m][mt][2 * np + 1], a[mt], b + 2);
					}
				}
			}
		}
		__syncthreads(); // every warp is done with stage st before it is refilled
		if (kt + 1 < nk) store_a(st ^ 1);
	}

	// acc[m][mt][nt][i]: row wm + mt·16 + gid + 8·(i / 2), output wn + nt·8 + 2·tig + i % 2.
	const int gid = lane >> 2, tig = lane & 3;
	const float* be = bias != 0 ? bias[e] : 0;
	const float* be2 = GLU && bias2 != 0 ? bias2[e] : 0;
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int r = wm + mt * 16 + gid + 8 * (i >> 1);
			if (r >= nr) continue;
			float* yr = y + (i64)(r0 + r) * out;
#pragma unroll
			for (int nt = 0; nt < 4; nt++) {
				const int o = o0 + wn + nt * 8 + 2 * tig + (i & 1);
				if (o >= out) continue;
				float v = acc[0][mt][nt][i] + (be != 0 ? be[o] : 0.f);
				if constexpr (GLU) {
					const float u = acc[GLU ? 1 : 0][mt][nt][i] + (be2 != 0 ? be2[o] : 0.f);
					v = expert_act(v, u, act == MOE_ACT_CLAMPED, alpha, limit);
				}
				yr[o] = v;
			}
		}
}

#define MOE_GEMM(Tw, suffix)                                                                                      \
	extern "C" __global__ void __launch_bounds__(MOE_GEMM_THREADS)                                                \
	    moe_gemm_##suffix(float* y, const float* x, const int* order, const Tw* const* w, const Tw* const* w2,    \
	                      const float* const* bias, const float* const* bias2, const int* tiles, int in, int out, \
	                      int act, float alpha, float limit) {                                                    \
		__shared__ __align__(16) u16 smem[2 * (MOE_GEMM_BM + 2 * MOE_GEMM_BN) * MOE_GEMM_LD];                     \
		if (w2 != 0)                                                                                              \
			moe_gemm<Tw, true>(smem, y, x, order, w, w2, bias, bias2, tiles, in, out, act, alpha, limit);         \
		else                                                                                                      \
			moe_gemm<Tw, false>(smem, y, x, order, w, w2, bias, bias2, tiles, in, out, act, alpha, limit);        \
	}
MOE_GEMM(bf16_t, bf16)
MOE_GEMM(f16_t, f16)
