// Attention kernels of the GPU backends (attention/gpu, attention/native,
// attention/flash, attention/splitkv).
//
// Every kernel reads the forward's plan, uploaded once per forward by
// attention/gpu (plan.go):
//
//	req:      [n_reqs, REQ_FIELDS] int32: prefix, extend len, first new-token
//	          row, sequence length, offset of the request's page list
//	tok_req:  [n_tokens] request of each new token
//	tok_hi:   [n_tokens] end (exclusive) of the keys the token may see, from
//	          attention.Visible (causal, spans, encode, custom masks)
//	tok_mask: [n_tokens] offset of the token's custom-mask row in mask, or -1
//	pages:    per request, the page of each page_size tokens, in token order
//	          (the ReqToToken row divided by page_size); a key j of request r
//	          lives in row pages[page_off + j/page_size]*page_size + j%page_size
//
// A query at sequence index i sees key j when lo <= j < tok_hi, lo = i+1-window
// with a sliding window (else 0), and mask[tok_mask + j] when it has a mask:
// exactly attention.Visible. Scores are q·k·sm_scale, then softcap·tanh(s/softcap).
//
// K and V rows are read from k_cache/v_cache at row·stride + kv_head·dim in
// the KV dtype (float, bf16, f16, or fp8 e4m3 scaled by k_scale / v_scale);
// for an MLA latent cache v_cache is k_cache and dv its first values; for an
// encoder batch they are the forward's own k and v with the identity plan.

typedef unsigned char u8;
typedef unsigned int u32;

struct fp8_t { u8 bits; };
struct alignas(16) u32x4 { u32 x, y, z, w; };
struct alignas(8) u32x2 { u32 x, y; };

#define NEG_INF __int_as_float(0xff800000)
#define FULL_MASK 0xffffffffu

// REQ_*, the fields of a req row, and the kernels' tile shapes (FUSED_*,
// MMA_*, DECODE_*, DTC_*, MLA_*, FA_*, F3_*), generated from kernels.decl.
#include "attn_gen.cuh"

template <typename A, typename B> struct same_t { static constexpr bool value = false; };
template <typename A> struct same_t<A, A> { static constexpr bool value = true; };

// FP8 E4M3 (e4m3fn): the rules of tensor.FP8E4M3ToF32 / F32ToFP8E4M3.
__device__ __forceinline__ float fp8_to_f32(u32 b) {
	u32 e = (b >> 3) & 0xf, m = b & 7;
	float v;
	if (e == 0xf && m == 7) v = __int_as_float(0x7fc00000);
	else if (e == 0) v = (float)m * (1.f / 512.f);
	else v = __uint_as_float(((e + 120u) << 23) | (m << 20));
	return (b & 0x80) ? -v : v;
}
__device__ __forceinline__ float to_f32(fp8_t v) { return fp8_to_f32(v.bits); }

// Round to nearest even, saturating to ±448, NaN to 0x7f.
template <> __device__ __forceinline__ fp8_t from_f32<fp8_t>(float f) {
	fp8_t r;
	if (f != f) {
		r.bits = 0x7f;
		return r;
	}
	u8 sign = (u8)((__float_as_uint(f) >> 24) & 0x80);
	float a = fabsf(f);
	if (a >= 448.f) {
		r.bits = sign | 0x7e;
		return r;
	}
	if (a < 0.015625f) { // below 2^-6: subnormal steps of 2^-9 (q == 8 is the first normal)
		r.bits = sign | (u8)(int)rintf(a * 512.f);
		return r;
	}
	int e;
	float m = frexpf(a, &e); // a = m·2^e, m in [0.5, 1)
	int q = (int)rintf((2.f * m - 1.f) * 8.f);
	int E = e - 1 + 7;
	if (q == 8) {
		q = 0;
		E++;
	}
	int code = min((E << 3) | q, 0x7e);
	r.bits = sign | (u8)code;
	return r;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
	return v;
}

__device__ __forceinline__ float block_max(float v) {
	__shared__ float partial_max[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) partial_max[warp] = v;
	__syncthreads();
	int nwarps = (blockDim.x + 31) >> 5;
	v = lane < nwarps ? partial_max[lane] : NEG_INF;
	return warp_max(v);
}

// Row of key j of a request in the KV storage.
__device__ __forceinline__ i64 kv_row(const int* pages, int page_off, int page_size, int j) {
	return (i64)pages[page_off + j / page_size] * page_size + j % page_size;
}

// ---------------------------------------------------------------------------
// KV store: k_cache[slot] = k[t]·k_inv_scale (and v) in the cache dtype.
//
//	k, v:             [n_tokens, *] rows of k_stride / v_stride elements
//	slots:            [n_tokens] int32; negative skips (padded rows)
//	k_cache, v_cache: [n_slots, k_width] / [n_slots, v_width]; v_cache null for MLA
//
// Launch: grid n_tokens, block 128.
template <typename Ti, typename Tc>
__device__ void attn_store(Tc* k_cache, Tc* v_cache, const Ti* k, const Ti* v, const int* slots, int k_width,
                           int v_width, i64 k_stride, i64 v_stride, float k_inv_scale, float v_inv_scale) {
	int t = blockIdx.x;
	int slot = slots[t];
	if (slot < 0) return;
	for (int i = threadIdx.x; i < k_width; i += blockDim.x)
		k_cache[(i64)slot * k_width + i] = from_f32<Tc>(to_f32(k[(i64)t * k_stride + i]) * k_inv_scale);
	if (v_cache == nullptr) return;
	for (int i = threadIdx.x; i < v_width; i += blockDim.x)
		v_cache[(i64)slot * v_width + i] = from_f32<Tc>(to_f32(v[(i64)t * v_stride + i]) * v_inv_scale);
}

#define ATTN_STORE(si, sc, Ti, Tc)                                                                                 \
	extern "C" __global__ void attn_store_##si##_##sc(Tc* k_cache, Tc* v_cache, const Ti* k, const Ti* v,          \
	                                                  const int* slots, int k_width, int v_width, i64 k_stride,    \
	                                                  i64 v_stride, float k_inv_scale, float v_inv_scale) {        \
		attn_store<Ti, Tc>(k_cache, v_cache, k, v, slots, k_width, v_width, k_stride, v_stride, k_inv_scale,      \
		                   v_inv_scale);                                                                          \
	}
#define ATTN_STORE_ALL(si, Ti)                                                                                     \
	ATTN_STORE(si, f32, Ti, float)                                                                                 \
	ATTN_STORE(si, bf16, Ti, bf16_t)                                                                               \
	ATTN_STORE(si, f16, Ti, f16_t)                                                                                 \
	ATTN_STORE(si, fp8, Ti, fp8_t)
ATTN_STORE_ALL(f32, float)
ATTN_STORE_ALL(bf16, bf16_t)
ATTN_STORE_ALL(f16, f16_t)

// ---------------------------------------------------------------------------
// The fused attention kernels share one parameter list.
//
//	q:      [n_tokens, n_heads*dk] rows of q_stride elements
//	out:    [n_tokens, n_heads*dv] rows of out_stride elements (n_splits == 1)
//	part_o: [n_splits, n_tokens, n_heads, dv] float32, normalised per split,
//	part_lse: [n_splits, n_tokens, n_heads] natural log-sum-exp of each split's
//	        scores (-inf when the split saw no key); written instead of out
//	        whenever part_o is set (n_splits > 1, or one split whose LSE the
//	        merge needs for attention sinks), split s covering keys
//	        [s·chunk, (s+1)·chunk)
#define ATTN_PARAMS(Ti, Tk)                                                                                      \
	const Ti *q, i64 q_stride, const Tk *k_cache, const Tk *v_cache, i64 k_stride, i64 v_stride, float k_scale,  \
	    float v_scale, Ti *out, i64 out_stride, float *part_o, float *part_lse, const int *req, const int *tok_req, \
	    const int *tok_hi, const int *tok_mask, const u8 *mask, const int *pages, int page_size, int n_heads,      \
	    int n_kv_heads, int dk, int dv, float sm_scale, float softcap, int window, int n_splits, int chunk,        \
	    int n_tokens
#define ATTN_ARGS                                                                                                 \
	q, q_stride, k_cache, v_cache, k_stride, v_stride, k_scale, v_scale, out, out_stride, part_o, part_lse, req,  \
	    tok_req, tok_hi, tok_mask, mask, pages, page_size, n_heads, n_kv_heads, dk, dv, sm_scale, softcap, window, \
	    n_splits, chunk, n_tokens

// TokKeys is what a one-query-per-block kernel reads of new token tok: its
// sequence index i, its request's page-list offset and its visible keys
// [lo, hi) (the window's start to its causal end), which narrow(split)
// cuts to one split's chunk.
struct TokKeys {
	int i, page_off, lo, hi;
	__device__ __forceinline__ void narrow(int n_splits, int split, int chunk) {
		if (n_splits > 1) {
			lo = max(lo, split * chunk);
			hi = min(hi, (split + 1) * chunk);
		}
	}
};
__device__ __forceinline__ TokKeys tok_keys(const int* req, const int* tok_req, const int* tok_hi, int tok, int window) {
	const int* R = req + tok_req[tok] * REQ_FIELDS;
	const int i = R[REQ_PREFIX] + tok - R[REQ_EXT_START];
	return TokKeys{i, R[REQ_PAGE_OFF], window > 0 ? max(0, i + 1 - window) : 0, tok_hi[tok]};
}

// CUDA-core kernel: one block per (new token, query head, split); each warp
// takes 32 keys at a time, one key per lane (score, online softmax), then
// accumulates their values with the lanes across dv. The warps' states are
// merged at the end. Float32 throughout: the kernel for float32 activations
// and the fallback where the tensor-core kernel does not apply.
//
// Launch: grid (n_tokens, n_heads, n_splits), block FUSED_THREADS,
// shared (dk + FUSED_WARPS·(dv + 2))·4 bytes. dv <= FUSED_MAX_DV.

template <typename Ti, typename Tk>
__device__ void attn_fused(ATTN_PARAMS(Ti, Tk)) {
	extern __shared__ float fused_smem[];
	const int tok = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
	TokKeys tk = tok_keys(req, tok_req, tok_hi, tok, window);
	tk.narrow(n_splits, split, chunk);
	const int page_off = tk.page_off, lo = tk.lo, hi = tk.hi;
	const int g = h / (n_heads / n_kv_heads);
	const int moff = tok_mask[tok];

	float* qs = fused_smem;              // [dk]
	float* wo = qs + dk;                 // [FUSED_WARPS, dv]
	float* wm = wo + FUSED_WARPS * dv;   // [FUSED_WARPS]
	float* wl = wm + FUSED_WARPS;        // [FUSED_WARPS]
	const Ti* qr = q + (i64)tok * q_stride + (i64)h * dk;
	for (int d = threadIdx.x; d < dk; d += blockDim.x) qs[d] = to_f32(qr[d]);
	__syncthreads();

	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float m = NEG_INF, l = 0.f;
	float o[FUSED_MAX_DV / 32];
#pragma unroll
	for (int c = 0; c < FUSED_MAX_DV / 32; c++) o[c] = 0.f;
	const Tk* kbase = k_cache + (i64)g * dk;
	const Tk* vbase = v_cache + (i64)g * dv;
	for (int j0 = lo + warp * 32; j0 < hi; j0 += FUSED_WARPS * 32) {
		const int j = j0 + lane;
		float s = NEG_INF;
		i64 row = 0;
		if (j < hi && (moff < 0 || mask[moff + j])) {
			row = kv_row(pages, page_off, page_size, j);
			const Tk* kr = kbase + row * k_stride;
			float acc = 0.f;
			for (int d = 0; d < dk; d++) acc += qs[d] * to_f32(kr[d]);
			s = acc * k_scale * sm_scale;
			if (softcap > 0.f) s = softcap * tanhf(s / softcap);
		}
		const float m_new = fmaxf(m, warp_max(s));
		if (m_new == NEG_INF) continue; // nothing visible yet (warp-uniform)
		const float alpha = expf(m - m_new);
		const float p = expf(s - m_new);
		l = l * alpha + warp_sum(p);
#pragma unroll
		for (int c = 0; c < FUSED_MAX_DV / 32; c++) o[c] *= alpha;
		for (int jj = 0; jj < 32; jj++) {
			const float pj = __shfl_sync(FULL_MASK, p, jj);
			const i64 rj = __shfl_sync(FULL_MASK, row, jj);
			if (pj == 0.f) continue;
			const Tk* vr = vbase + rj * v_stride;
#pragma unroll
			for (int c = 0; c < FUSED_MAX_DV / 32; c++) {
				const int d = lane + 32 * c;
				if (d < dv) o[c] += pj * to_f32(vr[d]);
			}
		}
		m = m_new;
	}

	if (lane == 0) {
		wm[warp] = m;
		wl[warp] = l;
	}
#pragma unroll
	for (int c = 0; c < FUSED_MAX_DV / 32; c++) {
		const int d = lane + 32 * c;
		if (d < dv) wo[warp * dv + d] = o[c];
	}
	__syncthreads();
	float M = NEG_INF;
	for (int w = 0; w < FUSED_WARPS; w++) M = fmaxf(M, wm[w]);
	float L = 0.f;
	for (int w = 0; w < FUSED_WARPS; w++)
		if (wm[w] != NEG_INF) L += wl[w] * expf(wm[w] - M);
	for (int d = threadIdx.x; d < dv; d += blockDim.x) {
		float acc = 0.f;
		for (int w = 0; w < FUSED_WARPS; w++)
			if (wm[w] != NEG_INF) acc += wo[w * dv + d] * expf(wm[w] - M);
		const float val = L > 0.f ? acc / L * v_scale : 0.f;
		if (part_o != nullptr) part_o[(((i64)split * n_tokens + tok) * n_heads + h) * dv + d] = val;
		else out[(i64)tok * out_stride + (i64)h * dv + d] = from_f32<Ti>(val);
	}
	if (part_o != nullptr && threadIdx.x == 0)
		part_lse[((i64)split * n_tokens + tok) * n_heads + h] = L > 0.f ? M + logf(L) : NEG_INF;
}

#define ATTN_FUSED(si, sk, Ti, Tk) \
	extern "C" __global__ void __launch_bounds__(FUSED_THREADS) attn_fused_##si##_##sk(ATTN_PARAMS(Ti, Tk)) { attn_fused<Ti, Tk>(ATTN_ARGS); }
#define ATTN_FUSED_ALL(si, Ti)           \
	ATTN_FUSED(si, f32, Ti, float)   \
	ATTN_FUSED(si, bf16, Ti, bf16_t) \
	ATTN_FUSED(si, f16, Ti, f16_t)   \
	ATTN_FUSED(si, fp8, Ti, fp8_t)
ATTN_FUSED_ALL(f32, float)
ATTN_FUSED_ALL(bf16, bf16_t)
ATTN_FUSED_ALL(f16, f16_t)

// ---------------------------------------------------------------------------
// Tensor-core kernel (FlashAttention-2 style, mma.sync m16n8k16, float32
// accumulation), for bf16 or f16 activations on sm_80 and newer.
//
// A block owns MMA_BM query rows of one request and one KV head: row
// t·group + i is new token t with query head kv_head·group + i, so the heads
// of a GQA group share every K/V tile. Each of the 4 warps owns 16 rows. The
// block walks the keys in tiles of BN, gathered page by page from the pool
// into shared memory (converted to the activation dtype, fp8 dequantised);
// a warp computes its 16×BN scores with mma, applies scale, softcap and the
// visibility rule, updates its running max and sum, and multiplies the
// probabilities (rounded to the activation dtype, as FlashAttention does)
// with the V tile. dk is padded to a multiple of 16 with zeros; dv is cut
// into chunks of MMA_DVC columns (a grid dimension).
//
// Launch: grid (tiles·n_splits, n_reqs, n_kv_heads·ceil(dv/MMA_DVC)) with
// tiles = ceil(max extend·group / MMA_BM); block MMA_THREADS; shared
// 2·(MMA_BM·(dkp+8) + BN·(dkp+8) + BN·(MMA_DVC+8)) bytes, dkp = dk rounded up to 16.

// e4m3x2_to widens two e4m3 values (lo in the low byte) to a packed pair of
// Ti, exactly: every e4m3 value is a bf16 and an f16 value.
template <typename Ti> __device__ __forceinline__ u32 e4m3x2_to(u16 v) {
#if __CUDA_ARCH__ >= 890
	u32 h;
	asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(v));
	return pack_f2<Ti>(to_f32(f16_t{(u16)(h & 0xffff)}), to_f32(f16_t{(u16)(h >> 16)}));
#else
	return pack2(bits_of<Ti>(fp8_to_f32(v & 0xff)), bits_of<Ti>(fp8_to_f32(v >> 8)));
#endif
}
// ex2 is 2^x by the special-function unit, subnormal results flushed to
// zero (softmax weights that small vanish beside the row's maximum).
__device__ __forceinline__ float ex2(float x) {
	float r;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
	return r;
}

// load8 converts the 8 values at src (valid of them, the rest zero), times
// scale, to Ti and stores them at dst (16-byte aligned). vec: src is aligned
// for one vector load of the 8 values.
template <typename Ti, typename Tk>
__device__ __forceinline__ void load8(u16* dst, const Tk* src, float scale, int valid, bool vec) {
	u32x4 w;
	if (valid >= 8 && vec) {
		if constexpr (same_t<Ti, Tk>::value) {
			*(u32x4*)dst = *(const u32x4*)src;
			return;
		} else if constexpr (same_t<Tk, float>::value) {
			const u32x4 a = ((const u32x4*)src)[0], b = ((const u32x4*)src)[1];
			w.x = pack2(bits_of<Ti>(__uint_as_float(a.x) * scale), bits_of<Ti>(__uint_as_float(a.y) * scale));
			w.y = pack2(bits_of<Ti>(__uint_as_float(a.z) * scale), bits_of<Ti>(__uint_as_float(a.w) * scale));
			w.z = pack2(bits_of<Ti>(__uint_as_float(b.x) * scale), bits_of<Ti>(__uint_as_float(b.y) * scale));
			w.w = pack2(bits_of<Ti>(__uint_as_float(b.z) * scale), bits_of<Ti>(__uint_as_float(b.w) * scale));
			*(u32x4*)dst = w;
			return;
		} else if constexpr (same_t<Tk, fp8_t>::value) {
			const u32x2 raw = *(const u32x2*)src;
			u16 e[8];
#pragma unroll
			for (int x = 0; x < 4; x++) {
				e[x] = bits_of<Ti>(fp8_to_f32((raw.x >> (8 * x)) & 0xff) * scale);
				e[x + 4] = bits_of<Ti>(fp8_to_f32((raw.y >> (8 * x)) & 0xff) * scale);
			}
			w.x = pack2(e[0], e[1]);
			w.y = pack2(e[2], e[3]);
			w.z = pack2(e[4], e[5]);
			w.w = pack2(e[6], e[7]);
			*(u32x4*)dst = w;
			return;
		}
	}
	u16 e[8];
#pragma unroll
	for (int x = 0; x < 8; x++) e[x] = x < valid ? bits_of<Ti>(to_f32(src[x]) * scale) : (u16)0;
	w.x = pack2(e[0], e[1]);
	w.y = pack2(e[2], e[3]);
	w.z = pack2(e[4], e[5]);
	w.w = pack2(e[6], e[7]);
	*(u32x4*)dst = w;
}

__device__ __forceinline__ void zero8(u16* dst) { *(u32x4*)dst = u32x4{0, 0, 0, 0}; }

// The stored bytes of 8 consecutive values of Tk, loaded with vector loads.
template <typename Tk> struct raw8_t { u32x4 a; };
template <> struct raw8_t<float> { u32x4 a, b; };
template <> struct raw8_t<fp8_t> { u32x2 a; };

template <typename Tk> __device__ __forceinline__ void ld_raw8(raw8_t<Tk>& r, const Tk* src) {
	if constexpr (same_t<Tk, float>::value) {
		r.a = ((const u32x4*)src)[0];
		r.b = ((const u32x4*)src)[1];
	} else if constexpr (same_t<Tk, fp8_t>::value) {
		r.a = *(const u32x2*)src;
	} else {
		r.a = *(const u32x4*)src;
	}
}

template <typename Ti, typename Tk> __device__ __forceinline__ u32 cvt2(u32 w, float scale) {
	Tk lo, hi;
	lo.bits = (u16)(w & 0xffff);
	hi.bits = (u16)(w >> 16);
	return pack2(bits_of<Ti>(to_f32(lo) * scale), bits_of<Ti>(to_f32(hi) * scale));
}

