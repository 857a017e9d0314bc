// Skinny linear layers (decode): y = x·Wᵀ (+ bias) for a few rows of x.
//
//	x: [m, in] in Tw     w: [out, in] in Tw (float, bf16 or f16)   bias: [out] float32 or null
//	y: [m, out] float32                                       1 <= m <= GEMV_MAX_ROWS
//
// A decode step reads every weight once and does 2·m flops per weight, so
// the kernel is a stream over W at memory bandwidth: one warp per output
// row, each lane loading 16 bytes of the row at a time (GEMV_UNROLL loads
// in flight), converting in registers and multiplying by all m rows of x
// (read through L1, shared by the block's warps); a warp sum finishes each
// output, accumulated in float32. With 16-bit weights x comes in their
// type, the copy the GEMM path makes too, so a row's result does not
// depend on which path its batch size takes.
//
// The _fx kernels take float32 x and stage it in shared memory in the
// weights' type, rounded as is or RMS-normalised (GEMV_STAGE_*: the norm
// before q/k/v), so the norm needs no launch of its own; _swiglu does the
// same for gate/up and applies the gated activation in its epilogue. With
// accumulate the result is added to y (the residual add after o_proj and
// down_proj).
//
// FP8 (e4m3) weights (gemv_fp8*, device.FP8Skinny) carry float32 scales,
// one per row (per channel or per tensor), or one per block of sbr×sbc
// values; x is rounded to bf16, and the kernels need sm_89 (fp8.cuh).
// Per-row scales and blocks of whole 8×128 tiles run on the tensor cores,
// a warp a tile of 8 rows (gemv_tiled_e4m3); narrower blocks on the CUDA
// cores, a warp a row as above, x staged in gemv_xperm's order.
//
// in must be a multiple of 8 (16-byte rows for bf16, two float4 for
// float; 16 for FP8). Launch: block 32·GEMV_WARPS, any grid (blocks
// stride over the rows, or FP8 tiles, GEMV_WARPS / ks at a time); one
// that fills the GPU once is best.
// Every kernel here but _swiglu takes the same arguments (GEMV_PARAMS);
// the direct ones ignore norm, eps and mode.
#include "gemv.cuh"
#include "fp8.cuh"

// GEMV_FP8_BLOCKS: the FP8 kernels hold 64 registers a thread, so that
// the four blocks an SM the launch counts on (gemvBlocksPerSM) fit.
#ifndef GEMV_FP8_BLOCKS
#define GEMV_FP8_BLOCKS 4
#endif

// e4m3_t is an FP8 (e4m3) weight: 16 a 16-byte load.
struct e4m3_t {
	unsigned char bits;
};

// GemvT<Tw>::X is the type x takes for weights Tw: their own, or bf16 for
// FP8; V the values of a 16-byte load of weights.
template <typename Tw> struct GemvT {
	typedef Tw X;
	static constexpr int V = 8;
};
template <> struct GemvT<e4m3_t> {
	typedef bf16_t X;
	static constexpr int V = 16;
};
template <typename A, typename B> struct gemv_same {
	static constexpr bool v = false;
};
template <typename A> struct gemv_same<A, A> {
	static constexpr bool v = true;
};

__device__ __forceinline__ void gemv_load8(const float* w, i64 at, float v[8]) {
	const float4 a = __ldg(reinterpret_cast<const float4*>(w + at));
	const float4 b = __ldg(reinterpret_cast<const float4*>(w + at + 4));
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// gemv_ld16 is a 16-byte load of weights (read once, never written while
// the kernel runs). GEMV_LOAD (GOSLING_NVRTC_DEFINES) picks the cache
// hints: 0 __ldg; 1 with L2::256B (the L2 fetches whole 256-byte lines);
// 2, the default, also L1::no_allocate (weights are never reread; x and
// the staged rows keep L1).
#ifndef GEMV_LOAD
#define GEMV_LOAD 2
#endif
__device__ __forceinline__ uint4 gemv_ld16(const void* p) {
#if GEMV_LOAD == 1
	uint4 r;
	asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
	return r;
#elif GEMV_LOAD == 2
	uint4 r;
	asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
	    : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
	    : "l"(p));
	return r;
#else
	return __ldg(reinterpret_cast<const uint4*>(p));
#endif
}

__device__ __forceinline__ void gemv_load8(const bf16_t* w, i64 at, float v[8]) {
	const uint4 p = gemv_ld16(w + at);
	const unsigned u[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[2 * i] = __uint_as_float(u[i] << 16);
		v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
	}
}

// f16x2_to_f32 widens the two halves of a 32-bit word (cvt.f32.f16: an
// integer-and-multiply widening that also handles subnormals, infinities
// and NaNs measured a third slower at batch 1 on an H100).
__device__ __forceinline__ void f16x2_to_f32(unsigned u, float& lo, float& hi) {
	asm("{ .reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h; }"
	    : "=f"(lo), "=f"(hi)
	    : "r"(u));
}

__device__ __forceinline__ void gemv_load8(const f16_t* w, i64 at, float v[8]) {
	const uint4 p = gemv_ld16(w + at);
	f16x2_to_f32(p.x, v[0], v[1]);
	f16x2_to_f32(p.y, v[2], v[3]);
	f16x2_to_f32(p.z, v[4], v[5]);
	f16x2_to_f32(p.w, v[6], v[7]);
}

// dot8 is w[0:8]·x[0:8], x in the weights' type (float, or bf16 rounded
// once by the caller).
__device__ __forceinline__ float gemv_dot8(const float w[8], const float* x) {
	// Plain (generic) loads: x may be in shared memory (gemv_f32_fx).
	const float4 a = *reinterpret_cast<const float4*>(x);
	const float4 b = *reinterpret_cast<const float4*>(x + 4);
	const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
	float s = 0.f;
#pragma unroll
	for (int i = 0; i < 8; i++) s += w[i] * xv[i];
	return s;
}

