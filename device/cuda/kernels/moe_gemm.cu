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
// by cp.async, two stages deep (common.cuh's primitives; the host launches
// moe_gemm on sm_80 and newer only). Shared rows are MOE_GEMM_LD values
// (80 bytes), so the 8 rows an ldmatrix reads fall in distinct banks.
#include "cuda_gen.cuh"

#define GEMM_BK 32
#define MOE_GEMM_LD (GEMM_BK + 8)

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
			d[0] = pack_f2<Tw>(areg[j].x, areg[j].y);
			d[1] = pack_f2<Tw>(areg[j].z, areg[j].w);
		}
	};
	auto load_b = [&](int st, int k0) {
#pragma unroll
		for (int j = 0; j < B_PER; j++) {
			const bool valid = bok[j] && k0 + bcol[j] < in;
			cp_async16(smem_u32(&bs[st * NB * MOE_GEMM_LD + boff[j]]), valid ? brow[j] + k0 : brow[j], valid);
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
	cp_async_commit();
	store_a(0);
	for (int kt = 0; kt < nk; kt++) {
		const int st = kt & 1;
		if (kt + 1 < nk) {
			load_a((kt + 1) * GEMM_BK);
			load_b(st ^ 1, (kt + 1) * GEMM_BK);
		}
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads(); // stage st's x and weights are in
#pragma unroll
		for (int ks = 0; ks < GEMM_BK; ks += 16) {
			u32 a[2][4];
#pragma unroll
			for (int mt = 0; mt < 2; mt++)
				ldsm_x4(a[mt], smem_u32(&as[st * MOE_GEMM_BM * MOE_GEMM_LD + (wm + mt * 16 + (lane & 15)) * MOE_GEMM_LD + ks + (lane >> 4) * 8]));
#pragma unroll
			for (int m = 0; m < (GLU ? 2 : 1); m++) {
#pragma unroll
				for (int np = 0; np < 2; np++) {
					// Two 8-output tiles by 16 k: b[0..1] the first, b[2..3] the second.
					u32 b[4];
					const int row = m * MOE_GEMM_BN + wn + np * 16 + (lane & 7) + ((lane >> 4) << 3);
					ldsm_x4(b, smem_u32(&bs[st * NB * MOE_GEMM_LD + row * MOE_GEMM_LD + ks + ((lane >> 3) & 1) * 8]));
#pragma unroll
					for (int mt = 0; mt < 2; mt++) {
						mma16816<Tw>(acc[m][mt][2 * np], a[mt], b);
						mma16816<Tw>(acc[m][mt][2 * np + 1], a[mt], b + 2);
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