// cvt8 turns raw values into 8 values of Ti (scaled), packed for shared memory.
template <typename Ti, typename Tk> __device__ __forceinline__ u32x4 cvt8(const raw8_t<Tk>& r, float scale) {
	u32x4 w;
	if constexpr (same_t<Ti, Tk>::value) {
		w = r.a;
	} else if constexpr (same_t<Tk, float>::value) {
		w.x = pack2(bits_of<Ti>(__uint_as_float(r.a.x) * scale), bits_of<Ti>(__uint_as_float(r.a.y) * scale));
		w.y = pack2(bits_of<Ti>(__uint_as_float(r.a.z) * scale), bits_of<Ti>(__uint_as_float(r.a.w) * scale));
		w.z = pack2(bits_of<Ti>(__uint_as_float(r.b.x) * scale), bits_of<Ti>(__uint_as_float(r.b.y) * scale));
		w.w = pack2(bits_of<Ti>(__uint_as_float(r.b.z) * scale), bits_of<Ti>(__uint_as_float(r.b.w) * scale));
	} else if constexpr (same_t<Tk, fp8_t>::value) {
		u16 e[8];
#pragma unroll
		for (int x = 0; x < 4; x++) {
			e[x] = bits_of<Ti>(fp8_to_f32((r.a.x >> (8 * x)) & 0xff) * scale);
			e[x + 4] = bits_of<Ti>(fp8_to_f32((r.a.y >> (8 * x)) & 0xff) * scale);
		}
		w.x = pack2(e[0], e[1]);
		w.y = pack2(e[2], e[3]);
		w.z = pack2(e[4], e[5]);
		w.w = pack2(e[6], e[7]);
	} else { // the other 16-bit type
		w.x = cvt2<Ti, Tk>(r.a.x, scale);
		w.y = cvt2<Ti, Tk>(r.a.y, scale);
		w.z = cvt2<Ti, Tk>(r.a.z, scale);
		w.w = cvt2<Ti, Tk>(r.a.w, scale);
	}
	return w;
}

// load_tile fills rows × ceil16(width) values of a shared tile (row stride
// dst_st) from the rows slots[r]·stride of base (-1: a row of zeros),
// columns from width on zero. Vector path: each thread first issues the
// loads of several chunks, then converts and stores them, so that many
// loads are in flight per thread (a load-store loop would wait for each).
template <typename Ti, typename Tk>
__device__ __forceinline__ void load_tile(u16* dst, int dst_st, const Tk* base, i64 stride, const int* slots, int rows,
                                          int width, float scale, bool vec) {
	const int cpr = ((width + 15) & ~15) / 8; // chunks of 8 per row
	const int total = rows * cpr;
	if (vec && width % 8 == 0) {
		constexpr int U = sizeof(Tk) == 4 ? 4 : 8;
		for (int c0 = threadIdx.x; c0 < total; c0 += U * MMA_THREADS) {
			raw8_t<Tk> r[U];
			bool ok[U];
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int c = c0 + u * MMA_THREADS;
				const int row = c / cpr, c8 = c % cpr;
				const int slot = c < total ? slots[row] : -1;
				ok[u] = slot >= 0 && c8 * 8 < width;
				if (ok[u]) ld_raw8<Tk>(r[u], base + (i64)slot * stride + c8 * 8);
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int c = c0 + u * MMA_THREADS;
				if (c >= total) break;
				u16* d = dst + (c / cpr) * dst_st + (c % cpr) * 8;
				if (ok[u]) *(u32x4*)d = cvt8<Ti, Tk>(r[u], scale);
				else zero8(d);
			}
		}
		return;
	}
	for (int c = threadIdx.x; c < total; c += MMA_THREADS) {
		const int row = c / cpr, c8 = c % cpr;
		const int slot = slots[row];
		u16* d = dst + row * dst_st + c8 * 8;
		if (slot < 0 || c8 * 8 >= width) zero8(d);
		else load8<Ti, Tk>(d, base + (i64)slot * stride + c8 * 8, scale, width - c8 * 8, vec);
	}
}

// aligned_for reports whether rows at base + row·stride + offset (elements
// of size elem) can be read 8 values at a time with one vector load.
__device__ __forceinline__ bool aligned_for(const void* base, i64 stride, i64 offset, int elem) {
	const int a = min(16, 8 * elem);
	return ((unsigned long long)base % a) == 0 && (stride * elem) % a == 0 && (offset * elem) % a == 0;
}

template <typename Ti, typename Tk, int BN>
__device__ void attn_mma(ATTN_PARAMS(Ti, Tk)) {
	extern __shared__ u32x4 mma_smem[];
	__shared__ int key_slot[BN];
	__shared__ int tile_hi;
	const int split = blockIdx.x % n_splits, tile = blockIdx.x / n_splits;
	const int* R = req + blockIdx.y * REQ_FIELDS;
	const int prefix = R[REQ_PREFIX], ext_len = R[REQ_EXT_LEN], ext_start = R[REQ_EXT_START];
	const int page_off = R[REQ_PAGE_OFF];
	const int group = n_heads / n_kv_heads;
	const int rows = ext_len * group;
	const int row0 = tile * MMA_BM;
	if (row0 >= rows) return;
	const int g = blockIdx.z % n_kv_heads, dv0 = (blockIdx.z / n_kv_heads) * MMA_DVC;
	const int dvn = min(MMA_DVC, dv - dv0);
	const int dkp = (dk + 15) & ~15;
	const int qst = dkp + 8, vst = MMA_DVC + 8; // row strides (u16) of the shared tiles
	u16* Qs = (u16*)mma_smem;
	u16* Ks = Qs + MMA_BM * qst;
	u16* Vs = Ks + BN * qst;
	const int tid = threadIdx.x;

	const int t_first = row0 / group, t_last = (min(rows, row0 + MMA_BM) - 1) / group;
	if (tid == 0) tile_hi = 0;
	__syncthreads();
	for (int t = t_first + tid; t <= t_last; t += MMA_THREADS) atomicMax(&tile_hi, tok_hi[ext_start + t]);

	// Q tile: row r is token row0+r / group, head g·group + (row0+r) % group.
	const bool qvec = aligned_for(q, q_stride, dk, sizeof(Ti));
	for (int c = tid; c < MMA_BM * (dkp / 8); c += MMA_THREADS) {
		const int r = c / (dkp / 8), c8 = c % (dkp / 8);
		const int gr = row0 + r;
		u16* dst = Qs + r * qst + c8 * 8;
		if (gr >= rows || c8 * 8 >= dk) {
			zero8(dst);
			continue;
		}
		const Ti* src = q + (i64)(ext_start + gr / group) * q_stride + (i64)(g * group + gr % group) * dk + c8 * 8;
		load8<Ti, Ti>(dst, src, 1.f, dk - c8 * 8, qvec);
	}

	// The two rows of this thread in each mma fragment: gid and gid+8 of its warp's 16.
	const int warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
	const bool warp_active = row0 + warp * 16 < rows;
	int r_lo[2], r_hi[2], r_moff[2], r_tok[2], r_head[2];
	bool r_ok[2];
#pragma unroll
	for (int x = 0; x < 2; x++) {
		const int gr = row0 + warp * 16 + gid + 8 * x;
		r_ok[x] = gr < rows;
		const int t = r_ok[x] ? gr / group : 0;
		r_tok[x] = ext_start + t;
		r_head[x] = g * group + (r_ok[x] ? gr % group : 0);
		const int i = prefix + t;
		r_lo[x] = window > 0 ? max(0, i + 1 - window) : 0;
		r_hi[x] = r_ok[x] ? tok_hi[r_tok[x]] : 0;
		r_moff[x] = r_ok[x] ? tok_mask[r_tok[x]] : -1;
		if (n_splits > 1) {
			r_lo[x] = max(r_lo[x], split * chunk);
			r_hi[x] = min(r_hi[x], (split + 1) * chunk);
		}
	}
	__syncthreads(); // tile_hi is complete
	int lo = window > 0 ? max(0, prefix + t_first + 1 - window) : 0;
	int hi = tile_hi;
	if (n_splits > 1) {
		lo = max(lo, split * chunk);
		hi = min(hi, (split + 1) * chunk);
	}

	const bool kvec = aligned_for(k_cache, k_stride, (i64)g * dk, sizeof(Tk));
	const bool vvec = aligned_for(v_cache, v_stride, (i64)g * dv + dv0, sizeof(Tk));
	float o[MMA_DVC / 8][4];
#pragma unroll
	for (int vt = 0; vt < MMA_DVC / 8; vt++) o[vt][0] = o[vt][1] = o[vt][2] = o[vt][3] = 0.f;
	float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};

	for (int kb = lo; kb < hi; kb += BN) {
		__syncthreads(); // the previous tiles are consumed
		if (tid < BN) {
			const int j = kb + tid;
			key_slot[tid] = j < hi ? (int)kv_row(pages, page_off, page_size, j) : -1;
		}
		__syncthreads();
		load_tile<Ti, Tk>(Ks, qst, k_cache + (i64)g * dk, k_stride, key_slot, BN, dk, k_scale, kvec);
		load_tile<Ti, Tk>(Vs, vst, v_cache + (i64)g * dv + dv0, v_stride, key_slot, BN, dvn, v_scale, vvec);
		__syncthreads();
		if (!warp_active) continue;

		float s[BN / 8][4];
#pragma unroll
		for (int nt = 0; nt < BN / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
		for (int kk = 0; kk < dkp / 16; kk++) {
			const u16* qa = Qs + (warp * 16 + gid) * qst + kk * 16 + tig * 2;
			const u32 a[4] = {*(const u32*)qa, *(const u32*)(qa + 8 * qst), *(const u32*)(qa + 8),
			                  *(const u32*)(qa + 8 * qst + 8)};
#pragma unroll
			for (int nt = 0; nt < BN / 8; nt++) {
				const u16* kp = Ks + (nt * 8 + gid) * qst + kk * 16 + tig * 2;
				const u32 b[2] = {*(const u32*)kp, *(const u32*)(kp + 8)};
				mma16816<Ti>(s[nt], a, b);
			}
		}

#pragma unroll
		for (int x = 0; x < 2; x++) {
			float mx = NEG_INF;
#pragma unroll
			for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const int j = kb + nt * 8 + tig * 2 + e;
					float v = s[nt][2 * x + e] * sm_scale;
					if (softcap > 0.f) v = softcap * tanhf(v / softcap);
					const bool vis = j >= r_lo[x] && j < r_hi[x] && (r_moff[x] < 0 || mask[r_moff[x] + j]);
					v = vis ? v : NEG_INF;
					s[nt][2 * x + e] = v;
					mx = fmaxf(mx, v);
				}
			}
			mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
			const float m_new = fmaxf(m[x], mx);
			const float m_use = m_new == NEG_INF ? 0.f : m_new;
			const float alpha = expf(m[x] - m_use);
			float ls = 0.f;
#pragma unroll
			for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const float p = expf(s[nt][2 * x + e] - m_use);
					s[nt][2 * x + e] = p;
					ls += p;
				}
			}
			l[x] = l[x] * alpha + ls;
#pragma unroll
			for (int vt = 0; vt < MMA_DVC / 8; vt++) {
				o[vt][2 * x] *= alpha;
				o[vt][2 * x + 1] *= alpha;
			}
			m[x] = m_new;
		}

#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++) {
			const u32 a[4] = {pack2(bits_of<Ti>(s[2 * kk][0]), bits_of<Ti>(s[2 * kk][1])),
			                  pack2(bits_of<Ti>(s[2 * kk][2]), bits_of<Ti>(s[2 * kk][3])),
			                  pack2(bits_of<Ti>(s[2 * kk + 1][0]), bits_of<Ti>(s[2 * kk + 1][1])),
			                  pack2(bits_of<Ti>(s[2 * kk + 1][2]), bits_of<Ti>(s[2 * kk + 1][3]))};
			const u16* vb = Vs + (kk * 16 + tig * 2) * vst + gid;
#pragma unroll
			for (int vt = 0; vt < MMA_DVC / 8; vt++) {
				if (vt * 8 >= dvn) break;
				const u16* p = vb + vt * 8;
				const u32 b[2] = {pack2(p[0], p[vst]), pack2(p[8 * vst], p[9 * vst])};
				mma16816<Ti>(o[vt], a, b);
			}
		}
	}

#pragma unroll
	for (int x = 0; x < 2; x++) {
		l[x] += __shfl_xor_sync(FULL_MASK, l[x], 1);
		l[x] += __shfl_xor_sync(FULL_MASK, l[x], 2);
	}
#pragma unroll
	for (int x = 0; x < 2; x++) {
		if (!r_ok[x]) continue;
		const float inv = l[x] > 0.f ? 1.f / l[x] : 0.f;
		const int tok = r_tok[x], head = r_head[x];
#pragma unroll
		for (int vt = 0; vt < MMA_DVC / 8; vt++) {
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int col = vt * 8 + tig * 2 + e;
				if (col >= dvn) continue;
				const float val = o[vt][2 * x + e] * inv;
				if (part_o != nullptr) part_o[(((i64)split * n_tokens + tok) * n_heads + head) * dv + dv0 + col] = val;
				else out[(i64)tok * out_stride + (i64)head * dv + dv0 + col] = from_f32<Ti>(val);
			}
		}
		if (part_o != nullptr && dv0 == 0 && tig == 0)
			part_lse[((i64)split * n_tokens + tok) * n_heads + head] = l[x] > 0.f ? m[x] + logf(l[x]) : NEG_INF;
	}
}

#define ATTN_MMA(bn, si, sk, Ti, Tk)                                                                       \
	extern "C" __global__ void __launch_bounds__(MMA_THREADS) attn_mma##bn##_##si##_##sk(ATTN_PARAMS(Ti, Tk)) { \
		attn_mma<Ti, Tk, bn>(ATTN_ARGS);                                                                   \
	}
#define ATTN_MMA_BN(si, sk, Ti, Tk) \
	ATTN_MMA(64, si, sk, Ti, Tk)    \
	ATTN_MMA(32, si, sk, Ti, Tk)
ATTN_MMA_BN(bf16, f32, bf16_t, float)
ATTN_MMA_BN(bf16, bf16, bf16_t, bf16_t)
ATTN_MMA_BN(bf16, fp8, bf16_t, fp8_t)
ATTN_MMA_BN(f16, f32, f16_t, float)
ATTN_MMA_BN(f16, bf16, f16_t, bf16_t)
ATTN_MMA_BN(f16, f16, f16_t, f16_t)
ATTN_MMA_BN(f16, fp8, f16_t, fp8_t)

// ---------------------------------------------------------------------------
// Merge of split partials through their log-sum-exps:
//
//	out[t, h] = Σ_s exp(lse_s - M)·o_s / Σ_s exp(lse_s - M),  M = max_s lse_s
//
// Launch: grid (n_tokens, n_heads), block 128, shared n_splits·4 bytes.
// split_weights: one warp writes w[s] = exp(lse_s − M) / Σ exp(lse − M),
// M = max lse, for the n splits of one (token, head), split s's LSE at
// lse[s·stride]; an empty split (−inf) weighs 0, and so does every split
// when all are empty. Its lanes take the splits, so the LSEs are read in
// parallel. attn_merge and the decode kernel's in-kernel merge share it.
__device__ __forceinline__ void split_weights(const float* lse, i64 stride, int n, float* w, float* total = nullptr) {
	const int lane = threadIdx.x & 31;
	float M = NEG_INF;
	for (int s = lane; s < n; s += 32) M = fmaxf(M, lse[s * stride]);
	M = warp_max(M);
	float W = 0.f;
	for (int s = lane; s < n; s += 32) {
		const float l = lse[s * stride];
		W += l == NEG_INF ? 0.f : expf(l - M);
	}
	W = warp_sum(W);
	for (int s = lane; s < n; s += 32) {
		const float l = lse[s * stride];
		w[s] = l == NEG_INF || W <= 0.f ? 0.f : expf(l - M) / W;
	}
	if (total != nullptr && lane == 0) *total = W > 0.f ? M + logf(W) : NEG_INF;
}

// sink_factor is the share of a softmax row left to its keys when a sink
// logit joins the denominator: e^lse / (e^lse + e^sink), lse the keys'
// log-sum-exp, computed without overflow; 0 when no key is visible.
__device__ __forceinline__ float sink_factor(float lse, float sink) {
	if (lse == NEG_INF) return 0.f;
	if (sink > lse) {
		const float e = expf(lse - sink);
		return e / (1.f + e);
	}
	return 1.f / (1.f + expf(sink - lse));
}

//
// With sinks ([n_heads] logits, or null) the merged row is scaled by
// sink_factor of the splits' total log-sum-exp: the sink's share of the
// softmax goes to no value.
template <typename To>
__device__ void attn_merge(To* out, i64 out_stride, const float* part_o, const float* part_lse, int n_splits,
                           int n_tokens, int n_heads, int dv, const float* sinks) {
	extern __shared__ float merge_w[];
	__shared__ float merge_lse;
	const int tok = blockIdx.x, h = blockIdx.y;
	if (threadIdx.x < 32)
		split_weights(part_lse + (i64)tok * n_heads + h, (i64)n_tokens * n_heads, n_splits, merge_w, &merge_lse);
	__syncthreads();
	const float f = sinks != nullptr ? sink_factor(merge_lse, sinks[h]) : 1.f;
	for (int d = threadIdx.x; d < dv; d += blockDim.x) {
		float acc = 0.f;
		for (int s = 0; s < n_splits; s++)
			if (merge_w[s] != 0.f) acc += merge_w[s] * part_o[(((i64)s * n_tokens + tok) * n_heads + h) * dv + d];
		out[(i64)tok * out_stride + (i64)h * dv + d] = from_f32<To>(acc * f);
	}
}

#define ATTN_MERGE(so, To)                                                                                      \
	extern "C" __global__ void attn_merge_##so(To* out, i64 out_stride, const float* part_o, const float* part_lse, \
	                                           int n_splits, int n_tokens, int n_heads, int dv,                    \
	                                           const float* sinks) {                                              \
		attn_merge<To>(out, out_stride, part_o, part_lse, n_splits, n_tokens, n_heads, dv, sinks);               \
	}
ATTN_MERGE(f32, float)
ATTN_MERGE(bf16, bf16_t)
ATTN_MERGE(f16, f16_t)

// ---------------------------------------------------------------------------
// Attention sinks after a library's fused softmax (the cudnn backend):
//
//	out[t, h] = o[t, h] · sink_factor(lse(t, h), sinks[h])
//
//	o, out: [n_tokens, n_heads·dv]; o bf16 (cuDNN's output), out in To, and
//	        out may be o itself (each element is read, then written, by
//	        one thread)
//	stats:  float32 log-sum-exp of the keys' scores of query i of sequence
//	        b, head h, at b·stats_b + h·stats_h + i·stats_s; token t is
//	        query i = t − ext_start of sequence b = tok_req[t] (its
//	        request: a decode's dense rows are t = b, i = 0)
//
// Launch: grid (n_tokens, n_heads), block 128.
template <typename To>
__device__ void attn_sink_scale(To* out, const bf16_t* o, const float* stats, int stats_b, int stats_h, int stats_s,
                                const float* sinks, const int* req, const int* tok_req, int n_heads, int dv) {
	const int tok = blockIdx.x, h = blockIdx.y;
	const int b = tok_req[tok];
	const int i = tok - req[b * REQ_FIELDS + REQ_EXT_START];
	const float lse = stats[(i64)b * stats_b + (i64)h * stats_h + (i64)i * stats_s];
	const float f = sink_factor(lse, sinks[h]);
	const i64 row = ((i64)tok * n_heads + h) * dv;
	for (int d = threadIdx.x; d < dv; d += blockDim.x) out[row + d] = from_f32<To>(to_f32(o[row + d]) * f);
}

#define ATTN_SINK_SCALE(so, To)                                                                                    \
	extern "C" __global__ void attn_sink_scale_##so(To* out, const bf16_t* o, const float* stats, int stats_b,     \
	                                                int stats_h, int stats_s, const float* sinks, const int* req,   \
	                                                const int* tok_req, int n_heads, int dv) {                      \
		attn_sink_scale<To>(out, o, stats, stats_b, stats_h, stats_s, sinks, req, tok_req, n_heads, dv);          \
	}
ATTN_SINK_SCALE(f32, float)
ATTN_SINK_SCALE(bf16, bf16_t)
ATTN_SINK_SCALE(f16, f16_t)

// ---------------------------------------------------------------------------
// The native backend's steps around its cuBLAS GEMMs, per request.

// Gather request r's keys (or values) into a dense float32 buffer, dequantised.
//
//	dst: [heads, seq, width]; head hh of key j read at row(j)·stride + hh·width
//
// Launch: grid (seq, heads), block 128.
template <typename Tk>
__device__ void attn_gather(float* dst, const Tk* src, i64 stride, float scale, const int* req, const int* pages,
                            int page_size, int r, int width) {
	const int j = blockIdx.x, hh = blockIdx.y, seq = gridDim.x;
	const i64 row = kv_row(pages, req[r * REQ_FIELDS + REQ_PAGE_OFF], page_size, j);
	const Tk* s = src + row * stride + (i64)hh * width;
	float* d = dst + ((i64)hh * seq + j) * width;
	for (int x = threadIdx.x; x < width; x += blockDim.x) d[x] = to_f32(s[x]) * scale;
}

#define ATTN_GATHER(sk, Tk)                                                                                     \
	extern "C" __global__ void attn_gather_##sk(float* dst, const Tk* src, i64 stride, float scale, const int* req, \
	                                            const int* pages, int page_size, int r, int width) {               \
		attn_gather<Tk>(dst, src, stride, scale, req, pages, page_size, r, width);                               \
	}
ATTN_GATHER(f32, float)
ATTN_GATHER(bf16, bf16_t)
ATTN_GATHER(f16, f16_t)
ATTN_GATHER(fp8, fp8_t)