__device__ __forceinline__ float gemv_dot8(const float w[8], const bf16_t* x) {
	// A plain (generic) load: x may be in shared memory (gemv_bf16_fx).
	const uint4 p = *reinterpret_cast<const uint4*>(x);
	const unsigned u[4] = {p.x, p.y, p.z, p.w};
	float xv[8];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		xv[2 * i] = __uint_as_float(u[i] << 16);
		xv[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
	}
	float s = 0.f;
#pragma unroll
	for (int i = 0; i < 8; i++) s += w[i] * xv[i];
	return s;
}

__device__ __forceinline__ float gemv_dot8(const float w[8], const f16_t* x) {
	// A plain (generic) load: x may be in shared memory (gemv_f16_fx).
	const uint4 p = *reinterpret_cast<const uint4*>(x);
	float xv[8];
	f16x2_to_f32(p.x, xv[0], xv[1]);
	f16x2_to_f32(p.y, xv[2], xv[3]);
	f16x2_to_f32(p.z, xv[4], xv[5]);
	f16x2_to_f32(p.w, xv[6], xv[7]);
	float s = 0.f;
#pragma unroll
	for (int i = 0; i < 8; i++) s += w[i] * xv[i];
	return s;
}

// One launch serves up to three matrices that share x (q, k and v; gate
// and up): their rows are numbered one after another. Each row is taken by
// ks warps of a block (ks = 1, 2, 4 or 8), each summing a 1/ks share of the
// row, so that matrices with few rows still put enough loads in flight;
// the shares meet in shared memory.
struct GemvMat {
	float* y;
	const void* w;
	const float* bias;
	int out;
	const float* s; // FP8 scales, else null
};

// gemv_rows accumulates acc[p][r] += w_p·x_r over this warp's share of
// the row, for P weight rows w_p (one, or a gate row and its up row) and
// the m rows of x. GEMV_UNROLL 16-byte loads per lane stay in flight,
// split between the P rows.
template <typename Tw, int P>
__device__ __forceinline__ void gemv_rows(const Tw* x, int m, int in, int ks, int share, int lane, const Tw* const (&wr)[P],
                                          float (&acc)[P][GEMV_MAX_ROWS]) {
	constexpr int U = GEMV_UNROLL / P;
	const int step = ks * 32 * 8;
	int k = (share * 32 + lane) * 8;
	for (; k + (U - 1) * step < in; k += U * step) {
		float wv[P][U][8];
#pragma unroll
		for (int p = 0; p < P; p++)
#pragma unroll
			for (int u = 0; u < U; u++) gemv_load8(wr[p], k + u * step, wv[p][u]);
#pragma unroll
		for (int p = 0; p < P; p++)
#pragma unroll
			for (int u = 0; u < U; u++)
#pragma unroll
				for (int r = 0; r < GEMV_MAX_ROWS; r++)
					if (r < m) acc[p][r] += gemv_dot8(wv[p][u], x + (i64)r * in + k + u * step);
	}
	for (; k < in; k += step) {
#pragma unroll
		for (int p = 0; p < P; p++) {
			float wv[8];
			gemv_load8(wr[p], k, wv);
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++)
				if (r < m) acc[p][r] += gemv_dot8(wv, x + (i64)r * in + k);
		}
	}
}


// GemvScale is how an FP8 warp scales its P weight rows: row[p] points at
// row p's scales; blocked: one every sbc columns, applied to each load's
// products; else the row's one, applied to its sum by the caller.
template <int P> struct GemvScale {
	const float* row[P];
	int sbc;
	bool blocked;
};

// gemv_rows_e4m3 is gemv_rows for FP8 weights, x bf16 (rows ldx apart;
// Perm: staged in gemv_xperm's order, else as is).
template <bool Perm, int P>
__device__ __forceinline__ void gemv_rows_e4m3(const bf16_t* x, int ldx, int m, int in, int ks, int share, int lane,
                                               const e4m3_t* const (&wr)[P], const GemvScale<P>& sc,
                                               float (&acc)[P][GEMV_MAX_ROWS]) {
#if __CUDA_ARCH__ >= 890
	constexpr int U = GEMV_UNROLL / P;
	const int step = ks * 32 * 16;
	int k = (share * 32 + lane) * 16;
	// one (k) or U (k + u·step) loads of each row, then their products
	auto dot = [&](const uint4& raw, int p, int at) {
		const float s = sc.blocked ? sc.row[p][at / sc.sbc] : 1.f;
		const int xo = Perm ? gemv_xperm(at) : at;
#pragma unroll
		for (int h = 0; h < 2; h++) { // values 8h..8h+7: words 2h, 2h+1 of the load
			const unsigned w0 = h ? raw.z : raw.x, w1 = h ? raw.w : raw.y;
			float wv[8];
			e4m3x2_f32((unsigned short)(w0 & 0xffff), wv[0], wv[1]);
			e4m3x2_f32((unsigned short)(w0 >> 16), wv[2], wv[3]);
			e4m3x2_f32((unsigned short)(w1 & 0xffff), wv[4], wv[5]);
			e4m3x2_f32((unsigned short)(w1 >> 16), wv[6], wv[7]);
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++) {
				if (r < m) {
					const uint4 a = *reinterpret_cast<const uint4*>(x + (i64)r * ldx + xo + h * (Perm ? 256 : 8));
					const unsigned u[4] = {a.x, a.y, a.z, a.w};
					float e = 0.f;
#pragma unroll
					for (int j = 0; j < 4; j++) {
						e += wv[2 * j] * __uint_as_float(u[j] << 16);
						e += wv[2 * j + 1] * __uint_as_float(u[j] & 0xffff0000u);
					}
					acc[p][r] += sc.blocked ? s * e : e;
				}
			}
		}
	};
	for (; k + (U - 1) * step < in; k += U * step) {
		uint4 raw[P][U];
#pragma unroll
		for (int p = 0; p < P; p++)
#pragma unroll
			for (int u = 0; u < U; u++) raw[p][u] = gemv_ld16(wr[p] + k + u * step);
#pragma unroll
		for (int p = 0; p < P; p++)
#pragma unroll
			for (int u = 0; u < U; u++) dot(raw[p][u], p, k + u * step);
	}
	for (; k < in; k += step) {
#pragma unroll
		for (int p = 0; p < P; p++) dot(gemv_ld16(wr[p] + k), p, k);
	}