// Gather the queries of rows row0.. into dst [n_heads, n, dk] float32, so that
// the heads of KV head g are the contiguous matrix [group·n, dk] at g·group·n·dk.
//
// Launch: grid (n, n_heads), block 128.
template <typename Ti>
__device__ void attn_gather_q(float* dst, const Ti* q, i64 q_stride, int row0, int dk) {
	const int t = blockIdx.x, h = blockIdx.y, n = gridDim.x;
	const Ti* s = q + (i64)(row0 + t) * q_stride + (i64)h * dk;
	float* d = dst + ((i64)h * n + t) * dk;
	for (int x = threadIdx.x; x < dk; x += blockDim.x) d[x] = to_f32(s[x]);
}

// Scatter dst [n_heads, n, dv] float32 into out rows row0.. in the output dtype.
//
// Launch: grid (n, n_heads), block 128.
template <typename To>
__device__ void attn_scatter(To* out, i64 out_stride, const float* src, int row0, int dv) {
	const int t = blockIdx.x, h = blockIdx.y, n = gridDim.x;
	const float* s = src + ((i64)h * n + t) * dv;
	To* d = out + (i64)(row0 + t) * out_stride + (i64)h * dv;
	for (int x = threadIdx.x; x < dv; x += blockDim.x) d[x] = from_f32<To>(s[x]);
}

#define ATTN_QO(si, Ti)                                                                                       \
	extern "C" __global__ void attn_gather_q_##si(float* dst, const Ti* q, i64 q_stride, int row0, int dk) {  \
		attn_gather_q<Ti>(dst, q, q_stride, row0, dk);                                                        \
	}                                                                                                         \
	extern "C" __global__ void attn_scatter_##si(Ti* out, i64 out_stride, const float* src, int row0, int dv) { \
		attn_scatter<Ti>(out, out_stride, src, row0, dv);                                                     \
	}
ATTN_QO(f32, float)
ATTN_QO(bf16, bf16_t)
ATTN_QO(f16, f16_t)

// Masked softmax over raw scores, in place, for the n queries of rows
// row0.. (one request; the first at sequence index q_seq0):
//
//	s: [n_heads, n, seq]; row (h, t) becomes softmax(scale·s, softcap, visibility)
//	sinks: [n_heads] logits joining each row's denominator, or null
//
// Launch: grid (n, n_heads), block 256.
extern "C" __global__ void attn_softmax(float* s, int seq, int row0, int q_seq0, const int* tok_hi,
                                        const int* tok_mask, const u8* mask, float sm_scale, float softcap,
                                        int window, const float* sinks) {
	const int t = blockIdx.x, h = blockIdx.y, n = gridDim.x;
	float* row = s + ((i64)h * n + t) * seq;
	const int tok = row0 + t, i = q_seq0 + t;
	const int lo = window > 0 ? max(0, i + 1 - window) : 0, hi = tok_hi[tok], moff = tok_mask[tok];
	float mx = NEG_INF;
	for (int j = threadIdx.x; j < seq; j += blockDim.x) {
		float v = NEG_INF;
		if (j >= lo && j < hi && (moff < 0 || mask[moff + j])) {
			v = row[j] * sm_scale;
			if (softcap > 0.f) v = softcap * tanhf(v / softcap);
		}
		row[j] = v;
		mx = fmaxf(mx, v);
	}
	mx = block_max(mx);
	const float sink = sinks != nullptr ? sinks[h] : NEG_INF;
	mx = fmaxf(mx, sink);
	float sum = 0.f;
	for (int j = threadIdx.x; j < seq; j += blockDim.x) {
		const float e = row[j] == NEG_INF ? 0.f : expf(row[j] - mx);
		row[j] = e;
		sum += e;
	}
	sum = block_sum(sum);
	if (sink != NEG_INF) sum += expf(sink - mx); // the sink's share of the denominator
	for (int j = threadIdx.x; j < seq; j += blockDim.x) row[j] = sum > 0.f ? row[j] / sum : 0.f;
}

// ---------------------------------------------------------------------------
// Decode: one new token per request, float32 queries over a paged KV cache
// (any storage dtype), float32 output. One block per (token, KV head,
// split) serves every query head of the KV head's group, so each key and
// value row is read once for the group: lanes hold DPL consecutive values
// of a row (coalesced), each warp walks keys DECODE_WARPS apart with an
// online softmax per head, and the warps' states merge in shared memory.
// Same outputs as attn_fused (normalised partials and natural-log LSEs per
// split, merged by attn_merge_f32).
//
// Two steps of a decode layer ride along when their pointers are set:
//   - the KV store (k_new, v_new: the new tokens' float32 k and v, rows of
//     kn_stride / vn_stride; slots: their cache rows, attn_store's inputs):
//     the block whose split holds the token's own position writes its
//     head's row, rounded to the cache dtype (divided by the fp8 scale),
//     before it reads the cache; no other block reads that row;
//   - the split merge (counters: [n_tokens·n_kv_heads] ints, zero at rest):
//     the last split of a (token, KV head) to finish merges the group's
//     partials into out and sets its counter back to zero.
//
// Launch: grid (n_tokens, n_kv_heads, n_splits), block 32·DECODE_WARPS,
// shared DECODE_WARPS·group·(dv + 2)·4 bytes. dk = 32·DPL, dv = 32·DPLV,
// group <= G <= DECODE_MAX_GROUP (the kernels come for G = 1, 2, 4 and 8,
// the registers of a group's queries and outputs; the host takes the
// smallest that holds the group). No custom mask (decode has none).

template <typename Tk, int DPL>
__device__ __forceinline__ void decode_load(const Tk* p, float v[DPL]) {
#pragma unroll
	for (int i = 0; i < DPL; i++) v[i] = to_f32(p[i]);
}
template <>
__device__ __forceinline__ void decode_load<bf16_t, 4>(const bf16_t* p, float v[4]) {
	const u32x2 u = *reinterpret_cast<const u32x2*>(p);
	v[0] = __uint_as_float(u.x << 16), v[1] = __uint_as_float(u.x & 0xffff0000u);
	v[2] = __uint_as_float(u.y << 16), v[3] = __uint_as_float(u.y & 0xffff0000u);
}
template <>
__device__ __forceinline__ void decode_load<bf16_t, 8>(const bf16_t* p, float v[8]) {
	const u32x4 u = *reinterpret_cast<const u32x4*>(p);
	const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
	for (int i = 0; i < 4; i++) v[2 * i] = __uint_as_float(w[i] << 16), v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
}

// decode_finish is the end of both decode kernels: smem holds each warp's
// state for the group's heads, wo [DECODE_WARPS][group][dv] (unnormalised
// outputs), then wm and wl [DECODE_WARPS][group] (running max, sum). It
// merges the warps into the split's normalised output (out when n_splits
// is 1, else part_o/part_lse), and with counters set, the last split of the
// (token, KV head) to finish merges every split into out.
template <typename To>
__device__ void decode_finish(float* smem, int group, int dv, int tok, int g, int split, float v_scale, To* out,
                              i64 out_stride, float* part_o, float* part_lse, int n_heads, int n_kv_heads,
                              int n_splits, int n_tokens, int* counters) {
	const float* wo = smem;
	const float* wm = wo + DECODE_WARPS * group * dv;
	const float* wl = wm + DECODE_WARPS * group;
	const int warp = threadIdx.x >> 5;
	for (int e = threadIdx.x; e < group * dv; e += blockDim.x) {
		const int h = e / dv, d = e % dv;
		float M = NEG_INF;
		for (int w = 0; w < DECODE_WARPS; w++) M = fmaxf(M, wm[w * group + h]);
		float L = 0.f, acc = 0.f;
		for (int w = 0; w < DECODE_WARPS; w++) {
			const float mw = wm[w * group + h];
			if (mw == NEG_INF) continue;
			const float f = expf(mw - M);
			L += wl[w * group + h] * f;
			acc += wo[(w * group + h) * dv + d] * f;
		}
		const int head = g * group + h;
		const float val = L > 0.f ? acc / L * v_scale : 0.f;
		if (part_o != nullptr) {
			part_o[(((i64)split * n_tokens + tok) * n_heads + head) * dv + d] = val;
			if (d == 0) part_lse[((i64)split * n_tokens + tok) * n_heads + head] = L > 0.f ? M + logf(L) : NEG_INF;
		} else {
			out[(i64)tok * out_stride + (i64)head * dv + d] = from_f32<To>(val);
		}
	}
	if (n_splits == 1 || counters == nullptr) return;
	// The last split to finish merges: publish this block's partials, count
	// it, and let the block that completes the count read them all.
	__shared__ int decode_last;
	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0) decode_last = atomicAdd(&counters[tok * n_kv_heads + g], 1) == n_splits - 1;
	__syncthreads();
	if (!decode_last) return;
	__threadfence();
	// The merge weights of the group's heads, [group][n_splits], reuse the
	// shared memory (the host keeps n_splits <= DECODE_WARPS·(dv + 2)): a
	// warp per head (split_weights). Then as attn_merge: out = Σ_s w_s·o_s.
	float* wts = smem;
	const i64 sstride = (i64)n_tokens * n_heads;
	for (int h = warp; h < group; h += DECODE_WARPS)
		split_weights(part_lse + (i64)tok * n_heads + g * group + h, sstride, n_splits, wts + h * n_splits);
	__syncthreads();
	for (int e = threadIdx.x; e < group * dv; e += blockDim.x) {
		const int h = e / dv, d = e % dv, head = g * group + h;
		float acc = 0.f;
		for (int s = 0; s < n_splits; s++) {
			const float w = wts[h * n_splits + s];
			if (w != 0.f) acc += w * part_o[((s * sstride + (i64)tok * n_heads + head)) * dv + d];
		}
		out[(i64)tok * out_stride + (i64)head * dv + d] = from_f32<To>(acc);
	}
	if (threadIdx.x == 0) counters[tok * n_kv_heads + g] = 0;
}

template <typename Tk, int DPL, int DPLV, int G, int KU>
__device__ void attn_decode(const float* q, i64 q_stride, const Tk* k_cache, const Tk* v_cache, i64 k_stride,
                            i64 v_stride, float k_scale, float v_scale, float* out, i64 out_stride, float* part_o,
                            float* part_lse, const int* req, const int* tok_req, const int* tok_hi, const int* pages,
                            int page_size, int n_heads, int n_kv_heads, float sm_scale, float softcap, int window,
                            int n_splits, int chunk, int n_tokens, const float* k_new, const float* v_new,
                            i64 kn_stride, i64 vn_stride, const int* slots, float k_inv, float v_inv, int* counters) {
	extern __shared__ float decode_smem[];
	const int dk = 32 * DPL, dv = 32 * DPLV;
	const int tok = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
	const int group = n_heads / n_kv_heads;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	TokKeys tk = tok_keys(req, tok_req, tok_hi, tok, window);
	const int i = tk.i, page_off = tk.page_off;
	if (k_new != nullptr && (n_splits == 1 || i / chunk == split)) {
		const int slot = slots[tok];
		if (slot >= 0) {
			Tk* kc = const_cast<Tk*>(k_cache) + (i64)slot * k_stride + (i64)g * dk;
			Tk* vc = const_cast<Tk*>(v_cache) + (i64)slot * v_stride + (i64)g * dv;
			for (int d = threadIdx.x; d < dk; d += blockDim.x)
				kc[d] = from_f32<Tk>(k_new[(i64)tok * kn_stride + (i64)g * dk + d] * k_inv);
			for (int d = threadIdx.x; d < dv; d += blockDim.x)
				vc[d] = from_f32<Tk>(v_new[(i64)tok * vn_stride + (i64)g * dv + d] * v_inv);
		}
		__syncthreads(); // the block's own stores are visible to its loads below
	}
	tk.narrow(n_splits, split, chunk);
	const int lo = tk.lo, hi = tk.hi;
	float qv[G][DPL];
	float o[G][DPLV];
	float m[G], l[G];
	const float qscale = sm_scale * k_scale;
#pragma unroll
	for (int h = 0; h < G; h++) {
		m[h] = NEG_INF, l[h] = 0.f;
#pragma unroll
		for (int c = 0; c < DPLV; c++) o[h][c] = 0.f;
#pragma unroll
		for (int c = 0; c < DPL; c++)
			qv[h][c] = h < group ? q[(i64)tok * q_stride + (i64)(g * group + h) * dk + lane * DPL + c] * qscale : 0.f;
	}
	const Tk* kbase = k_cache + (i64)g * dk + lane * DPL;
	const Tk* vbase = v_cache + (i64)g * dv + lane * DPLV;
	if constexpr (KU == 1) {
	// One key at a time, the next key's page lookup and loads issued before
	// this key's scores: a lone request (its many splits fill the GPU; the
	// blocks of keys below measured 5-7% slower there on an H100).
	float kv[DPL], vv[DPLV];
	if (lo + warp < hi) {
		const i64 row = kv_row(pages, page_off, page_size, lo + warp);
		decode_load<Tk, DPL>(kbase + row * k_stride, kv);
		decode_load<Tk, DPLV>(vbase + row * v_stride, vv);
	}
	for (int j = lo + warp; j < hi; j += DECODE_WARPS) {
		float kn[DPL], vn[DPLV];
		if (j + DECODE_WARPS < hi) {
			const i64 row = kv_row(pages, page_off, page_size, j + DECODE_WARPS);
			decode_load<Tk, DPL>(kbase + row * k_stride, kn);
			decode_load<Tk, DPLV>(vbase + row * v_stride, vn);
		}
#pragma unroll
		for (int h = 0; h < G; h++) {
			if (h >= group) break;
			float s = 0.f;
#pragma unroll
			for (int c = 0; c < DPL; c++) s += qv[h][c] * kv[c];
			s = warp_sum(s);
			if (softcap > 0.f) s = softcap * tanhf(s / softcap);
			const float m_new = fmaxf(m[h], s);
			const float alpha = expf(m[h] - m_new), p = expf(s - m_new);
			l[h] = l[h] * alpha + p;
#pragma unroll
			for (int c = 0; c < DPLV; c++) o[h][c] = o[h][c] * alpha + p * vv[c];
			m[h] = m_new;
		}
#pragma unroll
		for (int c = 0; c < DPL; c++) kv[c] = kn[c];
#pragma unroll
		for (int c = 0; c < DPLV; c++) vv[c] = vn[c];
	}
	} else {
	// A warp takes KU consecutive keys at a time (blocks of KU keys
	// DECODE_WARPS·KU apart): their K and V loads are all in flight
	// together, their KU scores per head reduce side by side, and the
	// running state is rescaled once per block rather than once per key.
	// Software-pipelined: the next block's loads are issued before this
	// block's scores. The host takes KU = 4 (2 at head dim 256) for a
	// batch, where one key at a time kept too little memory in flight (on
	// one H100: batch 16 read 573 → 764 GB/s at 4K keys, 571 → 798 at 32K;
	// batch 64 853 → 836 and 876 → 883).
	float kv[KU][DPL], vv[KU][DPLV];
	auto load_block = [&](int j0, float (&kd)[KU][DPL], float (&vd)[KU][DPLV]) {
#pragma unroll
		for (int u = 0; u < KU; u++) {
			if (j0 + u < hi) {
				const i64 row = kv_row(pages, page_off, page_size, j0 + u);
				decode_load<Tk, DPL>(kbase + row * k_stride, kd[u]);
				decode_load<Tk, DPLV>(vbase + row * v_stride, vd[u]);
			} else {
#pragma unroll
				for (int c = 0; c < DPL; c++) kd[u][c] = 0.f;
#pragma unroll
				for (int c = 0; c < DPLV; c++) vd[u][c] = 0.f;
			}
		}
	};
	if (lo + warp * KU < hi) load_block(lo + warp * KU, kv, vv);
	for (int j0 = lo + warp * KU; j0 < hi; j0 += DECODE_WARPS * KU) {
		float kn[KU][DPL], vn[KU][DPLV];
		if (j0 + DECODE_WARPS * KU < hi) load_block(j0 + DECODE_WARPS * KU, kn, vn);
#pragma unroll
		for (int h = 0; h < G; h++) {
			if (h >= group) break;
			float sc[KU];
#pragma unroll
			for (int u = 0; u < KU; u++) {
				float d = 0.f;
#pragma unroll
				for (int c = 0; c < DPL; c++) d += qv[h][c] * kv[u][c];
				sc[u] = d;
			}
#pragma unroll
			for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
				for (int u = 0; u < KU; u++) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], off);
			}
			float m_new = m[h];
#pragma unroll
			for (int u = 0; u < KU; u++) {
				if (softcap > 0.f) sc[u] = softcap * tanhf(sc[u] / softcap);
				if (j0 + u >= hi) sc[u] = NEG_INF;
				m_new = fmaxf(m_new, sc[u]);
			}
			const float alpha = expf(m[h] - m_new);
			float pu[KU], psum = 0.f;
#pragma unroll
			for (int u = 0; u < KU; u++) {
				pu[u] = sc[u] == NEG_INF ? 0.f : expf(sc[u] - m_new);
				psum += pu[u];
			}
			l[h] = l[h] * alpha + psum;
#pragma unroll
			for (int c = 0; c < DPLV; c++) {
				float acc = o[h][c] * alpha;
#pragma unroll
				for (int u = 0; u < KU; u++) acc += pu[u] * vv[u][c];
				o[h][c] = acc;
			}
			m[h] = m_new;
		}
#pragma unroll
		for (int u = 0; u < KU; u++) {
#pragma unroll
			for (int c = 0; c < DPL; c++) kv[u][c] = kn[u][c];
#pragma unroll
			for (int c = 0; c < DPLV; c++) vv[u][c] = vn[u][c];
		}
	}
	}
	// Merge the warps: [DECODE_WARPS][group][dv] values, then m and l.
	float* wo = decode_smem;
	float* wm = wo + DECODE_WARPS * group * dv;
	float* wl = wm + DECODE_WARPS * group;
#pragma unroll
	for (int h = 0; h < G; h++) {
		if (h >= group) break;
#pragma unroll
		for (int c = 0; c < DPLV; c++) wo[(warp * group + h) * dv + lane * DPLV + c] = o[h][c];
		if (lane == 0) wm[warp * group + h] = m[h], wl[warp * group + h] = l[h];
	}
	__syncthreads();
	decode_finish<float>(decode_smem, group, dv, tok, g, split, v_scale, out, out_stride, part_o, part_lse, n_heads,
	                     n_kv_heads, n_splits, n_tokens, counters);
}

#define ATTN_DECODE(sk, Tk, DPL, DPLV, G, KU)                                                                         \
	extern "C" __global__ void __launch_bounds__(32 * DECODE_WARPS) attn_decode_##sk##_##DPL##_##DPLV##_g##G##_k##KU( \
	    const float* q, i64 q_stride, const Tk* k_cache, const Tk* v_cache, i64 k_stride, i64 v_stride, float k_scale, \
	    float v_scale, float* out, i64 out_stride, float* part_o, float* part_lse, const int* req, const int* tok_req,  \
	    const int* tok_hi, const int* pages, int page_size, int n_heads, int n_kv_heads, float sm_scale, float softcap, \
	    int window, int n_splits, int chunk, int n_tokens, const float* k_new, const float* v_new, i64 kn_stride,       \
	    i64 vn_stride, const int* slots, float k_inv, float v_inv, int* counters) {                                    \
		attn_decode<Tk, DPL, DPLV, G, KU>(q, q_stride, k_cache, v_cache, k_stride, v_stride, k_scale, v_scale, out,          \
		                           out_stride, part_o, part_lse, req, tok_req, tok_hi, pages, page_size, n_heads,      \
		                           n_kv_heads, sm_scale, softcap, window, n_splits, chunk, n_tokens, k_new, v_new,     \
		                           kn_stride, vn_stride, slots, k_inv, v_inv, counters);                               \
	}
#define ATTN_DECODE_GROUPS(sk, Tk, DPL, KU) \
	ATTN_DECODE(sk, Tk, DPL, DPL, 1, KU)    \
	ATTN_DECODE(sk, Tk, DPL, DPL, 2, KU)    \
	ATTN_DECODE(sk, Tk, DPL, DPL, 4, KU)    \
	ATTN_DECODE(sk, Tk, DPL, DPL, 8, KU)
#define ATTN_DECODE_DIMS(sk, Tk)           \
	ATTN_DECODE(sk, Tk, 2, 2, 8, 1) \
	ATTN_DECODE(sk, Tk, 4, 4, 8, 1) \
	ATTN_DECODE(sk, Tk, 8, 8, 8, 1) \
	ATTN_DECODE_GROUPS(sk, Tk, 2, 4)      \
	ATTN_DECODE_GROUPS(sk, Tk, 4, 4)      \
	ATTN_DECODE_GROUPS(sk, Tk, 8, 2)
ATTN_DECODE_DIMS(f32, float)
ATTN_DECODE_DIMS(bf16, bf16_t)
ATTN_DECODE_DIMS(fp8, fp8_t)

// ---------------------------------------------------------------------------
// Tensor-core decode (attn_dtc): the decode kernel's contract (same
// arguments, outputs, fused KV store and in-kernel split merge) for a
// 16- or 8-bit KV cache on sm_80 and newer, with the queries and output in
// the activation dtype Ti and a power-of-two page size.
//
// The block of (token, KV head, split) computes S^T = K·Q^T on the tensor
// cores, keys as the 16 rows of m16n8k16 and the group's query heads as
// the 8·NH columns, so one K/V tile serves the whole GQA group; the
// probabilities become the B operand of O^T = V^T·P^T through movmatrix.
// Each warp walks its own 16-key tiles (tiles warp, warp+4, ...), staged
// into shared memory by cp.async STAGES deep (16-byte copies, rows of a
// page gathered through the page table), so many rows are in flight per
// SM without block-wide barriers; the warps' states merge at the end
// (decode_finish). Shared tiles are XOR-swizzled by 16-byte chunk
// (chunk c of row r at c ^ (r & 7)) so ldmatrix reads are conflict-free.
//
// Precision: the MMA dtype Tm is the cache's (bf16 for fp8). With float32
// queries (EXACT) q and the probabilities are each split into Tm hi + lo
// parts and multiplied twice, so scores and outputs carry about 16
// mantissa bits, as the float32 CUDA-core kernel's do; with 16-bit queries
// they are used as they are.
//
// Launch: grid (n_tokens, n_kv_heads, n_splits), block 32·DECODE_WARPS,
// shared max(dtc_smem, decode_finish's DECODE_WARPS·group·(D + 2)·4) bytes.
// group <= 8·NH; D in {64, 128, 256}.

#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ void ldsm_x4_t(u32* r, u32 addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
}
__device__ __forceinline__ u32 movm_t(u32 x) {
	u32 r;
	asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
	return r;
}
#else
__device__ __forceinline__ void ldsm_x4_t(u32*, u32) { __trap(); }
__device__ __forceinline__ u32 movm_t(u32) {
	__trap();
	return 0;
}
#endif

// fp8x4_to widens four e4m3 values (bytes of w, lowest first) to Tm, two
// per word, exactly. bf16: each byte's sign and exponent-mantissa bits are
// placed as a bf16 with exponent bias 127 instead of 7 and scaled by
// 2^120, which also turns the e4m3 subnormals (m·2^-9) into exact values.
// The e4m3 NaN (0x7f) becomes 480, not NaN: the pool never stores it.
// f16 has a conversion instruction (sm_89); older chips convert per value.
template <typename Tm> __device__ __forceinline__ void fp8x4_to(u32 w, u32& a, u32& b) {
#if __CUDA_ARCH__ >= 900
	if constexpr (same_t<Tm, bf16_t>::value) {
		const u32 two120 = 0x7b807b80u; // bf16x2 of 2^120
		u32 t0 = __byte_perm(w, 0, 0x4140), t1 = __byte_perm(w, 0, 0x4342);
		t0 = ((t0 & 0x00800080u) << 8) | ((t0 & 0x007f007fu) << 4);
		t1 = ((t1 & 0x00800080u) << 8) | ((t1 & 0x007f007fu) << 4);
		asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(a) : "r"(t0), "r"(two120));
		asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(b) : "r"(t1), "r"(two120));
		return;
	}
#endif
#if __CUDA_ARCH__ >= 890
	if constexpr (same_t<Tm, f16_t>::value) {
		asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h; }"
		    : "=r"(a), "=r"(b)
		    : "r"(w));
		return;
	}
#endif
	a = pack2(bits_of<Tm>(fp8_to_f32(w & 0xff)), bits_of<Tm>(fp8_to_f32((w >> 8) & 0xff)));
	b = pack2(bits_of<Tm>(fp8_to_f32((w >> 16) & 0xff)), bits_of<Tm>(fp8_to_f32(w >> 24)));
}

// Tm bits of v, and of the remainder v − Tm(v).
template <typename Tm> __device__ __forceinline__ void split_hi_lo(float v, u16& hi, u16& lo) {
	const Tm h = from_f32<Tm>(v);
	hi = h.bits;
	lo = from_f32<Tm>(v - to_f32(h)).bits;
}

template <typename Tk> struct dtc_cfg {
	static constexpr bool FP8 = same_t<Tk, fp8_t>::value;
	static constexpr int KB = FP8 ? 1 : 2; // stored bytes per value
};

// Shared bytes of the pipeline: per warp STAGES stages of a K and a V tile
// as stored, plus for fp8 one K and one V tile converted to bf16.
template <typename Tk, int D, int STAGES> __host__ __device__ constexpr int dtc_smem() {
	return DECODE_WARPS * (STAGES * 2 * DTC_KEYS * D * dtc_cfg<Tk>::KB + (dtc_cfg<Tk>::FP8 ? 2 * DTC_KEYS * D * 2 : 0));
}

// Byte offset of 16-byte chunk c of row r in a swizzled tile of D 16-bit values per row.
template <int D> __device__ __forceinline__ u32 swz(int r, int c) { return (u32)(r * D * 2 + ((c ^ (r & 7)) << 4)); }

template <typename Ti, typename Tk, typename Tm, int D, int NH, int STAGES, bool EXACT>
__device__ void attn_dtc(const Ti* q, i64 q_stride, const Tk* k_cache, const Tk* v_cache, i64 k_stride, i64 v_stride,
                         float k_scale, float v_scale, Ti* out, i64 out_stride, float* part_o, float* part_lse,
                         const int* req, const int* tok_req, const int* tok_hi, const int* pages, int page_size,
                         int n_heads, int n_kv_heads, float sm_scale, float softcap, int window, int n_splits, int chunk,
                         int n_tokens, const Ti* k_new, const Ti* v_new, i64 kn_stride, i64 vn_stride,
                         const int* slots, float k_inv, float v_inv, int* counters) {
	extern __shared__ __align__(128) unsigned char dtc_smem_raw[];
	constexpr bool FP8 = dtc_cfg<Tk>::FP8;
	constexpr int RB = D * dtc_cfg<Tk>::KB; // stored bytes of a row
	constexpr int CPR = RB / 16;             // 16-byte chunks of a stored row
	constexpr int TILE = DTC_KEYS * RB;      // stored bytes of a tile
	constexpr float L2E = 1.4426950408889634f;
	const int tok = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
	const int group = n_heads / n_kv_heads;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
	TokKeys tk = tok_keys(req, tok_req, tok_hi, tok, window);
	const int i = tk.i, page_off = tk.page_off;
	const int ps_shift = __ffs(page_size) - 1, ps_mask = page_size - 1;
	if (k_new != nullptr && (n_splits == 1 || i / chunk == split)) {
		const int slot = slots[tok];
		if (slot >= 0) {
			Tk* kc = const_cast<Tk*>(k_cache) + (i64)slot * k_stride + (i64)g * D;
			Tk* vc = const_cast<Tk*>(v_cache) + (i64)slot * v_stride + (i64)g * D;
			for (int d = threadIdx.x; d < D; d += blockDim.x) {
				kc[d] = from_f32<Tk>(to_f32(k_new[(i64)tok * kn_stride + (i64)g * D + d]) * k_inv);
				vc[d] = from_f32<Tk>(to_f32(v_new[(i64)tok * vn_stride + (i64)g * D + d]) * v_inv);
			}
		}
		__syncthreads(); // the block's own stores are visible to its copies below
	}
	tk.narrow(n_splits, split, chunk);
	const int lo = tk.lo, hi = tk.hi;

	// B fragments of Q^T (k = dims, n = heads): b0 = Q[h][16kk + 2tig, +1],
	// b1 = Q[h][16kk + 8 + 2tig, +1], h = 8nh + gid; scaled so that a score
	// is its dot product.
	const float qscale = sm_scale * k_scale;
	u32 qh[NH][D / 16][2], ql[NH][D / 16][2];
#pragma unroll
	for (int nh = 0; nh < NH; nh++) {
		const int h = nh * 8 + gid;
		const Ti* qr = q + (i64)tok * q_stride + (i64)(g * group + min(h, group - 1)) * D;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
			for (int b = 0; b < 2; b++) {
				const int d = 16 * kk + 8 * b + 2 * tig;
				const float v0 = h < group ? to_f32(qr[d]) * qscale : 0.f;
				const float v1 = h < group ? to_f32(qr[d + 1]) * qscale : 0.f;
				u16 h0, l0, h1, l1;
				split_hi_lo<Tm>(v0, h0, l0);
				split_hi_lo<Tm>(v1, h1, l1);
				qh[nh][kk][b] = pack2(h0, h1);
				ql[nh][kk][b] = pack2(l0, l1);
			}
		}
	}

	float o[NH][D / 16][4];
	float m[NH][2], l[NH][2];
#pragma unroll
	for (int nh = 0; nh < NH; nh++) {
		m[nh][0] = m[nh][1] = NEG_INF;
		l[nh][0] = l[nh][1] = 0.f;
#pragma unroll
		for (int dt = 0; dt < D / 16; dt++) o[nh][dt][0] = o[nh][dt][1] = o[nh][dt][2] = o[nh][dt][3] = 0.f;
	}

	unsigned char* wsm = dtc_smem_raw + warp * (dtc_smem<Tk, D, STAGES>() / DECODE_WARPS);
	const u32 wsm_a = smem_u32(wsm);
	const u32 conv_a = wsm_a + STAGES * 2 * TILE; // fp8: the converted K tile, then V
	const int base = lo & ~(DTC_KEYS - 1);
	const int n_tiles = hi > lo ? (hi - base + DTC_KEYS - 1) / DTC_KEYS : 0;
	const int my_tiles = n_tiles > warp ? (n_tiles - warp + DECODE_WARPS - 1) / DECODE_WARPS : 0;
	const char* kg = (const char*)(k_cache + (i64)g * D);
	const char* vg = (const char*)(v_cache + (i64)g * D);

	// Issue the copies of the warp's t-th tile into stage s.
	auto load_tile = [&](int t, int s) {
		const int kb = base + (warp + t * DECODE_WARPS) * DTC_KEYS;
		const int j = kb + (lane & 15);
		const int slot = j >= lo && j < hi ? (pages[page_off + (j >> ps_shift)] << ps_shift) | (j & ps_mask) : -1;
		const u32 ks = wsm_a + s * 2 * TILE, vs = ks + TILE;
#pragma unroll
		for (int x = 0; x < CPR / 2; x++) {
			const int c = lane + 32 * x, r = c / CPR, cc = c % CPR;
			const int rs = __shfl_sync(FULL_MASK, slot, r);
			const u32 off = FP8 ? (u32)(r * RB + cc * 16) : swz<D>(r, cc);
			const i64 rowk = (i64)max(rs, 0) * k_stride * dtc_cfg<Tk>::KB, rowv = (i64)max(rs, 0) * v_stride * dtc_cfg<Tk>::KB;
			cp_async16(ks + off, kg + rowk + cc * 16, rs >= 0);
			cp_async16(vs + off, vg + rowv + cc * 16, rs >= 0);
		}
	};

#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < my_tiles) load_tile(s, s);
		cp_async_commit();
	}
	for (int t = 0; t < my_tiles; t++) {
		if (t + STAGES - 1 < my_tiles) load_tile(t + STAGES - 1, (t + STAGES - 1) % STAGES);
		cp_async_commit();
		cp_async_wait<STAGES - 1>();
		__syncwarp();
		u32 ka = wsm_a + (t % STAGES) * 2 * TILE, va = ka + TILE;
		if constexpr (FP8) {
			// Widen the stage to bf16 (exact: e4m3 values are bf16 values),
			// into the swizzled layout the ldmatrix reads expect.
			const unsigned char* raw = wsm + (t % STAGES) * 2 * TILE;
			unsigned char* conv = wsm + STAGES * 2 * TILE;
#pragma unroll
			for (int x = 0; x < 2 * DTC_KEYS * D / 8 / 32; x++) {
				const int c = lane + 32 * x; // chunk of 8 values over the K then the V tile
				const int kv = c / (DTC_KEYS * D / 8), cr = c % (DTC_KEYS * D / 8);
				const int r = cr / (D / 8), cc = cr % (D / 8);
				const u32x2 w = *(const u32x2*)(raw + kv * TILE + r * RB + cc * 8);
				u32x4 e;
				fp8x4_to<Tm>(w.x, e.x, e.y);
				fp8x4_to<Tm>(w.y, e.z, e.w);
				*(u32x4*)(conv + kv * DTC_KEYS * D * 2 + swz<D>(r, cc)) = e;
			}
			__syncwarp();
			ka = conv_a, va = conv_a + DTC_KEYS * D * 2;
		}

		// S^T = K·Q^T: 16 keys × 8·NH heads, in independent accumulators
		// (even and odd k steps, hi and lo parts) summed at the end, so
		// the MMAs do not wait on each other.
		constexpr int NA = EXACT ? 4 : 2;
		float sa[NA][NH][4];
#pragma unroll
		for (int x = 0; x < NA; x++)
#pragma unroll
			for (int nh = 0; nh < NH; nh++) sa[x][nh][0] = sa[x][nh][1] = sa[x][nh][2] = sa[x][nh][3] = 0.f;
		const int ar = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			u32 a[4];
			ldsm_x4(a, ka + swz<D>(ar, 2 * kk + (lane >> 4)));
#pragma unroll
			for (int nh = 0; nh < NH; nh++) {
				mma16816<Tm>(sa[kk & 1][nh], a, qh[nh][kk]);
				if constexpr (EXACT) mma16816<Tm>(sa[2 + (kk & 1)][nh], a, ql[nh][kk]);
			}
		}
		float s[NH][4];
#pragma unroll
		for (int nh = 0; nh < NH; nh++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float v = sa[0][nh][e] + sa[1][nh][e];
				if constexpr (EXACT) v += sa[2][nh][e] + sa[3][nh][e];
				s[nh][e] = v;
			}

		// Online softmax per head (column): rows gid and gid+8 are keys
		// kb + gid and kb + gid + 8; the column's other keys are in the
		// lanes of the same tig.
		const int kb = base + (warp + t * DECODE_WARPS) * DTC_KEYS;
		const bool ok0 = kb + gid >= lo && kb + gid < hi, ok1 = kb + gid + 8 >= lo && kb + gid + 8 < hi;
		u32 pbh[NH][2], pbl[NH][2];
#pragma unroll
		for (int nh = 0; nh < NH; nh++) {
			float p[4];
#pragma unroll
			for (int c = 0; c < 2; c++) {
				float x0 = s[nh][c], x1 = s[nh][2 + c];
				if (softcap > 0.f) {
					x0 = softcap * tanhf(x0 / softcap);
					x1 = softcap * tanhf(x1 / softcap);
				}
				x0 = ok0 ? x0 : NEG_INF;
				x1 = ok1 ? x1 : NEG_INF;
				float mx = fmaxf(x0, x1);
				mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 4));
				mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 8));
				mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 16));
				const float m_new = fmaxf(m[nh][c], mx);
				const float mu = m_new == NEG_INF ? 0.f : m_new * L2E;
				const float alpha = exp2f(m[nh][c] * L2E - mu);
				p[c] = exp2f(x0 * L2E - mu);
				p[2 + c] = exp2f(x1 * L2E - mu);
				l[nh][c] = l[nh][c] * alpha + p[c] + p[2 + c];
				m[nh][c] = m_new;
#pragma unroll
				for (int dt = 0; dt < D / 16; dt++) {
					o[nh][dt][c] *= alpha;
					o[nh][dt][2 + c] *= alpha;
				}
			}
			// P^T as the B operand: transpose the two 8×8 halves (keys
			// 0-7 and 8-15) of the accumulator layout.
			u16 h[4], lw[4];
#pragma unroll
			for (int e = 0; e < 4; e++) split_hi_lo<Tm>(p[e], h[e], lw[e]);
			pbh[nh][0] = movm_t(pack2(h[0], h[1]));
			pbh[nh][1] = movm_t(pack2(h[2], h[3]));
			if constexpr (EXACT) {
				pbl[nh][0] = movm_t(pack2(lw[0], lw[1]));
				pbl[nh][1] = movm_t(pack2(lw[2], lw[3]));
			}
		}

		// O^T += V^T·P^T, 16 dims at a time.
		const int mi = lane >> 3;
		const int vr = (lane & 7) + (mi >> 1) * 8;
#pragma unroll
		for (int dt = 0; dt < D / 16; dt++) {
			u32 a[4];
			ldsm_x4_t(a, va + swz<D>(vr, 2 * dt + (mi & 1)));
#pragma unroll
			for (int nh = 0; nh < NH; nh++) {
				mma16816<Tm>(o[nh][dt], a, pbh[nh]);
				if constexpr (EXACT) mma16816<Tm>(o[nh][dt], a, pbl[nh]);
			}
		}
		__syncwarp(); // the stage is read before it is refilled
	}
	cp_async_wait<0>();

	// The column sums: each lane holds its own keys' part.
#pragma unroll
	for (int nh = 0; nh < NH; nh++) {
#pragma unroll
		for (int c = 0; c < 2; c++) {
			l[nh][c] += __shfl_xor_sync(FULL_MASK, l[nh][c], 4);
			l[nh][c] += __shfl_xor_sync(FULL_MASK, l[nh][c], 8);
			l[nh][c] += __shfl_xor_sync(FULL_MASK, l[nh][c], 16);
		}
	}
	__syncthreads(); // every warp is done with its stages: reuse them
	float* wo = (float*)dtc_smem_raw;
	float* wm = wo + DECODE_WARPS * group * D;
	float* wl = wm + DECODE_WARPS * group;
#pragma unroll
	for (int nh = 0; nh < NH; nh++) {
#pragma unroll
		for (int c = 0; c < 2; c++) {
			const int h = nh * 8 + 2 * tig + c;
			if (h >= group) continue;
#pragma unroll
			for (int dt = 0; dt < D / 16; dt++) {
				wo[(warp * group + h) * D + dt * 16 + gid] = o[nh][dt][c];
				wo[(warp * group + h) * D + dt * 16 + gid + 8] = o[nh][dt][2 + c];
			}
			if (gid == 0) wm[warp * group + h] = m[nh][c], wl[warp * group + h] = l[nh][c];
		}
	}
	__syncthreads();
	decode_finish<Ti>((float*)dtc_smem_raw, group, D, tok, g, split, v_scale, out, out_stride, part_o, part_lse, n_heads,
	                  n_kv_heads, n_splits, n_tokens, counters);
}

#define ATTN_DTC(si, sk, Ti, Tk, Tm, D, NH, ST, EX)                                                                  \
	extern "C" __global__ void __launch_bounds__(32 * DECODE_WARPS) attn_dtc_##si##_##sk##_d##D##_h##NH(              \
	    const Ti* q, i64 q_stride, const Tk* k_cache, const Tk* v_cache, i64 k_stride, i64 v_stride, float k_scale,    \
	    float v_scale, Ti* out, i64 out_stride, float* part_o, float* part_lse, const int* req, const int* tok_req,     \
	    const int* tok_hi, const int* pages, int page_size, int n_heads, int n_kv_heads, float sm_scale, float softcap, \
	    int window, int n_splits, int chunk, int n_tokens, const Ti* k_new, const Ti* v_new, i64 kn_stride,             \
	    i64 vn_stride, const int* slots, float k_inv, float v_inv, int* counters) {                                    \
		attn_dtc<Ti, Tk, Tm, D, NH, ST, EX>(q, q_stride, k_cache, v_cache, k_stride, v_stride, k_scale, v_scale, out,    \
		                                    out_stride, part_o, part_lse, req, tok_req, tok_hi, pages, page_size,        \
		                                    n_heads, n_kv_heads, sm_scale, softcap, window, n_splits, chunk, n_tokens,    \
		                                    k_new, v_new, kn_stride, vn_stride, slots, k_inv, v_inv, counters);           \
	}
// Stages: three 16-bit tiles of up to 128 dims, two of 256; fp8 tiles are
// half the bytes and take one more stage.
#define ATTN_DTC_DIMS(si, sk, Ti, Tk, Tm, EX, ST, ST256) \
	ATTN_DTC(si, sk, Ti, Tk, Tm, 64, 1, ST, EX)         \
	ATTN_DTC(si, sk, Ti, Tk, Tm, 64, 2, ST, EX)         \
	ATTN_DTC(si, sk, Ti, Tk, Tm, 128, 1, ST, EX)        \
	ATTN_DTC(si, sk, Ti, Tk, Tm, 128, 2, ST, EX)        \
	ATTN_DTC(si, sk, Ti, Tk, Tm, 256, 1, ST256, EX)
ATTN_DTC_DIMS(f32, bf16, float, bf16_t, bf16_t, true, DTC_STAGES, DTC_STAGES_256)
ATTN_DTC_DIMS(f32, fp8, float, fp8_t, bf16_t, true, DTC_STAGES_FP8, DTC_STAGES_256)
ATTN_DTC_DIMS(bf16, bf16, bf16_t, bf16_t, bf16_t, false, DTC_STAGES, DTC_STAGES_256)
ATTN_DTC_DIMS(bf16, fp8, bf16_t, fp8_t, bf16_t, false, DTC_STAGES_FP8, DTC_STAGES_256)
ATTN_DTC_DIMS(f16, fp8, f16_t, fp8_t, f16_t, false, DTC_STAGES_FP8, DTC_STAGES_256)