#endif
}

#define COMMA ,

// FP8_GUARD traps an FP8 kernel on a device without e4m3 conversions.
#define FP8_GUARD(fp8)            \
	do {                      \
		if (fp8) {        \
			FP8_NEEDS_SM89(); \
		}                 \
	} while (0)

// gemv_scales are the scale rows of weight row row of mat (null without
// scales) for sbr×sbc blocks, sgc a row.
__device__ __forceinline__ const float* gemv_scales(const GemvMat& mat, int row, int sbr, int sgc) {
	return mat.s ? mat.s + (i64)(row / sbr) * sgc : nullptr;
}

// The FP8 kernels' tensor-core path (gemv_fp8_tiled: per-row scales, and
// blocks of whole 8-row, 128-column tiles). A warp takes a tile of 8
// weight rows against the m <= 8 rows of x on mma.sync m16n8k16 in bf16,
// x as A (rows 8..15 zero) and the weights as B, so a tile is 8 rows, not
// 16, and small matrices still make enough warps. Lane (g, t) = (lane / 4,
// lane % 4) loads 32 bytes of weight row g at columns k + 32t (a tile's
// 128 columns a round) and 32 values of x row g (rows past m read row
// m-1; their outputs are dropped); the eight products of a round take
// bytes 4j..4j+3 (j = 0..7) of its loads as the k pairs {2t, 2t+1} and
// {2t+8, 2t+9} of its fragments: a consistent relabelling of k, so no
// shuffle is needed. e4m3 becomes bf16 by moving its bits
// (e4m3x2_bf16x2: exact, the value times 2^-120, subnormals as bf16
// subnormals), a byte permute, a shift and a mask a pair, where the
// CUDA-core path's two cvt a weight held it below the memory's rate
// (docs/gpu-step.md); the 2^120 goes back with the row's scale. x is staged as bf16
// rows gemv_fp8_ldt(in) apart, 16 bytes of padding keeping the eight rows
// a warp reads on different banks.
__device__ __forceinline__ bool gemv_fp8_tiled(int sbr, int sbc, int sgc) {
	return sgc == 1 || (sbc % 128 == 0 && sbr % 8 == 0);
}
__device__ __forceinline__ int gemv_fp8_ldt(int in) { return in + 8; }

// e4m3x2_bf16x2 is bytes 2p and 2p+1 of w (sel: E4M3_PAIR0 or 1) as bf16x2,
// each the e4m3 value times 2^-120: [b, sign(b)·0xff] bytes shifted so
// that b's seven magnitude bits land under bf16's exponent and mantissa
// and its sign on bit 15.
#define E4M3_PAIR0 0x9180u
#define E4M3_PAIR1 0xB3A2u
__device__ __forceinline__ u32 e4m3x2_bf16x2(u32 w, u32 sel) {
	u32 t;
	asm("prmt.b32 %0, %1, 0, %2;" : "=r"(t) : "r"(w), "r"(sel));
	return (t << 4) & 0x87f087f0u;
}