// ---------------------------------------------------------------------------
// MLA decode (attn_mla): one new token per request over DeepSeek's latent
// cache, one KV head of MLA_DK = 576 values per key (kv_lora_rank 512 and
// 64 rope dims) whose first MLA_DV = 512 are the value, for bf16 queries
// over a bf16 cache on the tensor cores (sm_80 and newer).
//
// A block owns 16·MT query heads of one token and one split of its keys,
// streamed in tiles of MLA_BN keys through MLA_STAGES(MT) shared buffers
// (cp.async; thread t copies 9 chunks of key t / 8, gathered through the
// page table). Per tile: S = Q·Kᵀ on m16n8k16 (heads as rows, keys as
// columns) cut into MT·MLA_BN/8 items of one m tile × 8 keys, spread over
// the 8 warps; the items' row maxima meet in shared memory, and their
// weights go to a shared P tile; then O += P·V, each warp owning 64 of the
// 512 value columns, V read transposed out of the same K tile. One read
// of a key serves every head of the block, and the value costs no read of
// its own. Q, K and V tiles are XOR-swizzled per 16-byte chunk (chunk c of
// row r at c ^ (r & 7); 72 chunks a row) for conflict-free ldmatrix; P
// rows are padded to 80 bytes for the same reason.
//
// Launch: grid (ceil(n_heads / (16·MT)), n_tokens, n_splits), block 256,
// shared mla_smem(MT) bytes. Output as attn_decode's: out when n_splits is
// 1 and part_o is null, else the split's partials and log-sum-exps. The
// KV store and the in-kernel merge of the other decode kernels are not
// done here (k_new and counters are ignored: the host passes none).

template <int MT> __host__ __device__ constexpr int mla_smem() {
	return 16 * MT * MLA_ROW + MLA_STAGES(MT) * MLA_BN * MLA_ROW + 16 * MT * MLA_PROW + (MLA_BN / 8) * 16 * MT * 4;
}
// ld_pinned loads where it stands in the program (asm volatile keeps it
// ahead of the tile's copies and MMAs), so a value read a tile early is not
// moved down to its use and waited on there.
__device__ __forceinline__ int ld_pinned(const int* p) {
	int v;
	asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(p));
	return v;
}
__device__ __forceinline__ u32 mla_swz(int r, int c) { return (u32)(r * MLA_ROW + ((c ^ (r & 7)) << 4)); }

template <int MT>
__device__ void attn_mla(const bf16_t* q, i64 q_stride, const bf16_t* k_cache, i64 k_stride, float k_scale, float v_scale,
                         bf16_t* out, i64 out_stride, float* part_o, float* part_lse, const int* req, const int* tok_req,
                         const int* tok_hi, const int* pages, int page_size, int n_heads, float sm_scale, int window,
                         int n_splits, int chunk, int n_tokens) {
	extern __shared__ __align__(128) unsigned char mla_smem_raw[];
	constexpr int HT = 16 * MT, ST = MLA_STAGES(MT), TILE = MLA_BN * MLA_ROW;
	constexpr int NT = MLA_BN / 8, NI = MT * NT, IPW = (NI + MLA_WARPS - 1) / MLA_WARPS;
	static_assert(NT % IPW == 0, "a warp's items share one m tile");
	constexpr float L2E = 1.4426950408889634f;
	const int h0 = blockIdx.x * HT, tok = blockIdx.y, split = blockIdx.z;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
	TokKeys tk = tok_keys(req, tok_req, tok_hi, tok, window);
	tk.narrow(n_splits, split, chunk);
	const int page_off = tk.page_off, lo = tk.lo, hi = tk.hi;
	const int ps_shift = __ffs(page_size) - 1, ps_mask = page_size - 1;
	const u32 sq = smem_u32(mla_smem_raw), sk0 = sq + HT * MLA_ROW, sp = sk0 + ST * TILE;
	float* wred = (float*)(mla_smem_raw + HT * MLA_ROW + ST * TILE + HT * MLA_PROW); // [NT][HT]

	for (int c = tid; c < HT * (MLA_DK / 8); c += 32 * MLA_WARPS) {
		const int r = c / (MLA_DK / 8), cc = c % (MLA_DK / 8);
		const bool ok = h0 + r < n_heads;
		cp_async16(sq + mla_swz(r, cc), q + (i64)tok * q_stride + (i64)(ok ? h0 + r : 0) * MLA_DK + cc * 8, ok);
	}
	cp_async_commit();
	const int base = lo & ~(MLA_BN - 1);
	const int n_tiles = hi > lo ? (hi - base + MLA_BN - 1) / MLA_BN : 0;
	const int crow = tid >> 3, cpart = tid & 7;
	// This thread's key of tile t: its page (-1 outside [lo, hi)), read a
	// tile before the copies that use it are issued, so that they never
	// wait on the page table.
	auto page_of = [&](int t) {
		const int j = base + t * MLA_BN + crow;
		return t < n_tiles && j >= lo && j < hi ? ld_pinned(pages + page_off + (j >> ps_shift)) : -1;
	};
	auto load_tile = [&](int t, int page) {
		const int slot = page < 0 ? -1 : (page << ps_shift) | ((base + t * MLA_BN + crow) & ps_mask);
		const char* src = (const char*)k_cache + (i64)max(slot, 0) * k_stride * 2;
		const u32 dst = sk0 + (t % ST) * TILE;
#pragma unroll
		for (int x = 0; x < MLA_DK / 64; x++) {
			const int cc = cpart + 8 * x;
			cp_async16(dst + mla_swz(crow, cc), src + cc * 16, slot >= 0);
		}
	};
#pragma unroll
	for (int s = 0; s < ST - 1; s++) {
		if (s < n_tiles) load_tile(s, page_of(s));
		cp_async_commit();
	}
	int npage = page_of(ST - 1);

	const float f = sm_scale * k_scale * L2E; // scores in base 2
	float m[MT][2], l[IPW][2], o[MT][8][4];
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
		m[mt][0] = m[mt][1] = NEG_INF;
#pragma unroll
		for (int n = 0; n < 8; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
	}
#pragma unroll
	for (int k = 0; k < IPW; k++) l[k][0] = l[k][1] = 0.f;
	const int arow = (lane & 7) + ((lane >> 3) & 1) * 8; // ldmatrix row of a 16-row operand

	for (int t = 0; t < n_tiles; t++) {
		cp_async_wait<ST - 2>();
		__syncthreads(); // tile t landed; every warp is done with tile t-1 and its stage
		if (t + ST - 1 < n_tiles) load_tile(t + ST - 1, npage);
		cp_async_commit();
		npage = page_of(t + ST);
		const u32 kt = sk0 + (t % ST) * TILE;
		const int kb = base + t * MLA_BN;

		// S items: item it is m tile it / NT, keys (it % NT)·8 .. +7; warp w
		// owns items w·IPW .. +IPW-1, of one m tile (NT % IPW == 0), so
		// each Q fragment read feeds every item of the warp. s[k][e] is row
		// mt·16 + gid + 8·(e / 2), key 2·tig + e % 2 of item k.
		const int it0 = warp * IPW, smt = it0 / NT;
		float s[IPW][4];
		if (it0 < NI) {
			float a0[IPW][4], a1[IPW][4];
#pragma unroll
			for (int k = 0; k < IPW; k++)
#pragma unroll
				for (int e = 0; e < 4; e++) a0[k][e] = a1[k][e] = 0.f;
#pragma unroll 3
			for (int kp = 0; kp < MLA_DK / 32; kp++) {
				u32 qa[4], qb[4];
				ldsm_x4(qa, sq + mla_swz(smt * 16 + arow, 4 * kp + (lane >> 4)));
				ldsm_x4(qb, sq + mla_swz(smt * 16 + arow, 4 * kp + 2 + (lane >> 4)));
#pragma unroll
				for (int k = 0; k < IPW; k++) {
					u32 b[4];
					ldsm_x4(b, kt + mla_swz(((it0 + k) % NT) * 8 + (lane & 7), 4 * kp + (lane >> 3)));
					mma16816<bf16_t>(a0[k], qa, b);
					mma16816<bf16_t>(a1[k], qb, b + 2);
				}
			}
#pragma unroll
			for (int k = 0; k < IPW; k++) {
				const int nt = (it0 + k) % NT;
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int j = kb + nt * 8 + 2 * tig + (e & 1);
					s[k][e] = j >= lo && j < hi ? (a0[k][e] + a1[k][e]) * f : NEG_INF;
				}
#pragma unroll
				for (int x = 0; x < 2; x++) {
					float mx = fmaxf(s[k][2 * x], s[k][2 * x + 1]);
					mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
					mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
					if (tig == 0) wred[nt * HT + smt * 16 + gid + 8 * x] = mx;
				}
			}
		}
		__syncthreads(); // the tile's row maxima are in
		float alpha[MT][2];
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
#pragma unroll
			for (int x = 0; x < 2; x++) {
				const int r = mt * 16 + gid + 8 * x;
				float mn = m[mt][x];
#pragma unroll
				for (int nt = 0; nt < NT; nt++) mn = fmaxf(mn, wred[nt * HT + r]);
				alpha[mt][x] = mn == NEG_INF ? 1.f : ex2(m[mt][x] - mn);
				m[mt][x] = mn;
			}
		}
		// The items' m tile's maxima and rescales (selected, not indexed:
		// the arrays stay in registers).
		float ms[2] = {m[0][0], m[0][1]}, as[2] = {alpha[0][0], alpha[0][1]};
#pragma unroll
		for (int mt = 1; mt < MT; mt++)
			if (mt == smt) ms[0] = m[mt][0], ms[1] = m[mt][1], as[0] = alpha[mt][0], as[1] = alpha[mt][1];
#pragma unroll
		for (int k = 0; k < IPW; k++) {
			if (it0 >= NI) break;
			const int nt = (it0 + k) % NT;
#pragma unroll
			for (int x = 0; x < 2; x++) {
				const float mu = ms[x] == NEG_INF ? 0.f : ms[x];
				const float p0 = ex2(s[k][2 * x] - mu), p1 = ex2(s[k][2 * x + 1] - mu);
				l[k][x] = l[k][x] * as[x] + p0 + p1;
				const u32 pr = sp + (smt * 16 + gid + 8 * x) * MLA_PROW + (nt * 8 + 2 * tig) * 2;
				asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(pr), "r"(pack_f2<bf16_t>(p0, p1)) : "memory");
			}
		}
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int n = 0; n < 8; n++) {
				o[mt][n][0] *= alpha[mt][0], o[mt][n][1] *= alpha[mt][0];
				o[mt][n][2] *= alpha[mt][1], o[mt][n][3] *= alpha[mt][1];
			}
		__syncthreads(); // P is complete

		// O += P·V over the warp's value columns warp·64 .. +63.
#pragma unroll
		for (int kk = 0; kk < MLA_BN / 16; kk++) {
			u32 pa[MT][4];
#pragma unroll
			for (int mt = 0; mt < MT; mt++) ldsm_x4(pa[mt], sp + (mt * 16 + arow) * MLA_PROW + (2 * kk + (lane >> 4)) * 16);
#pragma unroll
			for (int np = 0; np < 4; np++) {
				u32 b[4];
				ldsm_x4_t(b, kt + mla_swz(16 * kk + arow, warp * 8 + 2 * np + (lane >> 4)));
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					mma16816<bf16_t>(o[mt][2 * np], pa[mt], b);
					mma16816<bf16_t>(o[mt][2 * np + 1], pa[mt], b + 2);
				}
			}
		}
	}
	cp_async_wait<0>();

	// Row sums: the items' parts meet in wred.
	__syncthreads();
#pragma unroll
	for (int k = 0; k < IPW; k++) {
		if (warp * IPW >= NI) break;
		const int mt = warp * IPW / NT, nt = (warp * IPW + k) % NT;
#pragma unroll
		for (int x = 0; x < 2; x++) {
			float lx = l[k][x];
			lx += __shfl_xor_sync(FULL_MASK, lx, 1);
			lx += __shfl_xor_sync(FULL_MASK, lx, 2);
			if (tig == 0) wred[nt * HT + mt * 16 + gid + 8 * x] = lx;
		}
	}
	__syncthreads();
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
#pragma unroll
		for (int x = 0; x < 2; x++) {
			const int r = mt * 16 + gid + 8 * x, head = h0 + r;
			if (head >= n_heads) continue;
			float L = 0.f;
#pragma unroll
			for (int nt = 0; nt < NT; nt++) L += wred[nt * HT + r];
			const float inv = L > 0.f ? v_scale / L : 0.f;
#pragma unroll
			for (int n = 0; n < 8; n++) {
				const int col = warp * 64 + n * 8 + 2 * tig;
				const float v0 = o[mt][n][2 * x] * inv, v1 = o[mt][n][2 * x + 1] * inv;
				if (part_o != nullptr) {
					float* po = part_o + (((i64)split * n_tokens + tok) * n_heads + head) * MLA_DV + col;
					po[0] = v0, po[1] = v1;
				} else {
					*(u32*)(out + (i64)tok * out_stride + (i64)head * MLA_DV + col) = pack_f2<bf16_t>(v0, v1);
				}
			}
			if (part_o != nullptr && warp == 0 && tig == 0)
				part_lse[((i64)split * n_tokens + tok) * n_heads + head] = L > 0.f ? (m[mt][x] + log2f(L)) / L2E : NEG_INF;
		}
	}
}

#define ATTN_MLA(MT)                                                                                                  \
	extern "C" __global__ void __launch_bounds__(32 * MLA_WARPS, 1) attn_mla_bf16_h##MT(                             \
	    const bf16_t* q, i64 q_stride, const bf16_t* k_cache, const bf16_t* v_cache, i64 k_stride, i64 v_stride,       \
	    float k_scale, float v_scale, bf16_t* out, i64 out_stride, float* part_o, float* part_lse, const int* req,      \
	    const int* tok_req, const int* tok_hi, const int* pages, int page_size, int n_heads, int n_kv_heads,           \
	    float sm_scale, float softcap, int window, int n_splits, int chunk, int n_tokens, const bf16_t* k_new,          \
	    const bf16_t* v_new, i64 kn_stride, i64 vn_stride, const int* slots, float k_inv, float v_inv, int* counters) { \
		attn_mla<MT>(q, q_stride, k_cache, k_stride, k_scale, v_scale, out, out_stride, part_o, part_lse, req, tok_req,  \
		             tok_hi, pages, page_size, n_heads, sm_scale, window, n_splits, chunk, n_tokens);                    \
	}
ATTN_MLA(1)
ATTN_MLA(2)
ATTN_MLA(4)

// ---------------------------------------------------------------------------
// Tensor-core prefill/extend (attn_fa2): FlashAttention-2's design for 16-bit
// activations over a 16-bit KV cache of the same dtype, head dims 64 and 128
// (dk == dv), a power-of-two page size and no custom mask; attn_mma serves
// the rest. Rows are packed as in attn_mma (row r: new token r / group,
// query head kv_head·group + r % group), so a GQA group shares every K/V
// tile.
//
// A block owns FA_BM = 128 rows and one KV head; each of its 4 warps owns
// 32 rows (two m16 tiles), so every K and V fragment read from shared
// memory feeds two MMAs. Q is staged once; K and V tiles of FA_KEYS(D) keys are
// gathered through the page table by cp.async into a double buffer (the
// next tile's copies overlap this tile's MMAs). Tiles are XOR-swizzled per
// 16-byte chunk for conflict-free ldmatrix; V is read transposed
// (ldmatrix.trans) as the B operand of P·V, and P stays in registers (the
// accumulator layout of S is the A layout of P). Softmax in base 2 with
// the scale folded in; tiles past the block's last visible key are never
// loaded (causal skipping), and keys are masked per element by the same
// rule as attn_mma.
//
// Launch: grid (tiles·n_splits, n_reqs, n_kv_heads), tiles = ceil(max
// extend·group / FA_BM); block 128; shared (FA_BM + 4·FA_KEYS(D))·D·2 bytes,
// FA_KEYS(D) the kernel's key tile (below).

// Shared by attn_fa2 and attn_fa3, whose rows pack a GQA group: row gr of
// an extend is token gr / group, query head kv_head·group + gr % group.
//
// ExtTile is where an attn_fa2 or attn_fa3 block starts: its split, its
// request's fields and its first packed row. The last row tiles see the
// most keys under a causal mask: they go first, so that the short ones
// fill the tail of the grid.
struct ExtTile {
	int split, prefix, ext_start, page_off, group, rows, row0;
};
__device__ __forceinline__ ExtTile ext_tile(const int* req, int n_heads, int n_kv_heads, int n_splits, int bm) {
	ExtTile e;
	e.split = blockIdx.x % n_splits;
	const int tile = gridDim.x / n_splits - 1 - blockIdx.x / n_splits;
	const int* R = req + blockIdx.y * REQ_FIELDS;
	e.prefix = R[REQ_PREFIX], e.ext_start = R[REQ_EXT_START], e.page_off = R[REQ_PAGE_OFF];
	e.group = n_heads / n_kv_heads;
	e.rows = R[REQ_EXT_LEN] * e.group;
	e.row0 = tile * bm;
	return e;
}
//
// ext_store2 writes output columns col and col+1 of (tok, head): to the
// split's float32 partials when the keys are split, else to out.
template <typename Ti>
__device__ __forceinline__ void ext_store2(Ti* out, i64 out_stride, float* part_o, int split, int n_tokens, int n_heads, int d, int tok,
                                           int head, int col, float v0, float v1) {
	if (part_o != nullptr) {
		float* po = part_o + (((i64)split * n_tokens + tok) * n_heads + head) * d + col;
		po[0] = v0;
		po[1] = v1;
	} else {
		*(u32*)(out + (i64)tok * out_stride + (i64)head * d + col) = pack2(bits_of<Ti>(v0), bits_of<Ti>(v1));
	}
}
//
// ext_q_row is that row's query (rows past the extend read token 0, their
// copies zero-filled by the caller).
template <typename Ti>
__device__ __forceinline__ const Ti* ext_q_row(const Ti* q, i64 q_stride, int ext_start, int group, int g, int d, int gr, bool ok) {
	return q + (i64)(ext_start + (ok ? gr / group : 0)) * q_stride + (i64)(g * group + (ok ? gr % group : 0)) * d;
}
// ext_row_keys is the key range [x, y) row gr sees: its window and causal
// limit, cut to the split's chunk; empty past the extend.
__device__ __forceinline__ int2 ext_row_keys(const int* tok_hi, int ext_start, int prefix, int group, int gr, bool ok, int window,
                                             int n_splits, int split, int chunk) {
	const int t = ok ? gr / group : 0;
	int rl = window > 0 ? max(0, prefix + t + 1 - window) : 0;
	int rh = ok ? tok_hi[ext_start + t] : 0;
	if (n_splits > 1) {
		rl = max(rl, split * chunk);
		rh = min(rh, (split + 1) * chunk);
	}
	return make_int2(rl, rh);
}
// ext_block_keys is a block's key range, from the window start of its first
// token t_first to hi (the largest causal limit of its tokens), cut to the
// split's chunk, its start rounded down to a multiple of bn.
__device__ __forceinline__ int2 ext_block_keys(int prefix, int t_first, int hi, int window, int n_splits, int split, int chunk, int bn) {
	int lo = window > 0 ? max(0, prefix + t_first + 1 - window) : 0;
	if (n_splits > 1) {
		lo = max(lo, split * chunk);
		hi = min(hi, (split + 1) * chunk);
	}
	return make_int2(lo & ~(bn - 1), hi);
}

template <typename Ti, int D, int BN>
__device__ void attn_fa2(ATTN_PARAMS(Ti, Ti)) {
	extern __shared__ __align__(128) unsigned char fa_smem[];
	__shared__ int fa_hi;
	constexpr float L2E = 1.4426950408889634f;
	constexpr int CPR = D / 8; // 16-byte chunks per row
	constexpr int ROWB = D * 2;
	const ExtTile et = ext_tile(req, n_heads, n_kv_heads, n_splits, FA_BM);
	const int split = et.split, prefix = et.prefix, ext_start = et.ext_start, page_off = et.page_off;
	const int group = et.group, rows = et.rows, row0 = et.row0;
	if (row0 >= rows) return;
	const int g = blockIdx.z;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
	const int ps_shift = __ffs(page_size) - 1, ps_mask = page_size - 1;
	const u32 qs = smem_u32(fa_smem);
	const u32 ks0 = qs + FA_BM * ROWB;           // K tiles [2][BN][D]
	const u32 vs0 = ks0 + 2 * BN * ROWB;      // V tiles [2][BN][D]

	// The block's key range: up to the largest tok_hi of its tokens, from
	// the window start of its first token.
	const int t_first = row0 / group, t_last = (min(rows, row0 + FA_BM) - 1) / group;
	if (tid == 0) fa_hi = 0;
	__syncthreads();
	for (int t = t_first + tid; t <= t_last; t += blockDim.x) atomicMax(&fa_hi, tok_hi[ext_start + t]);

	// Q tile: chunk c of row r from token (row0+r)/group, head g·group + (row0+r)%group.
	for (int c = tid; c < FA_BM * CPR; c += blockDim.x) {
		const int r = c / CPR, cc = c % CPR, gr = row0 + r;
		const bool ok = gr < rows;
		cp_async16(qs + swz<D>(r, cc), ext_q_row(q, q_stride, ext_start, group, g, D, gr, ok) + cc * 8, ok);
	}
	cp_async_commit();

	// Each row's visible keys [row_lo, row_hi), in shared memory (read only
	// on tiles that need a per-key test: registers are the scarce part).
	// This thread's rows are warp·32 + mt·16 + gid + 8x.
	__shared__ int row_lo[FA_BM], row_hi[FA_BM];
	int w_lo = 0, w_hi = 0x7fffffff; // the warp's tiles inside [w_lo, w_hi) need no test
	{
		const int r = tid; // FA_BM == blockDim.x
		const bool ok = row0 + r < rows;
		const int2 k = ext_row_keys(tok_hi, ext_start, prefix, group, row0 + r, ok, window, n_splits, split, chunk);
		row_lo[r] = k.x, row_hi[r] = k.y;
		// lane l of warp w holds row w·32 + l: the warp's own rows
		w_lo = k.x;
		if (ok) w_hi = k.y;
	}
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		w_lo = max(w_lo, __shfl_xor_sync(FULL_MASK, w_lo, o));
		w_hi = min(w_hi, __shfl_xor_sync(FULL_MASK, w_hi, o));
	}
	__syncthreads(); // fa_hi is complete
	const int2 keys = ext_block_keys(prefix, t_first, fa_hi, window, n_splits, split, chunk, BN);
	const int lo = keys.x, hi = keys.y;
	const int n_tiles = hi > lo ? (hi - lo + BN - 1) / BN : 0;
	const char* kg = (const char*)(k_cache + (i64)g * D);
	const char* vg = (const char*)(v_cache + (i64)g * D);

	auto load_kv = [&](int it, int buf) {
		const int kb = lo + it * BN;
#pragma unroll
		for (int x = 0; x < BN * CPR / 128; x++) {
			const int c = tid + 128 * x, r = c / CPR, cc = c % CPR;
			const int j = kb + r;
			const bool ok = j < hi;
			const i64 slot = ok ? ((i64)pages[page_off + (j >> ps_shift)] << ps_shift) | (j & ps_mask) : 0;
			const u32 off = (u32)(buf * BN * ROWB) + swz<D>(r, cc);
			cp_async16(ks0 + off, kg + slot * k_stride * 2 + cc * 16, ok);
			cp_async16(vs0 + off, vg + slot * v_stride * 2 + cc * 16, ok);
		}
	};
	if (n_tiles > 0) load_kv(0, 0);
	cp_async_commit();

	float o[2][D / 8][4];
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int dt = 0; dt < D / 8; dt++) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
	float m[2][2] = {{NEG_INF, NEG_INF}, {NEG_INF, NEG_INF}}, l[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
	// Scores stay raw (q·k) and are scaled inside exp2 (one FMA), unless a
	// softcap transforms them, into base-2 units already.
	const float sc = sm_scale * k_scale, f = softcap > 0.f ? 1.f : sc * L2E;

	for (int it = 0; it < n_tiles; it++) {
		cp_async_wait<0>();
		__syncthreads(); // tile it (and Q) landed; every warp is done with the other buffer
		if (it + 1 < n_tiles) load_kv(it + 1, (it + 1) & 1);
		cp_async_commit();
		const u32 kt = ks0 + (it & 1) * BN * ROWB, vt = vs0 + (it & 1) * BN * ROWB;
		const int kb = lo + it * BN;

		// S = Q·K^T: two m tiles × BN/8 n tiles.
		float s[2][BN / 8][4];
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int nt = 0; nt < BN / 8; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			u32 a[2][4];
#pragma unroll
			for (int mt = 0; mt < 2; mt++)
				ldsm_x4(a[mt], qs + swz<D>(warp * 32 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)));
#pragma unroll
			for (int np = 0; np < BN / 16; np++) {
				u32 b[4]; // b[0..1]: n tile 2np, b[2..3]: n tile 2np+1
				const int mi = lane >> 3;
				ldsm_x4(b, kt + swz<D>(np * 16 + (lane & 7) + (mi >> 1) * 8, 2 * kk + (mi & 1)));
#pragma unroll
				for (int mt = 0; mt < 2; mt++) {
					mma16816<Ti>(s[mt][2 * np], a[mt], b);
					mma16816<Ti>(s[mt][2 * np + 1], a[mt], b + 2);
				}
			}
		}

		// Online softmax per row (base 2).
		const bool full = kb >= w_lo && kb + BN <= w_hi;
#pragma unroll
		for (int mt = 0; mt < 2; mt++) {
#pragma unroll
			for (int x = 0; x < 2; x++) {
				float mx = NEG_INF;
#pragma unroll
				for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
					for (int e = 0; e < 2; e++) {
						float v = s[mt][nt][2 * x + e];
						if (softcap > 0.f) v = softcap * tanhf(v * sc / softcap) * L2E;
						if (!full) {
							const int j = kb + nt * 8 + 2 * tig + e, r = warp * 32 + mt * 16 + gid + 8 * x;
							v = j >= row_lo[r] && j < row_hi[r] ? v : NEG_INF;
						}
						s[mt][nt][2 * x + e] = v;
						mx = fmaxf(mx, v);
					}
				}
				mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
				mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
				const float m_new = fmaxf(m[mt][x], mx);
				const float mu = m_new == NEG_INF ? 0.f : m_new * f;
				const float alpha = exp2f(fmaf(m[mt][x], f, -mu));
				float ls = 0.f;
#pragma unroll
				for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
					for (int e = 0; e < 2; e++) {
						const float p = exp2f(fmaf(s[mt][nt][2 * x + e], f, -mu));
						s[mt][nt][2 * x + e] = p;
						ls += p;
					}
				}
				l[mt][x] = l[mt][x] * alpha + ls;
				m[mt][x] = m_new;
#pragma unroll
				for (int dt = 0; dt < D / 8; dt++) {
					o[mt][dt][2 * x] *= alpha;
					o[mt][dt][2 * x + 1] *= alpha;
				}
			}
		}

		// O += P·V, 16 keys at a time.
#pragma unroll
		for (int kc = 0; kc < BN / 16; kc++) {
			u32 pa[2][4];
#pragma unroll
			for (int mt = 0; mt < 2; mt++) {
				pa[mt][0] = pack2(bits_of<Ti>(s[mt][2 * kc][0]), bits_of<Ti>(s[mt][2 * kc][1]));
				pa[mt][1] = pack2(bits_of<Ti>(s[mt][2 * kc][2]), bits_of<Ti>(s[mt][2 * kc][3]));
				pa[mt][2] = pack2(bits_of<Ti>(s[mt][2 * kc + 1][0]), bits_of<Ti>(s[mt][2 * kc + 1][1]));
				pa[mt][3] = pack2(bits_of<Ti>(s[mt][2 * kc + 1][2]), bits_of<Ti>(s[mt][2 * kc + 1][3]));
			}
#pragma unroll
			for (int dp = 0; dp < D / 16; dp++) {
				u32 b[4]; // b[0..1]: d tile 2dp, b[2..3]: d tile 2dp+1
				const int mi = lane >> 3;
				ldsm_x4_t(b, vt + swz<D>(kc * 16 + (lane & 7) + (mi & 1) * 8, 2 * dp + (mi >> 1)));
#pragma unroll
				for (int mt = 0; mt < 2; mt++) {
					mma16816<Ti>(o[mt][2 * dp], pa[mt], b);
					mma16816<Ti>(o[mt][2 * dp + 1], pa[mt], b + 2);
				}
			}
		}
	}
	cp_async_wait<0>();

#pragma unroll
	for (int mt = 0; mt < 2; mt++) {
#pragma unroll
		for (int x = 0; x < 2; x++) {
			float lx = l[mt][x];
			lx += __shfl_xor_sync(FULL_MASK, lx, 1);
			lx += __shfl_xor_sync(FULL_MASK, lx, 2);
			const int gr = row0 + warp * 32 + mt * 16 + gid + 8 * x;
			if (gr >= rows) continue;
			const int tok = ext_start + gr / group, head = g * group + gr % group;
			const float inv = lx > 0.f ? v_scale / lx : 0.f;
#pragma unroll
			for (int dt = 0; dt < D / 8; dt++) {
				const int col = dt * 8 + 2 * tig;
				const float v0 = o[mt][dt][2 * x] * inv, v1 = o[mt][dt][2 * x + 1] * inv;
				ext_store2(out, out_stride, part_o, split, n_tokens, n_heads, D, tok, head, col, v0, v1);
			}
			if (part_o != nullptr && tig == 0)
				part_lse[((i64)split * n_tokens + tok) * n_heads + head] = lx > 0.f ? (m[mt][x] * f + log2f(lx)) / L2E : NEG_INF;
		}
	}
}

// Key tiles (FA_KEYS): 64 keys at head dim 64, 32 at 128, where 64 would need more
// than the 255 registers a thread has (S and O of two m tiles). The f16
// kernel at 128 still spilled (32 bytes on an H200), so f16 at 128 stays
// on attn_mma until it fits.
#define ATTN_FA2(si, Ti, D) \
	extern "C" __global__ void __launch_bounds__(FA_BM, 2) attn_fa2_##si##_d##D(ATTN_PARAMS(Ti, Ti)) { attn_fa2<Ti, D, FA_KEYS(D)>(ATTN_ARGS); }
ATTN_FA2(bf16, bf16_t, 64)
ATTN_FA2(bf16, bf16_t, 128)
ATTN_FA2(f16, f16_t, 64)

// ---------------------------------------------------------------------------
// Hopper prefill/extend (attn_fa3): attn_fa2's contract (rows packed by GQA
// group, page-table gather, per-row key ranges, splits, softcap) on the
// warpgroup MMA (wgmma), compiled only for sm_90a: the host launches it
// only when the module has it.
//
// A block owns F3_BM = 128 rows and one KV head: a producer warpgroup that
// only copies (its registers given up by setmaxnreg) and two consumer
// warpgroups of 64 rows each, handing tiles over through mbarriers.
// Q, K and V tiles live in shared memory in the 128-byte-swizzled layout
// wgmma reads: a tile of R rows × D columns is D/64 panels of R × 128
// bytes; row r of a panel sits at r·128 with its 16-byte chunk c at
// (c ^ r%8)·16 (the 1024-byte atoms start 1024-aligned). S = Q·Kᵀ reads Q
// and K from shared memory (both K-major); O += P·V takes P from registers
// (S's accumulator layout is P's A-fragment layout) and V as an N-major B.
// K/V tiles of F3_BN(D) keys are gathered through the page table by cp.async
// into F3_STAGES buffers; each copying thread fences its writes into the
// async proxy before the barrier that hands the tile to the tensor cores.
//
// With pages of 16 keys or more (tma bit 0), the tensor memory accelerator
// loads them instead: tm_k and tm_v are 2D maps over the pool, [slots,
// kv_heads·D], boxes of min(page_size, F3_BN(D)) rows × 64 columns with
// the 128-byte swizzle, which lands each box exactly in the layout above;
// one elected thread copies a tile as one box per page run and panel,
// completing on the tile's barrier with its bytes (no copying threads, no
// proxy fence). A last tile that runs past the block's keys is gathered by
// cp.async instead, which zero-fills the rows past them (the cache rows
// there may never have been written, and 0·NaN would reach O), once the
// streaming warp saw its stage free (named barrier 4). With tma
// bit 1, Q comes the same way: tm_q is a 3D map over q, [tokens, heads, D],
// boxes of F3_BM/group tokens × group heads × 64 columns (group a power of
// two, so a box is exactly the block's packed rows).
//
// Launch: grid (tiles·n_splits, n_reqs, n_kv_heads), tiles = ceil(max
// extend·group / F3_BM); block 384; shared 1024 + (F3_BM +
// 2·F3_STAGES(D)·F3_BN(D))·D·2 bytes. Tiles are 128 keys, 64 at D 256,
// where O takes 128 registers.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
typedef unsigned long long u64;

// Shared-memory matrix descriptor: start address, leading and stride byte
// offsets (16-byte units), 128-byte swizzle.
__device__ __forceinline__ u64 gmma_desc(u32 addr, u32 lbo, u32 sbo) {
	return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous MMAs that own the registers.
template <int N> __device__ __forceinline__ void reg_fence(float (&d)[N]) {
#pragma unroll
	for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// reg_fence for an MMA's A fragments, which an asynchronous wgmma reads
// until its wait: they keep their registers until then.
template <int N> __device__ __forceinline__ void reg_fence_u(u32 (&a)[N][4]) {
#pragma unroll
	for (int i = 0; i < N; i++) asm volatile("" : "+r"(a[i][0]), "+r"(a[i][1]), "+r"(a[i][2]), "+r"(a[i][3])::"memory");
}

// Byte offset of 16-byte chunk c of row r in a swizzled tile of R rows.
template <int R> __device__ __forceinline__ u32 sw128(int r, int c) {
	return (u32)((c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// wgmma m64nNk16 with f32 accumulators, one macro per shape (inline PTX
// takes no operand lists by template): SS reads A and B from shared memory
// (both K-major), RS takes A from registers and B N-major.
#define WGMMA_N64(ty)                                                                                     \
	__device__ __forceinline__ void wgmma_ss_n64_##ty(float(&d)[32], u64 da, u64 db, int acc) {                      \
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                  \
		             "wgmma.mma_async.sync.aligned.m64n64k16.f32." #ty "." #ty " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                                                                  \
		             : "l"(da), "l"(db), "r"(acc));                                                                        \
	}                                                                                                                    \
	__device__ __forceinline__ void wgmma_rs_n64_##ty(float(&d)[32], const u32(&a)[4], u64 db, int acc) {            \
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                  \
		             "wgmma.mma_async.sync.aligned.m64n64k16.f32." #ty "." #ty " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                                                                  \
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));                                   \
	}
#define WGMMA_N128(ty)                                                                                     \
	__device__ __forceinline__ void wgmma_ss_n128_##ty(float(&d)[64], u64 da, u64 db, int acc) {                      \
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                  \
		             "wgmma.mma_async.sync.aligned.m64n128k16.f32." #ty "." #ty " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                                  \
		             : "l"(da), "l"(db), "r"(acc));                                                                        \
	}                                                                                                                    \
	__device__ __forceinline__ void wgmma_rs_n128_##ty(float(&d)[64], const u32(&a)[4], u64 db, int acc) {            \
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                  \
		             "wgmma.mma_async.sync.aligned.m64n128k16.f32." #ty "." #ty " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                                  \
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));                                   \
	}
#define WGMMA_N256(ty)                                                                                     \
	__device__ __forceinline__ void wgmma_ss_n256_##ty(float(&d)[128], u64 da, u64 db, int acc) {                      \
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                  \
		             "wgmma.mma_async.sync.aligned.m64n256k16.f32." #ty "." #ty " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                                                                                                  \
		             : "l"(da), "l"(db), "r"(acc));                                                                        \
	}                                                                                                                    \
	__device__ __forceinline__ void wgmma_rs_n256_##ty(float(&d)[128], const u32(&a)[4], u64 db, int acc) {            \
		asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                                  \
		             "wgmma.mma_async.sync.aligned.m64n256k16.f32." #ty "." #ty " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n" \
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                                                                                                  \
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));                                   \
	}
WGMMA_N64(bf16)
WGMMA_N128(bf16)
WGMMA_N256(bf16)
WGMMA_N64(f16)
WGMMA_N128(f16)
WGMMA_N256(f16)

template <typename Ti> struct wg16;
template <> struct wg16<bf16_t> {
	static __device__ __forceinline__ void ss(float (&d)[32], u64 a, u64 b, int acc) { wgmma_ss_n64_bf16(d, a, b, acc); }
	static __device__ __forceinline__ void ss(float (&d)[64], u64 a, u64 b, int acc) { wgmma_ss_n128_bf16(d, a, b, acc); }
	static __device__ __forceinline__ void rs(float (&d)[32], const u32 (&a)[4], u64 b, int acc) { wgmma_rs_n64_bf16(d, a, b, acc); }
	static __device__ __forceinline__ void rs(float (&d)[64], const u32 (&a)[4], u64 b, int acc) { wgmma_rs_n128_bf16(d, a, b, acc); }
	static __device__ __forceinline__ void rs(float (&d)[128], const u32 (&a)[4], u64 b, int acc) { wgmma_rs_n256_bf16(d, a, b, acc); }
};
template <> struct wg16<f16_t> {
	static __device__ __forceinline__ void ss(float (&d)[32], u64 a, u64 b, int acc) { wgmma_ss_n64_f16(d, a, b, acc); }
	static __device__ __forceinline__ void ss(float (&d)[64], u64 a, u64 b, int acc) { wgmma_ss_n128_f16(d, a, b, acc); }
	static __device__ __forceinline__ void rs(float (&d)[32], const u32 (&a)[4], u64 b, int acc) { wgmma_rs_n64_f16(d, a, b, acc); }
	static __device__ __forceinline__ void rs(float (&d)[64], const u32 (&a)[4], u64 b, int acc) { wgmma_rs_n128_f16(d, a, b, acc); }
	static __device__ __forceinline__ void rs(float (&d)[128], const u32 (&a)[4], u64 b, int acc) { wgmma_rs_n256_f16(d, a, b, acc); }
};

__device__ __forceinline__ void mbar_init(u32 bar, int count) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count)); }
__device__ __forceinline__ void mbar_arrive(u32 bar) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory"); }
__device__ __forceinline__ void mbar_wait(u32 bar, int parity) {
	asm volatile("{\n.reg .pred p;\nW:\n"
	             "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
	             "@!p bra W;\n}\n" ::"r"(bar),
	             "r"(parity)
	             : "memory");
}
// The driver's CUtensorMap: opaque, made on the host (cuTensorMapEncodeTiled).
struct alignas(64) CUtensorMap {
	u64 opaque[16];
};
// The tensor memory accelerator: a box of a tensor map's tensor at the
// given coordinates (innermost first) copied to shared memory, completing
// on an mbarrier with its bytes, which one arrival announces beforehand.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tma_prefetch(const CUtensorMap* m) { asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)m) : "memory"); }
__device__ __forceinline__ void tma_load2(u32 dst, const CUtensorMap* m, int c0, int c1, u32 bar) {
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
	             "l"((u64)m), "r"(c0), "r"(c1), "r"(bar)
	             : "memory");
}
__device__ __forceinline__ void tma_load3(u32 dst, const CUtensorMap* m, int c0, int c1, int c2, u32 bar) {
	asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
	             "l"((u64)m), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
	             : "memory");
}
// wg_row_max is the largest of a wgmma accumulator's row half x (0: row
// lane/4, 1: that row + 8) over BN columns: the thread's BN/8 pairs, then
// the four threads that share the row.
template <int BN> __device__ __forceinline__ float wg_row_max(const float (&sv)[BN / 2], int x) {
	float mx = NEG_INF;
#pragma unroll
	for (int nt = 0; nt < BN / 8; nt++) mx = fmaxf(mx, fmaxf(sv[nt * 4 + 2 * x], sv[nt * 4 + 2 * x + 1]));
	mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
	return fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
}

// wg_pack_p rounds a wgmma accumulator's BN columns of P (sv) to Ti pairs
// in the register A fragment of the P·V wgmma (pa: BN/16 k steps of four
// words).
template <typename Ti, int BN> __device__ __forceinline__ void wg_pack_p(u32 (&pa)[BN / 16][4], const float (&sv)[BN / 2]) {
#pragma unroll
	for (int kc = 0; kc < BN / 16; kc++)
#pragma unroll
		for (int w = 0; w < 4; w++) pa[kc][w] = pack_f2<Ti>(sv[8 * kc + 2 * w], sv[8 * kc + 2 * w + 1]);
}

template <int N> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

// F3_OVERLAP 1 issues S of a tile with P·V of the one before (below);
// GOSLING_NVRTC_DEFINES=-DF3_OVERLAP=1 selects it without a rebuild.
#ifndef F3_OVERLAP
#define F3_OVERLAP 0
#endif