// gemv_mma accumulates the m16n8k16 bf16 product of A (a0..a3) and B (b0,
// b1) into c.
__device__ __forceinline__ void gemv_mma(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	    "{%0, %1, %2, %3};"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// gemv_round_e4m3 is the eight products of one 128-column round of a tile
// (w0, w1: row g's two loads; x0..x3: x's 32 values) into c.
__device__ __forceinline__ void gemv_round_e4m3(float (&c)[4], const uint4& w0, const uint4& w1, const uint4 (&xq)[4]) {
	const u32 wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
	for (int j = 0; j < 8; j++) {
		const uint4& xa = xq[j / 2];
		const u32 lo = j & 1 ? xa.z : xa.x, hi = j & 1 ? xa.w : xa.y;
		gemv_mma(c, lo, 0u, hi, 0u, e4m3x2_bf16x2(wv[j], E4M3_PAIR0), e4m3x2_bf16x2(wv[j], E4M3_PAIR1));
	}
}

// GEMV_FP8_ROUNDS: a lane's 128-column rounds of loads in flight (two
// 16-byte loads each), shared among its P tiles.
#ifndef GEMV_FP8_ROUNDS
#define GEMV_FP8_ROUNDS 2
#endif

// gemv_tile_e4m3 accumulates acc[p] += x·tile pᵀ over this warp's share
// of the columns (rounds share, share + ks, …), for P tiles whose row g
// starts at w[p]; with sc.blocked each round's products are scaled by
// their block's scale (one per tile and round: sbr % 8 == 0, sbc % 128 ==
// 0). acc[p] is the mma's C fragment: x row g by tile rows 2t, 2t+1 (and
// two zeros, x's rows 8..15). A round is 128 columns: lane (g, t) loads
// bytes 32t..32t+31 of it, so that each row's part is one whole 128-byte
// line.
template <int P>
__device__ __forceinline__ void gemv_tile_e4m3(const bf16_t* x, int ldx, int m, int in, int ks, int share, int lane,
                                               const e4m3_t* const (&w)[P], const GemvScale<P>& sc, float (&acc)[P][4]) {
	constexpr int U = GEMV_FP8_ROUNDS / P;
	const int g = lane >> 2, t = lane & 3;
	const bf16_t* xr = x + (i64)min(g, m - 1) * ldx + t * 32;
	const int step = ks * 128;
	const uint4 zero = make_uint4(0, 0, 0, 0);
	for (int kb = share * 128; kb < in; kb += U * step) {
		uint4 wr[P][U][2];
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int k = kb + u * step + t * 32;
#pragma unroll
			for (int p = 0; p < P; p++) {
				wr[p][u][0] = k < in ? gemv_ld16(w[p] + k) : zero;
				wr[p][u][1] = k + 16 < in ? gemv_ld16(w[p] + k + 16) : zero;
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int k0 = kb + u * step;
			if (k0 >= in) break; // the warp's: k0 is
			uint4 xq[4];
#pragma unroll
			for (int i = 0; i < 4; i++) // x past the row is never read (it may be anything, NaN too)
				xq[i] = k0 + t * 32 + 8 * i < in ? *reinterpret_cast<const uint4*>(xr + k0 + 8 * i) : zero;
#pragma unroll
			for (int p = 0; p < P; p++) {
				if (sc.blocked) {
					float c[4] = {0.f, 0.f, 0.f, 0.f};
					gemv_round_e4m3(c, wr[p][u][0], wr[p][u][1], xq);
					const float s = sc.row[p][k0 / sc.sbc];
					acc[p][0] += s * c[0], acc[p][1] += s * c[1];
				} else {
					gemv_round_e4m3(acc[p], wr[p][u][0], wr[p][u][1], xq);
				}
			}
		}
	}
}

// gemv_tile_sum adds the ks warps' acc (its first two values: the rest
// are x's zero rows) of a tile into share 0's through shared memory;
// every warp of the tile calls it.
template <int P> __device__ __forceinline__ void gemv_tile_sum(float (&acc)[P][4], int ks, int share, int lane, int warp) {
	if (ks == 1) return;
	__shared__ float part[GEMV_WARPS][2][2][32];
#pragma unroll
	for (int p = 0; p < P; p++)
#pragma unroll
		for (int i = 0; i < 2; i++) part[warp][p][i][lane] = acc[p][i];
	gemv_row_sync(ks, warp);
	if (share == 0) {
#pragma unroll
		for (int p = 0; p < P; p++)
#pragma unroll
			for (int i = 0; i < 2; i++)
				for (int w = 1; w < ks; w++) acc[p][i] += part[warp + w][p][i][lane];
	}
	gemv_row_sync(ks, warp); // part is reused by the next tiles
}

// gemv_prefetch_tile asks L2 for the first four rounds of this warp's
// share of an FP8 tile (lane (g, t): round t of row g), as
// gemv_prefetch_row does for a row, so that the memory system streams
// while x is staged.
__device__ __forceinline__ void gemv_prefetch_tile(const void* w, int tile, int out, int in, int ks, int share, int lane) {
	const int g = lane >> 2, t = lane & 3, k = (share + t * ks) * 128;
	if (k < in)
		asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(w) + (i64)min(tile * 8 + g, out - 1) * in + k));
}

// gemv_tile_mat returns the matrix that tile (numbered through a, b, then
// c, each ceil(out/8) tiles) falls in, and makes tile its tile there.
__device__ __forceinline__ GemvMat gemv_tile_mat(int& tile, const GemvMat& a, const GemvMat& b, const GemvMat& c) {
	const int ta = (a.out + 7) >> 3, tb = (b.out + 7) >> 3;
	if (tile < ta) return a;
	tile -= ta;
	if (tile < tb) return b;
	tile -= tb;
	return c;
}

// gemv_fp8_scale_out is the factor that takes row row's sum back to W·x:
// its scale (per row) or 1 (blocks, applied per round), times the 2^120
// the bf16 form took out (in two factors of 2^60, so that a scale up to
// 2^67 does not overflow).
__device__ __forceinline__ float gemv_fp8_scale_out(float v, const GemvMat& mat, int row, int sbr, int sgc) {
	v *= 0x1p60f;
	return v * (sgc == 1 ? mat.s[(i64)(row / sbr)] * 0x1p60f : 0x1p60f);
}

// gemv_tiled_e4m3 is gemv for FP8 weights on the tensor-core path: the
// tiles of a, b and c, each by ks warps, over x staged as bf16 rows ldx
// apart.
__device__ void gemv_tiled_e4m3(const bf16_t* x, int ldx, int m, int in, int ks, int accumulate, GemvMat a, GemvMat b,
                                GemvMat c, int sbr, int sbc, int sgc) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
	const int per_block = GEMV_WARPS / ks, share = warp % ks;
	const int total = ((a.out + 7) >> 3) + ((b.out + 7) >> 3) + ((c.out + 7) >> 3);
	for (int base = blockIdx.x * per_block; base < total; base += gridDim.x * per_block) {
		int tile = base + warp / ks;
		const bool live = tile < total;
		const GemvMat mat = gemv_tile_mat(tile, a, b, c);
		float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
		if (live) {
			// rows past out: read, never stored
			const e4m3_t* const w[1] = {reinterpret_cast<const e4m3_t*>(mat.w) + (i64)min(tile * 8 + g, mat.out - 1) * in};
			const GemvScale<1> sc = {{mat.s + (i64)(tile * 8 / sbr) * sgc}, sbc, sgc > 1};
			gemv_tile_e4m3<1>(x, ldx, m, in, ks, share, lane, w, sc, acc);
		}
		gemv_tile_sum<1>(acc, ks, share, lane, warp);
		if (live && share == 0 && g < m) {
#pragma unroll
			for (int i = 0; i < 2; i++) {
				const int row = tile * 8 + 2 * t + i;
				if (row < mat.out) {
					float* y = mat.y + (i64)g * mat.out + row;
					const float v = gemv_fp8_scale_out(acc[0][i], mat, row, sbr, sgc) + (mat.bias ? mat.bias[row] : 0.f);
					*y = accumulate ? *y + v : v;
				}
			}
		}
	}
}

// gemv: the rows of a, b and c, each by ks warps, over x (rows ldx
// apart; FP8 with Perm: in gemv_xperm's order).
template <typename Tw, bool Perm>
__device__ void gemv(const typename GemvT<Tw>::X* x, int ldx, int m, int in, int ks, int accumulate, GemvMat a, GemvMat b,
                     GemvMat c, int sbr, int sbc, int sgc) {
	constexpr bool fp8 = gemv_same<Tw, e4m3_t>::v;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rows_per_block = GEMV_WARPS / ks;
	const int total = a.out + b.out + c.out;
	const int share = warp % ks;
	// Grid-stride over rows: the grid is sized to fill the GPU once, so no
	// partly filled last wave of blocks idles the memory system.
	for (int base = blockIdx.x * rows_per_block; base < total; base += gridDim.x * rows_per_block) {
		int row = base + warp / ks;
		const GemvMat mat = gemv_mat(row, a, b, c);
		const bool live = row < mat.out;
		float acc[1][GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[0][r] = 0.f;
		const float* sr = live ? gemv_scales(mat, row, sbr, sgc) : nullptr;
		if (live) {
			const Tw* const wr[1] = {reinterpret_cast<const Tw*>(mat.w) + (i64)row * in};
			if constexpr (fp8) {
				const GemvScale<1> sc = {{sr}, sbc, sgc > 1};
				gemv_rows_e4m3<Perm, 1>(x, ldx, m, in, ks, share, lane, wr, sc, acc);
			} else {
				gemv_rows<Tw, 1>(x, m, in, ks, share, lane, wr, acc);
			}
		}
		float s[1];
		gemv_sum<1>(acc, m, ks, share, lane, warp, s);
		if (live && share == 0 && lane < m) {
			float* y = mat.y + (i64)lane * mat.out + row;
			const float rs = fp8 && sgc == 1 ? sr[0] : 1.f;
			const float v = s[0] * rs + (mat.bias ? mat.bias[row] : 0.f);
			*y = accumulate ? *y + v : v;
		}
	}
}

#define GEMV_PARAMS(Tx, Tw)                                                                                          \
	const Tx *x, const float *norm, float eps, int mode, int accumulate, int m, int in, int ks, float *y0,           \
	    const Tw *w0, const float *b0, int out0, float *y1, const Tw *w1, const float *b1, int out1, float *y2,      \
	    const Tw *w2, const float *b2, int out2, const float *s0, const float *s1, const float *s2, int sbr, int sbc, \
	    int sgc
#define GEMV_MATS GemvMat{y0, w0, b0, out0, s0}, GemvMat{y1, w1, b1, out1, s1}, GemvMat{y2, w2, b2, out2, s2}
#define GEMV_ARGS                                                                                                  \
	x, norm, eps, mode, accumulate, m, in, ks, y0, w0, b0, out0, y1, w1, b1, out1, y2, w2, b2, out2, s0, s1, s2, sbr, \
	    sbc, sgc

// gemv_<w>_fx: float32 x staged in shared memory ([m, in] in GemvT<Tw>::X,
// dynamic: sizeof(X)·m·in bytes; FP8: 2·m·gemv_fp8_ld(in)), every warp
// reading it from there; the block's first rows are prefetched meanwhile.
template <typename Tw> __device__ void gemv_fx(GEMV_PARAMS(float, Tw)) {
	typedef typename GemvT<Tw>::X X;
	constexpr bool fp8 = gemv_same<Tw, e4m3_t>::v;
	FP8_GUARD(fp8);
	extern __shared__ __attribute__((aligned(16))) unsigned char gemv_smem[];
	X* xs = reinterpret_cast<X*>(gemv_smem);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (fp8 && gemv_fp8_tiled(sbr, sbc, sgc)) {
		int tile = blockIdx.x * (GEMV_WARPS / ks) + warp / ks;
		const GemvMat mat = gemv_tile_mat(tile, GEMV_MATS);
		if (tile * 8 < mat.out) gemv_prefetch_tile(mat.w, tile, mat.out, in, ks, warp % ks, lane);
	} else {
		int row = blockIdx.x * (GEMV_WARPS / ks) + warp / ks;
		const GemvMat mat = gemv_mat(row, GEMV_MATS);
		if (row < mat.out) gemv_prefetch_row(reinterpret_cast<const Tw*>(mat.w) + (i64)row * in, in, ks, warp % ks, lane);
	}
	if constexpr (fp8) {
		if (gemv_fp8_tiled(sbr, sbc, sgc)) {
			const int ldx = gemv_fp8_ldt(in);
			gemv_stage<bf16_t>(xs, x, norm, eps, mode, m, in, ldx);
			__syncthreads();
			gemv_tiled_e4m3(xs, ldx, m, in, ks, accumulate, GEMV_MATS, sbr, sbc, sgc);
		} else {
			const int ldx = gemv_fp8_ld(in);
			gemv_stage<bf16_t, true>(xs, x, norm, eps, mode, m, in, ldx);
			__syncthreads();
			gemv<Tw, true>(xs, ldx, m, in, ks, accumulate, GEMV_MATS, sbr, sbc, sgc);
		}
	} else {
		gemv_stage<Tw>(xs, x, norm, eps, mode, m, in, in);
		__syncthreads();
		gemv<Tw, true>(xs, in, m, in, ks, accumulate, GEMV_MATS, sbr, sbc, sgc);
	}
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_bf16_fx(GEMV_PARAMS(float, bf16_t)) {
	gemv_fx<bf16_t>(GEMV_ARGS);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f16_fx(GEMV_PARAMS(float, f16_t)) {
	gemv_fx<f16_t>(GEMV_ARGS);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f32_fx(GEMV_PARAMS(float, float)) {
	gemv_fx<float>(GEMV_ARGS);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS, GEMV_FP8_BLOCKS) gemv_fp8_fx(GEMV_PARAMS(float, e4m3_t)) {
	gemv_fx<e4m3_t>(GEMV_ARGS);
}
// Direct: x already in GemvT<Tw>::X (bf16 for FP8, as is).
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f32(GEMV_PARAMS(float, float)) {
	gemv<float, false>(x, in, m, in, ks, accumulate, GEMV_MATS, sbr, sbc, sgc);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_bf16(GEMV_PARAMS(bf16_t, bf16_t)) {
	gemv<bf16_t, false>(x, in, m, in, ks, accumulate, GEMV_MATS, sbr, sbc, sgc);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_f16(GEMV_PARAMS(f16_t, f16_t)) {
	gemv<f16_t, false>(x, in, m, in, ks, accumulate, GEMV_MATS, sbr, sbc, sgc);
}
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS, GEMV_FP8_BLOCKS) gemv_fp8(GEMV_PARAMS(bf16_t, e4m3_t)) {
	FP8_GUARD(true);
	if (gemv_fp8_tiled(sbr, sbc, sgc)) gemv_tiled_e4m3(x, in, m, in, ks, accumulate, GEMV_MATS, sbr, sbc, sgc);
	else gemv<e4m3_t, false>(x, in, m, in, ks, accumulate, GEMV_MATS, sbr, sbc, sgc);
}

// gemv_<w>_swiglu: an MLP's gate and up projections of RMSNorm(x) with the
// gated activation in the epilogue,
//
//	h = silu(xn·Wgᵀ + bg) · (xn·Wuᵀ + bu),   xn = x / sqrt(mean(x²) + eps) · norm
//
// x: [m, in] float32 (staged as gemv_fx does, in its dynamic shared
// memory); wg, wu: [inter, in]; h: [m, inter] in GemvT<Tw>::X, which the
// down projection reads directly (gemv_<w>). One warp takes row j of
// both matrices, so the activation needs no second pass over memory.
// gemv_swiglu_tiled_e4m3 is gemv_swiglu's loop for FP8 weights on the
// tensor-core path: a warp takes tile j of gate and of up, 8 rows each.
__device__ void gemv_swiglu_tiled_e4m3(const bf16_t* x, int ldx, int m, int in, int ks, bf16_t* h, const GemvMat& gm,
                                       const GemvMat& um, int sbr, int sbc, int sgc) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
	const int per_block = GEMV_WARPS / ks, share = warp % ks, inter = gm.out;
	const int total = (inter + 7) >> 3;
	for (int base = blockIdx.x * per_block; base < total; base += gridDim.x * per_block) {
		const int tile = base + warp / ks;
		const bool live = tile < total;
		float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
		if (live) {
			const i64 o = (i64)min(tile * 8 + g, inter - 1) * in;
			const e4m3_t* const w[2] = {reinterpret_cast<const e4m3_t*>(gm.w) + o, reinterpret_cast<const e4m3_t*>(um.w) + o};
			const i64 so = (i64)(tile * 8 / sbr) * sgc;
			const GemvScale<2> sc = {{gm.s + so, um.s + so}, sbc, sgc > 1};
			gemv_tile_e4m3<2>(x, ldx, m, in, ks, share, lane, w, sc, acc);
		}
		gemv_tile_sum<2>(acc, ks, share, lane, warp);
		if (live && share == 0 && g < m) {
#pragma unroll
			for (int i = 0; i < 2; i++) {
				const int row = tile * 8 + 2 * t + i;
				if (row < inter) {
					const float gv = gemv_fp8_scale_out(acc[0][i], gm, row, sbr, sgc) + (gm.bias ? gm.bias[row] : 0.f);
					const float uv = gemv_fp8_scale_out(acc[1][i], um, row, sbr, sgc) + (um.bias ? um.bias[row] : 0.f);
					h[(i64)g * inter + row] = from_f32<bf16_t>(silu(gv) * uv);
				}
			}
		}
	}
}

template <typename Tw>
__device__ void gemv_swiglu(const float* x, const float* norm, float eps, int m, int in, int ks,
                            typename GemvT<Tw>::X* h, const Tw* wg, const float* bg, const Tw* wu, const float* bu,
                            int inter, const float* sg, const float* su, int sbr, int sbc, int sgc) {
	typedef typename GemvT<Tw>::X X;
	constexpr bool fp8 = gemv_same<Tw, e4m3_t>::v;
	FP8_GUARD(fp8);
	extern __shared__ __attribute__((aligned(16))) unsigned char gemv_smem[];
	X* xs = reinterpret_cast<X*>(gemv_smem);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rows_per_block = GEMV_WARPS / ks;
	const int share = warp % ks;
	const int first = blockIdx.x * rows_per_block + warp / ks;
	if (fp8 && gemv_fp8_tiled(sbr, sbc, sgc)) {
		if (first * 8 < inter) {
			gemv_prefetch_tile(wg, first, inter, in, ks, share, lane);
			gemv_prefetch_tile(wu, first, inter, in, ks, share, lane);
		}
	} else if (first < inter) {
		gemv_prefetch_row(wg + (i64)first * in, in, ks, share, lane);
		gemv_prefetch_row(wu + (i64)first * in, in, ks, share, lane);
	}
	const GemvMat g = {nullptr, wg, bg, inter, sg}, u = {nullptr, wu, bu, inter, su};
	if constexpr (fp8) {
		if (gemv_fp8_tiled(sbr, sbc, sgc)) {
			const int ldx = gemv_fp8_ldt(in);
			gemv_stage<bf16_t>(xs, x, norm, eps, GEMV_STAGE_NORM, m, in, ldx);
			__syncthreads();
			gemv_swiglu_tiled_e4m3(xs, ldx, m, in, ks, h, g, u, sbr, sbc, sgc);
			return;
		}
	}
	const int ldx = fp8 ? gemv_fp8_ld(in) : in;
	if constexpr (fp8) gemv_stage<bf16_t, true>(xs, x, norm, eps, GEMV_STAGE_NORM, m, in, ldx);
	else gemv_stage<Tw>(xs, x, norm, eps, GEMV_STAGE_NORM, m, in, in);
	__syncthreads();
	for (int base = blockIdx.x * rows_per_block; base < inter; base += gridDim.x * rows_per_block) {
		const int row = base + warp / ks;
		const bool live = row < inter;
		float acc[2][GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[0][r] = acc[1][r] = 0.f;
		const float* sr[2] = {live ? gemv_scales(g, row, sbr, sgc) : nullptr, live ? gemv_scales(u, row, sbr, sgc) : nullptr};
		if (live) {
			const Tw* const wr[2] = {wg + (i64)row * in, wu + (i64)row * in};
			if constexpr (fp8) {
				const GemvScale<2> sc = {{sr[0], sr[1]}, sbc, sgc > 1};
				gemv_rows_e4m3<true, 2>(xs, ldx, m, in, ks, share, lane, wr, sc, acc);
			} else {
				gemv_rows<Tw, 2>(xs, m, in, ks, share, lane, wr, acc);
			}
		}
		float s[2];
		gemv_sum<2>(acc, m, ks, share, lane, warp, s);
		if (live && share == 0 && lane < m) {
			const bool rs = fp8 && sgc == 1;
			const float gv = s[0] * (rs ? sr[0][0] : 1.f) + (bg ? bg[row] : 0.f);
			const float uv = s[1] * (rs ? sr[1][0] : 1.f) + (bu ? bu[row] : 0.f);
			h[(i64)lane * inter + row] = from_f32<X>(silu(gv) * uv);
		}
	}
}

#define GEMV_SWIGLU(suffix, Tw, bounds)                                                                              \
	extern "C" __global__ void __launch_bounds__(bounds) gemv_##suffix##_swiglu(                            \
	    const float* x, const float* norm, float eps, int m, int in, int ks, GemvT<Tw>::X* h, const Tw* wg,          \
	    const float* bg, const Tw* wu, const float* bu, int inter, const float* sg, const float* su, int sbr, int sbc, \
	    int sgc) {                                                                                                   \
		gemv_swiglu<Tw>(x, norm, eps, m, in, ks, h, wg, bg, wu, bu, inter, sg, su, sbr, sbc, sgc);               \
	}
GEMV_SWIGLU(f32, float, 32 * GEMV_WARPS)
GEMV_SWIGLU(bf16, bf16_t, 32 * GEMV_WARPS)
GEMV_SWIGLU(f16, f16_t, 32 * GEMV_WARPS)
GEMV_SWIGLU(fp8, e4m3_t, 32 * GEMV_WARPS COMMA GEMV_FP8_BLOCKS)

// moe_dot accumulates acc[p][r] += w_p·x_r for P weight rows w_p of in
// values and the nr <= GEMV_MAX_ROWS rows x_r (float32, 16-byte aligned),
// each lane of the warp taking 8 values at a time: 16 bytes of each weight
// row per load, and each x row's 8 values read once (two float4, through
// L1) for all P weight rows. The warp's sum is the caller's. Every row's
// sum is taken in the same order whatever nr, P and the row's place among
// the others.
template <typename Tw, int P>
__device__ __forceinline__ void moe_dot(const Tw* (&w)[P], const float* (&x)[GEMV_MAX_ROWS], int nr, int in,
                                        int lane, float (&acc)[P][GEMV_MAX_ROWS]) {
#pragma unroll 2
	for (int k = lane * 8; k < in; k += 32 * 8) {
		float wv[P][8];
#pragma unroll
		for (int p = 0; p < P; p++) gemv_load8(w[p], k, wv[p]);
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) {
			if (r < nr) {
				const float4 a = *reinterpret_cast<const float4*>(x[r] + k);
				const float4 b = *reinterpret_cast<const float4*>(x[r] + k + 4);
				const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
				for (int p = 0; p < P; p++) {
					float s = 0.f;
#pragma unroll
					for (int i = 0; i < 8; i++) s += wv[p][i] * xv[i];
					acc[p][r] += s;
				}
			}
		}
	}
}

// MOE_GEMV_OUTS is the outputs one warp of moe_gemv takes (adjacent rows
// of the matrix), sharing its loads of x.
#define MOE_GEMV_OUTS 2

// moe_gemv: moe_linear (moe.cu) for a decode step's experts: each warp
// takes MOE_GEMV_OUTS outputs of one tile's expert, streaming their
// weight rows (moe_dot) for GEMV_MAX_ROWS of the tile's rows at a time; a
// warp sum finishes each output, accumulated in float32. A tile of more
// rows reads its weight rows again for each further GEMV_MAX_ROWS, from L1
// or L2; a tile of no rows (the unused end of a list sized by the step's
// shape, moe_sort) reads nothing.
//
//	x: [rows, in] float32   w: [n_experts] pointers to [out, in] matrices
//	bias: [n_experts] pointers to [out] float32 (bias null, or an entry null: none)
//	tiles: [n_tiles][3] int: expert, first row, rows (0 or more)   y: [rows, out] float32
//
// in must be a multiple of 8. Launch: grid (ceil(out/(GEMV_WARPS·MOE_GEMV_OUTS)),
// n_tiles), block 32·GEMV_WARPS.
template <typename Tw>
__device__ __forceinline__ void moe_gemv(float* y, const float* x, const Tw* const* w, const float* const* bias,
                                         const int* tiles, int in, int out) {
	const int* tile = tiles + 3 * (i64)blockIdx.y;
	const int e = tile[0], r0 = tile[1], nr = tile[2];
	const int lane = threadIdx.x & 31;
	const int o0 = (blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * MOE_GEMV_OUTS;
	if (nr <= 0 || o0 >= out) return; // a whole warp: o0 is the warp's
	const Tw* wr[MOE_GEMV_OUTS];
	float b[MOE_GEMV_OUTS];
	const float* be = bias != 0 ? bias[e] : 0;
#pragma unroll
	for (int p = 0; p < MOE_GEMV_OUTS; p++) {
		const int o = min(o0 + p, out - 1); // past out: a row read again, never written
		wr[p] = w[e] + (i64)o * in;
		b[p] = be != 0 ? be[o] : 0.f;
	}
	for (int c = 0; c < nr; c += GEMV_MAX_ROWS) {
		const int m = min(nr - c, GEMV_MAX_ROWS);
		const float* xr[GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) xr[r] = x + (i64)(r0 + c + min(r, m - 1)) * in;
		float acc[MOE_GEMV_OUTS][GEMV_MAX_ROWS];
#pragma unroll
		for (int p = 0; p < MOE_GEMV_OUTS; p++)
#pragma unroll
			for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[p][r] = 0.f;
		moe_dot<Tw, MOE_GEMV_OUTS>(wr, xr, m, in, lane, acc);
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) {
			if (r < m) { // m is the warp's: every lane takes part in the sums
#pragma unroll
				for (int p = 0; p < MOE_GEMV_OUTS; p++) {
					const float s = warp_sum(acc[p][r]);
					if (lane == 0 && o0 + p < out) y[(i64)(r0 + c + r) * out + o0 + p] = s + b[p];
				}
			}
		}
	}
}

#define MOE_GEMV(suffix, Tw)                                                                                      \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                                 \
	    moe_gemv_##suffix(float* y, const float* x, const Tw* const* w, const float* const* bias, const int* tiles, \
	                      int in, int out) {                                                                      \
		moe_gemv<Tw>(y, x, w, bias, tiles, in, out);                                                          \
	}
MOE_GEMV(f32, float)
MOE_GEMV(bf16, bf16_t)
MOE_GEMV(f16, f16_t)

// moe_gemv_glu: the gate and up projections of a mixture's routed experts
// with the gated activation in the epilogue, x's rows gathered through
// order, so that a step needs no gather and no activation launch:
//
//	h[r] = act(x[order[r]]·Wg_eᵀ + bg_e, x[order[r]]·Wu_eᵀ + bu_e) for the rows r of expert e,
//	act = silu(g)·u, or (MOE_ACT_CLAMPED) GPT-OSS's (clamp(u, ±limit) + 1)·g'·sigmoid(alpha·g'), g' = min(g, limit)
//
// with the arithmetic of moe_gemv followed by silu_mul_f32 or
// clamped_swiglu_f32, which the host-routed path runs.
//
//	x: [tokens, in] float32   order: [rows] the token of each row
//	wg, wu: [n_experts] pointers to [inter, in]   bg, bu: [n_experts] pointers to [inter] float32 (null, or an entry null: none)
//	tiles: [n_tiles][3] int: expert, first row, rows (0 or more)   h: [rows, inter] float32
//
// in must be a multiple of 8. Launch: grid (ceil(inter/GEMV_WARPS),
// n_tiles), block 32·GEMV_WARPS; one warp takes output j of both
// matrices.
template <typename Tw>
__device__ __forceinline__ void moe_gemv_glu(float* h, const float* x, const int* order, const Tw* const* wg,
                                             const Tw* const* wu, const float* const* bg, const float* const* bu,
                                             const int* tiles, int in, int inter, int act, float alpha, float limit) {
	const int* tile = tiles + 3 * (i64)blockIdx.y;
	const int e = tile[0], r0 = tile[1], nr = tile[2];
	const int lane = threadIdx.x & 31;
	const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	if (nr <= 0 || o >= inter) return; // a whole warp: o is the warp's
	const Tw* wr[2] = {wg[e] + (i64)o * in, wu[e] + (i64)o * in};
	const float* bge = bg != 0 ? bg[e] : 0;
	const float* bue = bu != 0 ? bu[e] : 0;
	const float bgo = bge != 0 ? bge[o] : 0.f, buo = bue != 0 ? bue[o] : 0.f;
	for (int c = 0; c < nr; c += GEMV_MAX_ROWS) {
		const int m = min(nr - c, GEMV_MAX_ROWS);
		const float* xr[GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) xr[r] = x + (i64)order[r0 + c + min(r, m - 1)] * in;
		float acc[2][GEMV_MAX_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[0][r] = acc[1][r] = 0.f;
		moe_dot<Tw, 2>(wr, xr, m, in, lane, acc);
#pragma unroll
		for (int r = 0; r < GEMV_MAX_ROWS; r++) {
			if (r < m) {
				const float g = warp_sum(acc[0][r]) + bgo, u = warp_sum(acc[1][r]) + buo;
				if (lane == 0) {
					h[(i64)(r0 + c + r) * inter + o] = expert_act(g, u, act == MOE_ACT_CLAMPED, alpha, limit);
				}
			}
		}
	}
}

#define MOE_GEMV_GLU(suffix, Tw)                                                                                    \
	extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                                   \
	    moe_gemv_glu_##suffix(float* h, const float* x, const int* order, const Tw* const* wg, const Tw* const* wu, \
	                          const float* const* bg, const float* const* bu, const int* tiles, int in, int inter,   \
	                          int act, float alpha, float limit) {                                                  \
		moe_gemv_glu<Tw>(h, x, order, wg, wu, bg, bu, tiles, in, inter, act, alpha, limit);                          \
	}
MOE_GEMV_GLU(f32, float)
MOE_GEMV_GLU(bf16, bf16_t)
MOE_GEMV_GLU(f16, f16_t)