template <typename Ti, typename Tk, int D>
__device__ void attn_fa3(ATTN_PARAMS(Ti, Tk), const CUtensorMap* tm_q, const CUtensorMap* tm_k, const CUtensorMap* tm_v, int tma) {
	constexpr bool FP8 = sizeof(Tk) == 1;
	constexpr int BM = F3_BM, BN = F3_BN(D), ST = F3_STAGES(D);
	constexpr int CPR = D / 8;       // 16-byte chunks per row
	constexpr int TILE = BN * D * 2; // bytes of one K or V tile
	constexpr float L2E = 1.4426950408889634f;
	// 1024-aligned: the swizzle atoms of the tiles; the host sizes the
	// dynamic shared memory without slack.
	extern __shared__ __align__(1024) unsigned char f3_smem[];
	__shared__ int f3_hi;
	__shared__ int row_lo[BM], row_hi[BM];
	__shared__ __align__(8) unsigned long long f3_bar[1 + 4 * ST]; // Q landed; K, V landed [ST each]; K, V free [ST each]
	__shared__ int f3_slot[2][BN];
	const ExtTile et = ext_tile(req, n_heads, n_kv_heads, n_splits, BM);
	const int split = et.split, prefix = et.prefix, ext_start = et.ext_start, page_off = et.page_off;
	const int group = et.group, rows = et.rows, row0 = et.row0;
	if (row0 >= rows) return;
	const int g = blockIdx.z;
	const int tid = threadIdx.x, wg = tid >> 7;
	const u32 qs = smem_u32(f3_smem);
	if (qs & 1023) __trap();
	const u32 ks0 = qs + BM * D * 2, vs0 = ks0 + ST * TILE;
	// K and V tiles have barriers of their own: a K buffer frees once S =
	// Q·Kᵀ of its tile is done, a V buffer once P·V is, which under
	// F3_OVERLAP comes a step later.
	const u32 bar_q = smem_u32(&f3_bar[0]), bar_kfull = bar_q + 8, bar_vfull = bar_kfull + 8 * ST;
	const u32 bar_kfree = bar_vfull + 8 * ST, bar_vfree = bar_kfree + 8 * ST;
	// A copying producer hands over and takes back a stage's K and V together.
	auto full_arrive = [&](int s) {
		mbar_arrive(bar_kfull + 8 * s);
		mbar_arrive(bar_vfull + 8 * s);
	};
	auto free_wait = [&](int s, int parity) {
		mbar_wait(bar_kfree + 8 * s, parity);
		mbar_wait(bar_vfree + 8 * s, parity);
	};

	const int t_first = row0 / group, t_last = (min(rows, row0 + BM) - 1) / group;
	// A barrier the accelerator fills waits for one arrival (its expect_tx,
	// or the one thread that hands over a tile gathered by cp.async); Q
	// gathered beside it, for producer warps 1-3; else for every producer.
	const int tmode = FP8 || !(tma & 1) ? 0 : tma; // Q by the accelerator only beside K/V
	if (tid == 0) {
		f3_hi = 0;
		mbar_init(bar_q, (tmode & 2) ? 1 : (tmode & 1) ? 96 : 128);
		for (int s = 0; s < ST; s++) {
			mbar_init(bar_kfull + 8 * s, (tmode & 1) ? 1 : 128);
			mbar_init(bar_vfull + 8 * s, (tmode & 1) ? 1 : 128);
			mbar_init(bar_kfree + 8 * s, 256);
			mbar_init(bar_vfree + 8 * s, 256);
		}
		fence_async_smem(); // the barriers, as the accelerator's completions see them
	}
	__syncthreads();
	for (int t = t_first + tid; t <= t_last; t += F3_THREADS) atomicMax(&f3_hi, tok_hi[ext_start + t]);
	if (tid < BM) {
		const int2 k = ext_row_keys(tok_hi, ext_start, prefix, group, row0 + tid, row0 + tid < rows, window, n_splits, split, chunk);
		row_lo[tid] = k.x, row_hi[tid] = k.y;
	}
	__syncthreads(); // f3_hi, the row ranges and the barriers are ready
	const int2 keys = ext_block_keys(prefix, t_first, f3_hi, window, n_splits, split, chunk, BN);
	const int lo = keys.x, hi = keys.y;
	const int n_tiles = hi > lo ? (hi - lo + BN - 1) / BN : 0;

	if (wg == 0) {
		// Producer: gathers Q, then K/V tiles through the page table, ST-1
		// tiles ahead of the consumers. A tile is handed over once this
		// thread's copies of it completed and were fenced into the async
		// proxy (every producer thread arrives).
		setmaxnreg_dec<F3_PRODUCER_REGS>();
		const int ptid = tid;
		if constexpr (!FP8) {
			if (tmode & 1) {
				// Warp 0 streams the tiles whose keys all lie below hi, its
				// lane 0 issuing the copies; warps 1-3 gather Q (unless it
				// comes by the accelerator too), then a last tile that runs
				// past hi.
				const int warp = ptid >> 5, lane = ptid & 31;
				const int ps_shift = __ffs(page_size) - 1, ps_mask = page_size - 1;
				const int n_full = hi > lo ? (hi - lo) / BN : 0;
				if (warp == 0) {
					const int run = min(page_size, BN), n_runs = BN / run; // a tile's page runs (tiles start BN-aligned)
					if (lane == 0) {
						tma_prefetch(tm_k);
						tma_prefetch(tm_v);
						if ((tmode & 2) && n_tiles > 0) {
							mbar_expect_tx(bar_q, BM * D * 2);
#pragma unroll
							for (int p = 0; p < D / 64; p++) tma_load3(qs + p * BM * 128, tm_q, p * 64, g * group, ext_start + row0 / group, bar_q);
						}
					}
					// Lane i < n_runs looks up the slot of run i's first key
					// a tile ahead.
					auto run_slot = [&](int it) {
						const int j = lo + it * BN + lane * run;
						return lane < n_runs ? (pages[page_off + (j >> ps_shift)] << ps_shift) | (j & ps_mask) : 0;
					};
					int nslot = n_full > 0 ? run_slot(0) : 0;
					for (int it = 0; it < n_full; it++) {
						const int s = it % ST, slot = nslot;
						if (it + 1 < n_full) nslot = run_slot(it + 1);
						// K first, on its own barrier: under F3_OVERLAP its
						// buffer frees a step before V's.
#pragma unroll
						for (int kv = 0; kv < 2; kv++) {
							if (it >= ST) mbar_wait((kv ? bar_vfree : bar_kfree) + 8 * s, (it / ST + 1) & 1);
							const u32 bar = (kv ? bar_vfull : bar_kfull) + 8 * s, dst0 = (kv ? vs0 : ks0) + (u32)(s * TILE);
							const CUtensorMap* tm = kv ? tm_v : tm_k;
							if (lane == 0) mbar_expect_tx(bar, TILE);
							for (int i = 0; i < n_runs; i++) {
								const int row = __shfl_sync(FULL_MASK, slot, i);
								if (lane == 0) {
#pragma unroll
									for (int p = 0; p < D / 64; p++)
										tma_load2(dst0 + (u32)(p * BN * 128 + i * run * 128), tm, g * D + p * 64, row, bar); // sw128<BN>(i·run, 8p)
								}
							}
						}
					}
					// The last tile's stage: warp 0 waits for it to come
					// free, then hands it to warps 1-3. A parity wait for
					// phase k passes while phase k-1 is still open, so only
					// a thread that saw k-1 complete (this warp, loading
					// tile n_full-ST) may wait for k.
					if (n_tiles > n_full) {
						if (n_full >= ST) free_wait(n_full % ST, (n_full / ST + 1) & 1);
						asm volatile("bar.arrive 4, 128;\n" ::: "memory");
					}
					return;
				}
				const int t96 = ptid - 32;
				if (n_tiles == 0) return;
				if (!(tmode & 2)) {
					for (int c = t96; c < BM * CPR; c += 96) {
						const int r = c / CPR, cc = c % CPR, gr = row0 + r;
						const bool ok = gr < rows;
						cp_async16(qs + sw128<BM>(r, cc), ext_q_row(q, q_stride, ext_start, group, g, D, gr, ok) + cc * 8, ok);
					}
					cp_async_commit();
					cp_async_wait<0>();
					fence_async_smem();
					mbar_arrive(bar_q);
				}
				if (n_tiles > n_full) {
					const int it = n_full, s = it % ST, kb = lo + it * BN;
					asm volatile("bar.sync 4, 128;\n" ::: "memory"); // warp 0 saw stage s free
					const char* kg = (const char*)(k_cache + (i64)g * D);
					const char* vg = (const char*)(v_cache + (i64)g * D);
					const i64 kst = k_stride * (i64)sizeof(Tk), vst = v_stride * (i64)sizeof(Tk);
					for (int c = t96; c < BN * CPR; c += 96) {
						const int r = c / CPR, cc = c % CPR, j = kb + r;
						const bool ok = j < hi;
						const i64 sl = ok ? ((i64)pages[page_off + (j >> ps_shift)] << ps_shift) | (j & ps_mask) : 0;
						const u32 off = (u32)(s * TILE) + sw128<BN>(r, cc);
						cp_async16(ks0 + off, kg + sl * kst + cc * 16, ok);
						cp_async16(vs0 + off, vg + sl * vst + cc * 16, ok);
					}
					cp_async_commit();
					cp_async_wait<0>();
					fence_async_smem();
					asm volatile("bar.sync 1, 96;\n" ::: "memory"); // every gathering thread's rows landed
					if (t96 == 0) full_arrive(s);
				}
				return;
			}
		}
		for (int c = ptid; c < BM * CPR; c += 128) {
			const int r = c / CPR, cc = c % CPR, gr = row0 + r;
			const bool ok = gr < rows;
			cp_async16(qs + sw128<BM>(r, cc), ext_q_row(q, q_stride, ext_start, group, g, D, gr, ok) + cc * 8, ok);
		}
		cp_async_commit();
		const int ps_shift = __ffs(page_size) - 1, ps_mask = page_size - 1;
		const char* kg = (const char*)(k_cache + (i64)g * D);
		const char* vg = (const char*)(v_cache + (i64)g * D);
		// Thread t looks up the slot of key t of the next tile while this
		// one copies; the tile's slots meet in f3_slot (two buffers, one
		// producer barrier per tile), so no copy waits on the page table.
		auto slot_of = [&](int it) {
			const int j = lo + it * BN + ptid;
			return ptid < BN && j < hi ? (pages[page_off + (j >> ps_shift)] << ps_shift) | (j & ps_mask) : -1;
		};
		int nslot = n_tiles > 0 ? slot_of(0) : -1;
		constexpr int RS = 128 / CPR; // rows one pass of the producer covers
		static_assert(RS % 8 == 0 || D == 256, "row passes keep the swizzle phase");
		const int pr0 = ptid / CPR, pcc = ptid % CPR;
		const u32 poff = sw128<BN>(pr0, pcc); // sw128 depends on the row through r % 8: fixed when RS is a multiple of 8
		const char* kcol = kg + pcc * 16;
		const char* vcol = vg + pcc * 16;
		const i64 kst = k_stride * (i64)sizeof(Tk), vst = v_stride * (i64)sizeof(Tk);
		if constexpr (FP8) {
			// fp8 rows (D bytes) land in one staging buffer by cp.async,
			// then every producer thread widens its 16-byte pieces to Ti in
			// the swizzled stage: tiles are handed over one at a time.
			const u32 stg = vs0 + ST * TILE; // K rows [BN][D] then V rows [BN][D], bytes
			constexpr int CB = D / 16;       // 16-byte fp8 chunks per row
			for (int it = 0; it < n_tiles; it++) {
				const int s = it % ST;
				if (ptid < BN) f3_slot[it & 1][ptid] = nslot;
				asm volatile("bar.sync 1, 128;\n" ::: "memory"); // slots complete; the staging buffer is free
				if (it + 1 < n_tiles) nslot = slot_of(it + 1);
				for (int c = ptid; c < BN * CB; c += 128) {
					const int r = c / CB, cc = c % CB;
					const int slot = f3_slot[it & 1][r];
					const bool ok = slot >= 0;
					const i64 sl = ok ? slot : 0;
					cp_async16(stg + r * D + cc * 16, kg + sl * kst + cc * 16, ok);
					cp_async16(stg + BN * D + r * D + cc * 16, vg + sl * vst + cc * 16, ok);
				}
				cp_async_commit();
				cp_async_wait<0>();
				if (it >= ST) free_wait(s, (it / ST + 1) & 1);
				asm volatile("bar.sync 1, 128;\n" ::: "memory"); // every thread's copies landed
				for (int c = ptid; c < 2 * BN * CB; c += 128) {
					const int kv = c / (BN * CB), r = (c / CB) % BN, cc = c % CB;
					u32 w[4], o8[8];
					asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
					             : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
					             : "r"(stg + kv * BN * D + r * D + cc * 16));
#pragma unroll
					for (int i = 0; i < 4; i++) {
						o8[2 * i] = e4m3x2_to<Ti>((u16)(w[i] & 0xffff));
						o8[2 * i + 1] = e4m3x2_to<Ti>((u16)(w[i] >> 16));
					}
					const u32 dst = (kv ? vs0 : ks0) + (u32)(s * TILE);
					asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst + sw128<BN>(r, 2 * cc)), "r"(o8[0]), "r"(o8[1]), "r"(o8[2]),
					             "r"(o8[3]));
					asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst + sw128<BN>(r, 2 * cc + 1)), "r"(o8[4]), "r"(o8[5]),
					             "r"(o8[6]), "r"(o8[7]));
				}
				fence_async_smem();
				if (it == 0) mbar_arrive(bar_q);
				full_arrive(s);
			}
			cp_async_wait<0>();
			fence_async_smem();
			if (n_tiles == 0) mbar_arrive(bar_q);
			return;
		}
		for (int it = 0; it < n_tiles; it++) {
			const int s = it % ST;
			if (ptid < BN) f3_slot[it & 1][ptid] = nslot;
			asm volatile("bar.sync 1, 128;\n" ::: "memory");
			if (it + 1 < n_tiles) nslot = slot_of(it + 1);
			if (it >= ST - 1) {
				// Hand over tile it-ST+1 (the oldest in flight) before
				// waiting for a free buffer.
				cp_async_wait<ST - 2>();
				fence_async_smem();
				if (it == ST - 1) mbar_arrive(bar_q);
				full_arrive((it - (ST - 1)) % ST);
			}
			if (it >= ST) free_wait(s, (it / ST + 1) & 1);
			// Thread t copies chunk t % CPR of rows t / CPR + x·RS: one
			// swizzled column, so its shared offsets step by RS rows.
#pragma unroll 4
			for (int x = 0; x < BN / RS; x++) {
				const int slot = f3_slot[it & 1][pr0 + x * RS];
				const bool ok = slot >= 0;
				const i64 sl = ok ? slot : 0;
				const u32 off = (u32)(s * TILE) + (RS % 8 == 0 ? poff + x * RS * 128 : sw128<BN>(pr0 + x * RS, pcc));
				cp_async16(ks0 + off, kcol + sl * kst, ok);
				cp_async16(vs0 + off, vcol + sl * vst, ok);
			}
			cp_async_commit();
		}
		cp_async_wait<0>();
		fence_async_smem();
		if (n_tiles < ST) mbar_arrive(bar_q);
		for (int it = max(0, n_tiles - (ST - 1)); it < n_tiles; it++) full_arrive(it % ST);
		return;
	}

	// Consumers: warpgroup cw owns rows cw·64 .. cw·64+63; wgmma gives
	// warp w of a warpgroup rows 16w .. 16w+15.
	setmaxnreg_inc<F3_CONSUMER_REGS>();
	const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
	const int wrow = cw * 64 + warp * 16;
	// The warp's tiles inside [w_lo, w_hi) need no per-key test; rows past
	// the extend are never stored and constrain nothing.
	int w_lo, w_hi;
	{
		const int r = wrow + (lane & 15);
		w_lo = row_lo[r];
		w_hi = row0 + r < rows ? row_hi[r] : 0x7fffffff;
#pragma unroll
		for (int o = 1; o < 16; o <<= 1) {
			w_lo = max(w_lo, __shfl_xor_sync(FULL_MASK, w_lo, o));
			w_hi = min(w_hi, __shfl_xor_sync(FULL_MASK, w_hi, o));
		}
	}
	float o[D / 2];
#pragma unroll
	for (int i = 0; i < D / 2; i++) o[i] = 0.f;
	float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
	const float sc = sm_scale * k_scale, f = softcap > 0.f ? 1.f : sc * L2E;
	const u32 qw = qs + cw * 64 * 128; // this warpgroup's 64 rows in every Q panel
	if (n_tiles > 0) mbar_wait(bar_q, 0);

	// S = Q·Kᵀ of tile it into sv: accumulator sv[nt·4 + e] is row
	// gid + 8·(e/2), key nt·8 + 2·tig + e%2.
	float sv[BN / 2];
	auto issue_s = [&](int it) {
		const u32 kt = ks0 + (it % ST) * TILE;
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			const u32 koff = (kk & 3) * 32; // 16 columns = 32 bytes along a swizzled row
			wg16<Ti>::ss(sv, gmma_desc(qw + (kk >> 2) * BM * 128 + koff, 16, 1024), gmma_desc(kt + (kk >> 2) * BN * 128 + koff, 16, 1024), kk);
		}
		wg_commit();
	};
	// O += P·V of tile it, 16 keys per MMA, P from registers; V is the
	// N-major B (LBO: the next 64-column panel, SBO: the next 8 keys).
	u32 pa[BN / 16][4];
	auto issue_pv = [&](int it) {
		const u32 vt = vs0 + (it % ST) * TILE;
		reg_fence(o);
		wg_fence();
#pragma unroll
		for (int kc = 0; kc < BN / 16; kc++) wg16<Ti>::rs(o, pa[kc], gmma_desc(vt + kc * 16 * 128, BN * 128, 1024), 1);
		wg_commit();
	};
	// softmax turns the scores of tile it into weights in place and
	// returns each row's rescale factor for O.
	auto softmax = [&](int it, float (&alpha)[2]) {
		const int kb = lo + it * BN;
		// Softcap and masks as passes of their own, so that the common
		// tile runs only the max, exp and sum below.
		if (softcap > 0.f) {
#pragma unroll
			for (int i = 0; i < BN / 2; i++) sv[i] = softcap * tanhf(sv[i] * sc / softcap) * L2E;
		}
		if (kb < w_lo || kb + BN > w_hi) {
#pragma unroll
			for (int x = 0; x < 2; x++) {
				const int r = wrow + gid + 8 * x, rl = row_lo[r], rh = row_hi[r];
#pragma unroll
				for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
					for (int e = 0; e < 2; e++) {
						const int j = kb + nt * 8 + 2 * tig + e;
						if (j < rl || j >= rh) sv[nt * 4 + 2 * x + e] = NEG_INF;
					}
				}
			}
		}
#pragma unroll
		for (int x = 0; x < 2; x++) {
			const float mx = wg_row_max<BN>(sv, x);
			const float m_new = fmaxf(m[x], mx);
			const float mu = m_new == NEG_INF ? 0.f : m_new * f;
			alpha[x] = ex2(fmaf(m[x], f, -mu));
			float ls0 = 0.f, ls1 = 0.f;
#pragma unroll
			for (int nt = 0; nt < BN / 8; nt++) {
				const float p0 = ex2(fmaf(sv[nt * 4 + 2 * x], f, -mu)), p1 = ex2(fmaf(sv[nt * 4 + 2 * x + 1], f, -mu));
				sv[nt * 4 + 2 * x] = p0, sv[nt * 4 + 2 * x + 1] = p1;
				ls0 += p0, ls1 += p1;
			}
			l[x] = l[x] * alpha[x] + (ls0 + ls1);
			m[x] = m_new;
		}
	};
	auto pack_p = [&]() { wg_pack_p<Ti, BN>(pa, sv); };

	// The two consumer warpgroups take turns issuing their MMAs (named
	// barriers 2 and 3, FA3's ping-pong), so that one's softmax runs while
	// the other's MMAs do; each bar.sync of one is matched by a bar.arrive
	// of the other.
	auto my_turn = [&]() {
		if (cw == 0) asm volatile("bar.sync 2, 256;\n" ::: "memory");
		else asm volatile("bar.sync 3, 256;\n" ::: "memory");
	};
	auto your_turn = [&]() {
		if (cw == 0) asm volatile("bar.arrive 3, 256;\n" ::: "memory");
		else asm volatile("bar.arrive 2, 256;\n" ::: "memory");
	};
	auto rescale_o = [&](const float (&alpha)[2]) {
		// Once the row maxima settle, most tiles leave O as it is.
		if (__any_sync(FULL_MASK, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
			for (int dt = 0; dt < D / 8; dt++) {
				o[dt * 4] *= alpha[0], o[dt * 4 + 1] *= alpha[0];
				o[dt * 4 + 2] *= alpha[1], o[dt * 4 + 3] *= alpha[1];
			}
		}
	};
	if (cw == 1 && n_tiles > 0) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
#if F3_OVERLAP
	// FA3's intra-warpgroup overlap: a turn issues S of tile it and P·V of
	// tile it-1, and tile it's softmax runs while that P·V does. P·V's A
	// fragments stay fenced in their registers until its wait. The first
	// tile and the last P·V are peeled off the loop: ptxas follows every
	// path between a wgmma and its wait, and a test of it > 0 around the
	// issue and another around the wait make a path on which O is read
	// with its P·V in flight, for which it serializes every wgmma.
	if (n_tiles > 0) {
		float alpha[2];
		mbar_wait(bar_kfull, 0);
		my_turn();
		issue_s(0);
		your_turn();
		wg_wait<0>();
		reg_fence(sv);
		mbar_arrive(bar_kfree);
		softmax(0, alpha); // O is zero: no rescale
		pack_p();
	}
	for (int it = 1; it < n_tiles; it++) {
		float alpha[2];
		mbar_wait(bar_kfull + 8 * (it % ST), (it / ST) & 1);
		mbar_wait(bar_vfull + 8 * ((it - 1) % ST), ((it - 1) / ST) & 1);
		my_turn();
		issue_s(it);
		issue_pv(it - 1);
		your_turn();
		wg_wait<1>();
		reg_fence(sv);
		mbar_arrive(bar_kfree + 8 * (it % ST));
		softmax(it, alpha);
		wg_wait<0>();
		reg_fence(o);
		reg_fence_u(pa);
		mbar_arrive(bar_vfree + 8 * ((it - 1) % ST));
		rescale_o(alpha);
		pack_p();
	}
	if (n_tiles > 0) {
		const int it = n_tiles - 1;
		mbar_wait(bar_vfull + 8 * (it % ST), (it / ST) & 1);
		my_turn();
		issue_pv(it);
		if (cw == 0) your_turn(); // warpgroup 1 issues last: no turn follows
		wg_wait<0>();
		reg_fence(o);
		reg_fence_u(pa);
		mbar_arrive(bar_vfree + 8 * (it % ST));
	}
#else
	// A turn issues S only; each warpgroup waits for its own P·V.
	for (int it = 0; it < n_tiles; it++) {
		float alpha[2];
		mbar_wait(bar_kfull + 8 * (it % ST), (it / ST) & 1);
		my_turn();
		issue_s(it);
		if (cw == 0 || it + 1 < n_tiles) your_turn();
		wg_wait<0>();
		reg_fence(sv);
		mbar_arrive(bar_kfree + 8 * (it % ST));
		softmax(it, alpha);
		rescale_o(alpha);
		pack_p();
		mbar_wait(bar_vfull + 8 * (it % ST), (it / ST) & 1);
		issue_pv(it);
		wg_wait<0>();
		reg_fence(o);
		mbar_arrive(bar_vfree + 8 * (it % ST));
	}
#endif

#pragma unroll
	for (int x = 0; x < 2; x++) {
		float lx = l[x];
		lx += __shfl_xor_sync(FULL_MASK, lx, 1);
		lx += __shfl_xor_sync(FULL_MASK, lx, 2);
		const int gr = row0 + wrow + gid + 8 * x;
		if (gr >= rows) continue;
		const int tok = ext_start + gr / group, head = g * group + gr % group;
		const float inv = lx > 0.f ? v_scale / lx : 0.f;
#pragma unroll
		for (int dt = 0; dt < D / 8; dt++) {
			const int col = dt * 8 + 2 * tig;
			const float v0 = o[dt * 4 + 2 * x] * inv, v1 = o[dt * 4 + 2 * x + 1] * inv;
			ext_store2(out, out_stride, part_o, split, n_tokens, n_heads, D, tok, head, col, v0, v1);
		}
		if (part_o != nullptr && tig == 0)
			part_lse[((i64)split * n_tokens + tok) * n_heads + head] = lx > 0.f ? (m[x] * f + log2f(lx)) / L2E : NEG_INF;
	}
}

// ATTN_PARAMS, then the tensor maps of Q, K and V (by value, addressable
// in the kernel's parameter space) and the tma bits that say which apply.
#define F3_PARAMS(Ti, Tk)                                                                                  \
	ATTN_PARAMS(Ti, Tk), const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k, \
	    const __grid_constant__ CUtensorMap tm_v, int tma
#define ATTN_FA3(si, Ti, D)                                                                                          \
	extern "C" __global__ void __launch_bounds__(F3_THREADS, 1) attn_fa3_##si##_d##D(F3_PARAMS(Ti, Ti)) {           \
		attn_fa3<Ti, Ti, D>(ATTN_ARGS, &tm_q, &tm_k, &tm_v, tma);                                                     \
	}
// Over an fp8 cache (staged, then widened): head dims 64 and 128, where the
// staging buffer fits beside the stages. The tensor maps are not used.
#define ATTN_FA3_FP8(si, Ti, D)                                                                                       \
	extern "C" __global__ void __launch_bounds__(F3_THREADS, 1) attn_fa3_##si##_fp8_d##D(F3_PARAMS(Ti, fp8_t)) {     \
		attn_fa3<Ti, fp8_t, D>(ATTN_ARGS, &tm_q, &tm_k, &tm_v, tma);                                                  \
	}
ATTN_FA3(bf16, bf16_t, 64)
ATTN_FA3(bf16, bf16_t, 128)
ATTN_FA3(f16, f16_t, 64)
ATTN_FA3(f16, f16_t, 128)
ATTN_FA3(bf16, bf16_t, 256)
ATTN_FA3(f16, f16_t, 256)
ATTN_FA3_FP8(bf16, bf16_t, 64)
ATTN_FA3_FP8(bf16, bf16_t, 128)

// ---------------------------------------------------------------------------
// Hopper MLA decode (attn_mla_wg): attn_mla's contract (one new token per
// request over the 576-wide latent cache whose first 512 values are the
// value; bf16 queries and cache) on the warpgroup MMA, FlashMLA's design,
// compiled only for sm_90a. At 128 heads a key costs 128·(576+512)·2 FLOP
// per 1,152 bytes read, more than mma.sync delivers at the memory's rate.
//
// A block owns MLA_WG_BM = 64 query heads of one token (128 heads: two
// blocks a token, which read the same keys, the second mostly from L2)
// and one split of its keys, in tiles of MLA_WG_BN = 64 keys through
// MLA_WG_STAGES = 2 shared buffers. Threads: a producer warpgroup and two
// consumer warpgroups (setmaxnreg as attn_fa3's).
//  - Producer: its two halves of 64 threads fill one stage each (even and
//    odd tiles), so a stage is refilled the moment it frees and handed over
//    the moment it lands: gather through the page table by cp.async (8
//    threads copy a key's 128-byte panel rows: full sectors), wait, proxy
//    fence, arrive on the stage's full barrier. Q comes first (bar_q).
//  - Consumer 0: S = Q·Kᵀ (m64n64k16, both from shared memory, 36 k
//    steps), the online softmax in registers, then P (bf16, in S's
//    accumulator layout, which is wgmma's A-fragment layout) and the rows'
//    rescale factors to shared memory for consumer 1, then O[:, 0:256] +=
//    P·V (m64n256k16, P from registers, V = the K tile's first 4 panels
//    read N-major).
//  - Consumer 1: takes P and the factors (thread t of one warpgroup holds
//    the same rows and fragments as thread t of the other, so each thread
//    reads back exactly what its twin wrote), O[:, 256:512] += P·V from
//    panels 4-7, while consumer 0 goes on to the next tile's S.
// Each consumer's O is 64 rows × 256 columns: 128 f32 registers a thread.
// A stage frees when both consumers' MMAs on it are done (256 arrivals).
// Named barriers 2 (P ready: 0 arrives, 1 waits), 3 (P read: 1 arrives, 0
// waits before overwriting it) and 4 (the final row sums) pair them.
//
// Q and K tiles are stored in the 128-byte-swizzled panels of attn_fa3
// (sw128): a tile of 64 rows × 576 columns is 9 panels of 64 × 128 bytes.
// Keys past the split's end are zero-filled and masked.
//
// Launch: grid (ceil(n_heads / 64), n_tokens, n_splits), block 384,
// shared MLA_WG_SMEM bytes (1024-aligned, no slack needed). Output as
// attn_mla's: out when part_o is null, else the split's partials and
// log-sum-exps. With k_new set (its rows kn_stride apart; slots the cache
// rows, attn_store's inputs) the block whose split holds the token's own
// position stores the token's latent row first, as attn_dtc does.
//
// MLA_WG_DIAG (GOSLING_NVRTC_DEFINES, measurement only, wrong results):
// 1 copies no K tiles (the consumers' time alone), 2 issues no MMAs (the
// loads' time alone).
#ifndef MLA_WG_DIAG
#define MLA_WG_DIAG 0
#endif
#define MLA_WG_SMEM ((MLA_WG_BM + MLA_WG_STAGES * MLA_WG_BN) * MLA_ROW + 128 * 16 * 4 + 128 * 2 * 4)

__device__ void attn_mla_wg(const bf16_t* q, i64 q_stride, const bf16_t* k_cache, i64 k_stride, float k_scale, float v_scale,
                            bf16_t* out, i64 out_stride, float* part_o, float* part_lse, const int* req, const int* tok_req,
                            const int* tok_hi, const int* pages, int page_size, int n_heads, float sm_scale, int window,
                            int n_splits, int chunk, int n_tokens, const bf16_t* k_new, i64 kn_stride, const int* slots) {
	constexpr int BM = MLA_WG_BM, BN = MLA_WG_BN, ST = MLA_WG_STAGES;
	constexpr int CPR = MLA_DK / 8;    // 16-byte chunks of a row: 72
	constexpr int PANEL = BN * 128;    // bytes of one 64-column panel of a tile (BM == BN)
	constexpr int TILE = BN * MLA_ROW; // bytes of a K tile: 72 KiB, 1024-aligned
	static_assert(BM == 64 && BN == 64 && ST == 2, "a producer half per stage; 64-row wgmma tiles");
	constexpr float L2E = 1.4426950408889634f;
	extern __shared__ __align__(1024) unsigned char mw_smem[];
	__shared__ __align__(8) unsigned long long mw_bar[1 + 2 * ST]; // Q landed; K tile landed [ST]; K tile free [ST]
	const int h0 = blockIdx.x * BM, tok = blockIdx.y, split = blockIdx.z;
	const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127;
	const u32 qs = smem_u32(mw_smem);
	if (qs & 1023) __trap();
	// P fragments [4 k chunks][128 threads] of 16 bytes and the rescale
	// factors [128][2], then the final 1/l [128][2] (with the static
	// barriers, padded to 1024 bytes, this fills the 227 KiB of a block).
	const u32 ks0 = qs + BM * MLA_ROW, pfr = ks0 + ST * TILE, afr = pfr + 128 * 64;
	const u32 bar_q = smem_u32(&mw_bar[0]), bar_full = bar_q + 8, bar_free = bar_full + 8 * ST;
	TokKeys tk = tok_keys(req, tok_req, tok_hi, tok, window);
	if (k_new != nullptr && (n_splits == 1 || tk.i / chunk == split)) {
		// The KV store rides along (attn_dtc's contract): the new token's
		// latent row goes to its cache slot before this block's copies read
		// it. Both head-blocks of a token write the same bytes.
		const int slot = slots[tok];
		if (slot >= 0) {
			u32* dst = reinterpret_cast<u32*>(const_cast<bf16_t*>(k_cache) + (i64)slot * k_stride);
			const u32* src = reinterpret_cast<const u32*>(k_new + (i64)tok * kn_stride);
			for (int c = tid; c < MLA_DK / 2; c += blockDim.x) dst[c] = src[c];
		}
	}
	tk.narrow(n_splits, split, chunk);
	const int page_off = tk.page_off, lo = tk.lo, hi = tk.hi;
	const int n_tiles = hi > lo ? (hi - lo + BN - 1) / BN : 0;
	if (tid == 0) {
		mbar_init(bar_q, 128);
		for (int s = 0; s < ST; s++) {
			mbar_init(bar_full + 8 * s, 64);
			mbar_init(bar_free + 8 * s, 256);
		}
	}
	__syncthreads(); // the barriers are ready

	if (wg == 0) {
		setmaxnreg_dec<F3_PRODUCER_REGS>();
		// Q: rows past n_heads are zero (their scores are never stored).
		for (int c = t; c < BM * CPR; c += 128) {
			const int r = c / CPR, cc = c % CPR;
			const bool ok = h0 + r < n_heads;
			cp_async16(qs + sw128<BM>(r, cc), q + (i64)tok * q_stride + (i64)(ok ? h0 + r : 0) * MLA_DK + cc * 8, ok);
		}
		cp_async_commit();
		// Half h fills stage h with tiles h, h+2, ...: thread (crow, cpart)
		// copies chunk cpart of every panel of rows crow + 8x, whose swizzle
		// phase is crow.
		const int half = t >> 6, crow = (t >> 3) & 7, cpart = t & 7;
		const int ps_shift = __ffs(page_size) - 1, ps_mask = page_size - 1;
		const char* kcol = (const char*)k_cache + cpart * 16;
		const i64 kst = k_stride * 2;
		const u32 dst0 = ks0 + half * TILE + crow * 128 + ((cpart ^ crow) << 4);
		bool q_told = false;
		for (int it = half; it < n_tiles; it += ST) {
			int sl[BN / 8];
#pragma unroll
			for (int x = 0; x < BN / 8; x++) { // the slots first: their loads overlap the wait below
				const int j = lo + it * BN + crow + 8 * x;
				sl[x] = j < hi ? (ld_pinned(pages + page_off + (j >> ps_shift)) << ps_shift) | (j & ps_mask) : -1;
			}
			if (it >= ST) mbar_wait(bar_free + 8 * half, (it / ST + 1) & 1);
#pragma unroll
			for (int x = 0; x < BN / 8; x++) {
				const bool ok = sl[x] >= 0;
				const char* src = kcol + (i64)(ok ? sl[x] : 0) * kst;
#if MLA_WG_DIAG != 1
#pragma unroll
				for (int p = 0; p < MLA_DK / 64; p++) cp_async16(dst0 + x * 8 * 128 + p * PANEL, src + p * 128, ok);
#endif
			}
			cp_async_commit();
			cp_async_wait<0>();
			fence_async_smem();
			if (!q_told) mbar_arrive(bar_q), q_told = true;
			mbar_arrive(bar_full + 8 * half);
		}
		cp_async_wait<0>();
		fence_async_smem();
		if (!q_told) mbar_arrive(bar_q);
		return;
	}

	// Consumers: wgmma gives warp w of a warpgroup rows 16w .. 16w+15;
	// accumulator o[dt·4 + 2x + e] is row 16w + gid + 8x, column (of the
	// warpgroup's 256) dt·8 + 2·tig + e; S's sv[nt·4 + 2x + e] likewise key
	// nt·8 + 2·tig + e.
	setmaxnreg_inc<F3_CONSUMER_REGS>();
	const int cw = wg - 1, warp = t >> 5, lane = t & 31, gid = lane >> 2, tig = lane & 3;
	float o[128];
#pragma unroll
	for (int i = 0; i < 128; i++) o[i] = 0.f;
	float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
	const float f = sm_scale * k_scale * L2E; // scores to base 2
	u32 pa[BN / 16][4];
	auto rescale_o = [&](const float (&alpha)[2]) {
		// Once the row maxima settle, most tiles leave O as it is.
		if (__any_sync(FULL_MASK, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
			for (int dt = 0; dt < 32; dt++) {
				o[dt * 4] *= alpha[0], o[dt * 4 + 1] *= alpha[0];
				o[dt * 4 + 2] *= alpha[1], o[dt * 4 + 3] *= alpha[1];
			}
		}
	};
	// O += P·V over this warpgroup's value panels 4cw .. 4cw+3 (N-major B:
	// LBO the next panel, SBO the next 8 keys).
	auto pv = [&](u32 kt) {
		reg_fence(o);
		wg_fence();
#if MLA_WG_DIAG != 2
#pragma unroll
		for (int kc = 0; kc < BN / 16; kc++) wg16<bf16_t>::rs(o, pa[kc], gmma_desc(kt + 4 * cw * PANEL + kc * 16 * 128, PANEL, 1024), 1);
#endif
		wg_commit();
		wg_wait<0>();
		reg_fence(o);
	};
	if (cw == 0) {
		if (n_tiles > 0) mbar_wait(bar_q, 0);
		for (int it = 0; it < n_tiles; it++) {
			const int s = it % ST;
			const u32 kt = ks0 + s * TILE;
			mbar_wait(bar_full + 8 * s, (it / ST) & 1);
			float sv[BN / 2];
			wg_fence();
#if MLA_WG_DIAG == 2
#pragma unroll
			for (int i = 0; i < BN / 2; i++) sv[i] = 0.f;
#else
#pragma unroll
			for (int kk = 0; kk < MLA_DK / 16; kk++) {
				const u32 koff = (kk >> 2) * PANEL + (kk & 3) * 32; // 16 columns = 32 bytes along a swizzled row
				wg16<bf16_t>::ss(sv, gmma_desc(qs + koff, 16, 1024), gmma_desc(kt + koff, 16, 1024), kk);
			}
#endif
			wg_commit();
			wg_wait<0>();
			reg_fence(sv);
			const int kb = lo + it * BN; // tiles start at lo: only the last runs past hi
			if (kb + BN > hi) {
#pragma unroll
				for (int i = 0; i < BN / 2; i++)
					if (kb + (i >> 2) * 8 + 2 * tig + (i & 1) >= hi) sv[i] = NEG_INF;
			}
			float alpha[2];
#pragma unroll
			for (int x = 0; x < 2; x++) {
				const float mx = wg_row_max<BN>(sv, x);
				const float m_new = fmaxf(m[x], mx); // finite: a tile's first key is below hi
				const float mu = m_new * f;
				alpha[x] = ex2(fmaf(m[x], f, -mu));
				float ls = 0.f;
#pragma unroll
				for (int nt = 0; nt < BN / 8; nt++) {
					const float p0 = ex2(fmaf(sv[nt * 4 + 2 * x], f, -mu)), p1 = ex2(fmaf(sv[nt * 4 + 2 * x + 1], f, -mu));
					sv[nt * 4 + 2 * x] = p0, sv[nt * 4 + 2 * x + 1] = p1;
					ls += p0 + p1;
				}
				l[x] = l[x] * alpha[x] + ls;
				m[x] = m_new;
			}
			rescale_o(alpha);
			wg_pack_p<bf16_t, BN>(pa, sv);
			if (it > 0) asm volatile("bar.sync 3, 256;\n" ::: "memory"); // consumer 1 read the last P
#pragma unroll
			for (int kc = 0; kc < BN / 16; kc++)
				asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(pfr + (kc * 128 + t) * 16), "r"(pa[kc][0]), "r"(pa[kc][1]),
				             "r"(pa[kc][2]), "r"(pa[kc][3])
				             : "memory");
			asm volatile("st.shared.v2.f32 [%0], {%1,%2};\n" ::"r"(afr + t * 8), "f"(alpha[0]), "f"(alpha[1]) : "memory");
			asm volatile("bar.arrive 2, 256;\n" ::: "memory"); // P ready
			pv(kt);
			mbar_arrive(bar_free + 8 * s);
		}
	} else {
		for (int it = 0; it < n_tiles; it++) {
			const int s = it % ST;
			mbar_wait(bar_full + 8 * s, (it / ST) & 1);
			asm volatile("bar.sync 2, 256;\n" ::: "memory"); // P ready
			float alpha[2];
#pragma unroll
			for (int kc = 0; kc < BN / 16; kc++)
				asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
				             : "=r"(pa[kc][0]), "=r"(pa[kc][1]), "=r"(pa[kc][2]), "=r"(pa[kc][3])
				             : "r"(pfr + (kc * 128 + t) * 16)
				             : "memory");
			asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];\n" : "=f"(alpha[0]), "=f"(alpha[1]) : "r"(afr + t * 8) : "memory");
			asm volatile("bar.arrive 3, 256;\n" ::: "memory"); // P read
			rescale_o(alpha);
			pv(ks0 + s * TILE);
			mbar_arrive(bar_free + 8 * s);
		}
	}

	// Row sums: consumer 0 holds them; consumer 1 takes each row's 1/l
	// where the factors were, once it read the last ones.
	float inv[2];
	if (cw == 0) {
		if (n_tiles > 0) asm volatile("bar.sync 3, 256;\n" ::: "memory");
#pragma unroll
		for (int x = 0; x < 2; x++) {
			float lx = l[x];
			lx += __shfl_xor_sync(FULL_MASK, lx, 1);
			lx += __shfl_xor_sync(FULL_MASK, lx, 2);
			l[x] = lx;
			inv[x] = lx > 0.f ? v_scale / lx : 0.f;
		}
		asm volatile("st.shared.v2.f32 [%0], {%1,%2};\n" ::"r"(afr + t * 8), "f"(inv[0]), "f"(inv[1]) : "memory");
		asm volatile("bar.arrive 4, 256;\n" ::: "memory");
	} else {
		asm volatile("bar.sync 4, 256;\n" ::: "memory");
		asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];\n" : "=f"(inv[0]), "=f"(inv[1]) : "r"(afr + t * 8) : "memory");
	}
#pragma unroll
	for (int x = 0; x < 2; x++) {
		const int head = h0 + warp * 16 + gid + 8 * x;
		if (head >= n_heads) continue;
		const i64 row = (i64)tok * n_heads + head;
#pragma unroll
		for (int dt = 0; dt < 32; dt++) {
			const int col = cw * 256 + dt * 8 + 2 * tig;
			const float v0 = o[dt * 4 + 2 * x] * inv[x], v1 = o[dt * 4 + 2 * x + 1] * inv[x];
			if (part_o != nullptr) {
				*(float2*)(part_o + ((i64)split * n_tokens * n_heads + row) * MLA_DV + col) = make_float2(v0, v1);
			} else {
				*(u32*)(out + (i64)tok * out_stride + (i64)head * MLA_DV + col) = pack_f2<bf16_t>(v0, v1);
			}
		}
		if (part_o != nullptr && cw == 0 && tig == 0)
			part_lse[(i64)split * n_tokens * n_heads + row] = l[x] > 0.f ? (m[x] * f + log2f(l[x])) / L2E : NEG_INF;
	}
}

#define ATTN_MLA_WG(si)                                                                                               \
	extern "C" __global__ void __launch_bounds__(MLA_WG_THREADS, 1) attn_mla_wg_##si(                                \
	    const bf16_t* q, i64 q_stride, const bf16_t* k_cache, const bf16_t* v_cache, i64 k_stride, i64 v_stride,       \
	    float k_scale, float v_scale, bf16_t* out, i64 out_stride, float* part_o, float* part_lse, const int* req,      \
	    const int* tok_req, const int* tok_hi, const int* pages, int page_size, int n_heads, int n_kv_heads,           \
	    float sm_scale, float softcap, int window, int n_splits, int chunk, int n_tokens, const bf16_t* k_new,          \
	    const bf16_t* v_new, i64 kn_stride, i64 vn_stride, const int* slots, float k_inv, float v_inv, int* counters) { \
		attn_mla_wg(q, q_stride, k_cache, k_stride, k_scale, v_scale, out, out_stride, part_o, part_lse, req, tok_req,  \
		            tok_hi, pages, page_size, n_heads, sm_scale, window, n_splits, chunk, n_tokens, k_new, kn_stride,   \
		            slots);                                                                                             \
	}
ATTN_MLA_WG(bf16)
#endif // __CUDA_ARCH_FEAT_SM90_ALL
