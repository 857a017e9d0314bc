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


// Random sampling: temperature, top-k, top-p and min-p, one block per row.
//
//	logits: rows of stride elements    params: [n, SAMPLE_WORDS] int32    out: [n] int32
//	masks: [n_masks, mask_words] uint32 (null when no row has one)
//
// params row r: the logits row, then temperature, top_k, top_p, min_p (the
// floats as their bits), seed (low, high), step (low, high), and the index
// of the row's token mask in masks (-1: none). Go normalises them
// (sample.go): temperature > 0 samples, anything else is greedy; top_k <= 0
// and top_p >= 1 and min_p <= 0 are off.
//
// A token mask (structured output) has bit i & 31 of word i >> 5 set for
// each token the row may draw; every other logit reads as -inf before any
// filter, the host's constraint.Mask, so greedy rows argmax over the allowed
// tokens and the filters renormalise over them.
//
// The filters are the host sampler's (sample/sampler.go), in its order, on
// the weights w = exp((x - max) / T): top-k keeps exactly k tokens (ties at
// the k-th place go to the lower id); top-p keeps the shortest prefix of the
// order (w desc, id asc) of the top-k set whose mass reaches top_p of the
// top-k mass (a token is kept while the mass strictly ahead of it is below
// that); min-p keeps w >= min_p (the largest kept weight is exactly 1).
// Every filter keeps a prefix of that order, so no sort is needed: each
// prefix is found by bisection over the 32-bit ordered keys of the logits,
// one pass over the row per step, the last tied key cut by id.
//
// The draw is an exponential race (Gumbel-max): the kept token with the
// largest log w - log E_i wins, E_i ~ Exp(1) from Philox4x32-10 keyed by the
// seed with counter (token id, step), so a (seed, step) pair picks the same
// token in any batch, at any row. It is the host sampler's distribution,
// not its random stream.
//
// Greedy rows (and top_k 1, and rows with nothing above -inf) take the
// argmax with the host's rules. Launch: grid n, block 1024 (its launch
// bounds: the compiler keeps it within 64 registers a thread).
// SAMPLE_WORDS, generated from kernels.decl.
#include "cuda_gen.cuh"

// A total order of the non-NaN floats as unsigned integers (-0 = +0).
__device__ __forceinline__ unsigned ordered_key(float x) {
	unsigned u = __float_as_uint(x == 0.f ? 0.f : x);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_float(unsigned k) {
	return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ int block_sum_int(int v) {
	__shared__ int part[32];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
	__syncthreads();
	int s = 0, nwarps = blockDim.x >> 5;
	for (int w = 0; w < nwarps; w++) s += part[w];
	return s;
}

__device__ __forceinline__ double block_sum_double(double v) {
	__shared__ double part[32];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
	__syncthreads();
	double s = 0;
	int nwarps = blockDim.x >> 5;
	for (int w = 0; w < nwarps; w++) s += part[w];
	return s;
}

// block_min_max reduces lo by min and hi by max over the block.
__device__ __forceinline__ void block_min_max(unsigned& lo, unsigned& hi) {
	__shared__ unsigned plo[32], phi[32];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
		hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
	}
	__syncthreads();
	if ((threadIdx.x & 31) == 0) {
		plo[threadIdx.x >> 5] = lo;
		phi[threadIdx.x >> 5] = hi;
	}
	__syncthreads();
	int nwarps = blockDim.x >> 5;
	for (int w = 0; w < nwarps; w++) {
		lo = min(lo, plo[w]);
		hi = max(hi, phi[w]);
	}
}

// block_best reduces (value, index) pairs with better(): the largest value,
// the lowest index on ties.
__device__ __forceinline__ void block_best(float& bv, int& bi) {
	__shared__ float sv[32];
	__shared__ int si[32];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		better(bv, bi, ov, oi);
	}
	__syncthreads();
	if ((threadIdx.x & 31) == 0) {
		sv[threadIdx.x >> 5] = bv;
		si[threadIdx.x >> 5] = bi;
	}
	__syncthreads();
	int nwarps = blockDim.x >> 5;
	for (int w = 0; w < nwarps; w++) better(bv, bi, sv[w], si[w]);
}

// masked_logit is logit i of row as the filters see it: -inf where the
// row's token mask (bit i & 31 of word i >> 5; null: none) clears its bit,
// so a constrained row only ever draws, or argmaxes to, allowed tokens.
template <typename T>
__device__ __forceinline__ float masked_logit(const T* row, const unsigned* mask, int i) {
	if (mask != 0 && !((mask[i >> 5] >> (i & 31)) & 1u)) return -__int_as_float(0x7f800000);
	return to_f32(row[i]);
}

// row_mask is the token mask of params row p (word 9: its index among the
// masks of mask_words words each; -1: none).
__device__ __forceinline__ const unsigned* row_mask(const int* p, const unsigned* masks, int mask_words) {
	return p[9] < 0 ? (const unsigned*)0 : masks + (i64)p[9] * mask_words;
}

// row_best is the block's best (value, index) over row[lo, hi), masked: each
// thread scans a strided share keeping its first largest value (strict >,
// which also skips NaN), then block_best.
template <typename T>
__device__ __forceinline__ void row_best(const T* row, const unsigned* mask, int lo, int hi, float& bv, int& bi) {
	bv = -__int_as_float(0x7f800000); // -inf
	bi = NO_INDEX;
	for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
		const float v = masked_logit(row, mask, i);
		if (v > bv) {
			bv = v;
			bi = i;
		}
	}
	block_best(bv, bi);
}

template <typename T>
__device__ void argmax(int* out, const T* logits, int vocab, i64 stride) {
	float bv;
	int bi;
	row_best(logits + (i64)blockIdx.x * stride, (const unsigned*)0, 0, vocab, bv, bi);
	if (threadIdx.x == 0) out[blockIdx.x] = bi == NO_INDEX ? 0 : bi;
}

#define ARGMAX(suffix, T)                                                                             \
	extern "C" __global__ void argmax_##suffix(int* out, const T* logits, int vocab, i64 stride) { \
		argmax<T>(out, logits, vocab, stride);                                                       \
	}
ARGMAX(f32, float)
ARGMAX(bf16, bf16_t)
ARGMAX(f16, f16_t)

// nth_with_key is the id of the n-th (from 0) token of the row, in id
// order, whose masked logit has ordered key key; vocab when there are fewer.
template <typename T>
__device__ int nth_with_key(const T* row, const unsigned* mask, int vocab, unsigned key, int n) {
	__shared__ int counts[32];
	__shared__ int found;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	__syncthreads(); // found may still be read by a previous call
	if (threadIdx.x == 0) found = vocab;
	int before = 0; // matches in earlier tiles, the same in every thread
	for (int base = 0; base < vocab && before <= n; base += blockDim.x) {
		int i = base + threadIdx.x;
		bool hit = false;
		if (i < vocab) {
			float x = masked_logit(row, mask, i);
			hit = x == x && ordered_key(x) == key;
		}
		unsigned ballot = __ballot_sync(0xffffffffu, hit);
		__syncthreads(); // counts of the previous tile are read
		if (lane == 0) counts[warp] = __popc(ballot);
		__syncthreads();
		int rank = before + __popc(ballot & ((1u << lane) - 1u)), total = 0;
		for (int w = 0; w < nwarps; w++) {
			if (w < warp) rank += counts[w];
			total += counts[w];
		}
		if (hit && rank == n) found = i;
		before += total;
	}
	__syncthreads();
	return found;
}

// Philox4x32-10 (Salmon et al., 2011): the first word of the block for
// counter (c0, c1, c2, c3) and key (k0, k1).
__device__ __forceinline__ unsigned philox_4x32_10(unsigned c0, unsigned c1, unsigned c2, unsigned c3, unsigned k0, unsigned k1) {
#pragma unroll
	for (int round = 0; round < 10; round++) {
		unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
		unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
		c0 = hi1 ^ c1 ^ k0;
		c1 = lo1;
		c2 = hi0 ^ c3 ^ k1;
		c3 = lo0;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
	return c0;
}

// Tokens whose log weight is below this never win the race: the max token
// scores at least -log(E_max) = -log(24 ln 2) > -2.82, and any token at most
// its log weight - log(E_min) = log weight + 24 ln 2 < log weight + 16.7.
#define RACE_FLOOR -20.f

// RowFilter is what the filters keep of one row: its max and argmax, and
// the cuts of top-k and top-p with the parameters that weigh and cut
// (row_filter finds them). Greedy rows (temperature 0, top-k 1, nothing
// above -inf) take am, and the other fields are unset.
struct RowFilter {
	float m;     // the largest masked logit (-inf: none)
	int am;      // its lowest id (NO_INDEX: none)
	bool greedy; // the row takes the argmax
	bool inf_max; // +inf logits: the +inf tokens share all the mass
	float inv_t, min_p;
	bool use_k, use_p;
	unsigned kk, kp; // the keys of top-k's and top-p's last kept tokens
	int cut_k, cut_p; // ids above these with key kk (kp) are dropped

	__device__ __forceinline__ float log_weight(float x) const {
		if (inf_max) return x == m ? 0.f : -__int_as_float(0x7f800000);
		return (x - m) * inv_t;
	}
	__device__ __forceinline__ bool in_k(unsigned k, int i) const { return !use_k || k > kk || (k == kk && i <= cut_k); }
	__device__ __forceinline__ bool in_p(unsigned k, int i) const { return !use_p || k > kp || (k == kp && i <= cut_p); }
	// kept_lw is the log weight of token i (masked logit x) when every
	// filter keeps it and it is at least lo, else -inf (NaN too). The
	// cheap lo test comes first: the race passes its floor.
	__device__ __forceinline__ float kept_lw(float x, int i, float lo) const {
		const float NEG_INF = -__int_as_float(0x7f800000);
		if (x != x) return NEG_INF;
		const float lw = log_weight(x);
		if (!(lw >= lo)) return NEG_INF;
		if (min_p > 0.f && !(expf(lw) >= min_p)) return NEG_INF;
		const unsigned k = ordered_key(x);
		if (!in_k(k, i) || !in_p(k, i)) return NEG_INF;
		return lw;
	}
};

// row_filter runs the filters of params row p over row (masked by mask):
// the max and argmax, then top-k's and top-p's bisections. Every thread
// of the block calls it and gets the same RowFilter.
template <typename T>
__device__ RowFilter row_filter(const T* row, const unsigned* mask, const int* p, int vocab) {
	const float NEG_INF = -__int_as_float(0x7f800000);
	const float temperature = __int_as_float(p[1]);
	const int top_k = p[2];
	const float top_p = __int_as_float(p[3]);
	RowFilter f;
	f.min_p = __int_as_float(p[4]);
	f.use_k = f.use_p = f.inf_max = false;
	f.kk = f.kp = 0;
	f.inv_t = 1.f;

	// The max (the argmax, for greedy rows) and the NaN count.
	float m = NEG_INF;
	int am = NO_INDEX, nans = 0;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
		float x = masked_logit(row, mask, i);
		nans += x != x;
		if (x > m) {
			m = x;
			am = i;
		}
	}
	block_best(m, am);
	nans = block_sum_int(nans);
	f.m = m;
	f.am = am;
	f.cut_k = f.cut_p = vocab;
	f.greedy = !(temperature > 0.f) || top_k == 1 || !(m > NEG_INF);
	if (f.greedy) return f;
	// With +inf logits the +inf tokens share all the mass equally (the
	// limit of softmax) and, as on the host, top-k does not apply.
	f.inf_max = m == -NEG_INF;
	f.inv_t = 1.f / temperature;
	const int valid = vocab - nans;
	const unsigned top_key = ordered_key(m);

	// Top-k: kk is the largest key with count(key >= kk) >= top_k, found by
	// bisection on [lo, hi) with count(>= lo) >= top_k > count(>= hi); each
	// pass moves a bound onto a key present in the row.
	f.use_k = top_k > 0 && top_k < valid && !f.inf_max;
	if (f.use_k) {
		unsigned lo = 0, hi = top_key + 1u;
		int c_lo = valid, c_hi = 0;
		while (hi - lo > 1u) {
			unsigned mid = lo + (hi - lo) / 2u, above = 0xffffffffu, below = 0u;
			int c = 0;
			for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
				float x = masked_logit(row, mask, i);
				if (x != x) continue;
				unsigned k = ordered_key(x);
				if (k >= mid) {
					c++;
					if (k < hi) above = min(above, k);
				} else if (k >= lo) {
					below = max(below, k);
				}
			}
			c = block_sum_int(c);
			block_min_max(above, below);
			if (c >= top_k) {
				lo = above != 0xffffffffu ? above : mid;
				c_lo = c;
			} else {
				hi = below >= lo && below < mid ? below + 1u : mid;
				c_hi = c;
			}
		}
		f.kk = lo;
		int allow = top_k - c_hi; // how many tokens tied at kk stay
		if (c_lo - c_hi > allow) f.cut_k = nth_with_key(row, mask, vocab, f.kk, allow - 1);
	}

	// Top-p, the same bisection with the mass of the top-k set.
	f.use_p = top_p < 1.f;
	if (f.use_p) {
		double z = 0;
		for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
			float x = masked_logit(row, mask, i);
			if (x == x && f.in_k(ordered_key(x), i)) z += (double)expf(f.log_weight(x));
		}
		z = block_sum_double(z);
		const double target = (double)top_p * z;
		unsigned lo = f.use_k ? f.kk : 0u, hi = top_key + 1u;
		double m_hi = 0;
		int c_lo = -1, c_hi = 0; // c_lo -1: not counted yet
		while (hi - lo > 1u) {
			unsigned mid = lo + (hi - lo) / 2u, above = 0xffffffffu, below = 0u;
			double mass = 0;
			int c = 0;
			for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
				float x = masked_logit(row, mask, i);
				if (x != x) continue;
				unsigned k = ordered_key(x);
				if (!f.in_k(k, i)) continue;
				if (k >= mid) {
					c++;
					mass += (double)expf(f.log_weight(x));
					if (k < hi) above = min(above, k);
				} else if (k >= lo) {
					below = max(below, k);
				}
			}
			c = block_sum_int(c);
			mass = block_sum_double(mass);
			block_min_max(above, below);
			if (mass >= target) {
				lo = above != 0xffffffffu ? above : mid;
				c_lo = c;
			} else {
				hi = below >= lo && below < mid ? below + 1u : mid;
				m_hi = mass;
				c_hi = c;
			}
		}
		f.kp = lo;
		if (c_lo < 0) { // lo never moved: count the top-k set
			c_lo = 0;
			for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
				float x = masked_logit(row, mask, i);
				if (x == x && f.in_k(ordered_key(x), i)) c_lo++;
			}
			c_lo = block_sum_int(c_lo);
		}
		// Tokens tied at kp (in the top-k set) stay while the mass ahead of
		// them is below the target: the first ceil((target - m_hi) / w).
		int ties = c_lo - c_hi;
		double w = (double)expf(f.log_weight(key_float(f.kp)));
		int keep = ties;
		if (w > 0) keep = (int)fmin((double)ties, fmax(1.0, ceil((target - m_hi) / w)));
		if (keep < ties) f.cut_p = nth_with_key(row, mask, vocab, f.kp, keep - 1);
	}
	return f;
}

// race_exp is the race's Exp(1) variate of token i: -log(1 - u) with
// u in (0, 1) from Philox4x32-10 keyed by the seed, counter (i, step, 0).
__device__ __forceinline__ float race_exp(int i, unsigned step_lo, unsigned step_hi, unsigned seed_lo, unsigned seed_hi) {
	unsigned bits = philox_4x32_10((unsigned)i, step_lo, step_hi, 0u, seed_lo, seed_hi);
	float u = (float)(2u * (bits >> 9) + 1u) * 0x1p-24f; // (0, 1), never 0 or 1
	return -log1pf(-u);
}

template <typename T>
__device__ void sample_rows(int* out, const T* logits, const int* params, const unsigned* masks, int mask_words,
                            int vocab, i64 stride) {
	const float NEG_INF = -__int_as_float(0x7f800000);
	const int* p = params + (i64)blockIdx.x * SAMPLE_WORDS;
	const T* row = logits + (i64)p[0] * stride;
	const unsigned* mask = row_mask(p, masks, mask_words);
	const unsigned seed_lo = (unsigned)p[5], seed_hi = (unsigned)p[6];
	const unsigned step_lo = (unsigned)p[7], step_hi = (unsigned)p[8];

	const RowFilter f = row_filter(row, mask, p, vocab);
	if (f.greedy) {
		if (threadIdx.x == 0) out[blockIdx.x] = f.am == NO_INDEX ? 0 : f.am;
		return;
	}
	// The race over the kept tokens.
	float best = NEG_INF;
	int bi = NO_INDEX;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
		float lw = f.kept_lw(masked_logit(row, mask, i), i, RACE_FLOOR);
		if (!(lw >= RACE_FLOOR)) continue;
		float score = lw - logf(race_exp(i, step_lo, step_hi, seed_lo, seed_hi));
		if (score > best || (score == best && i < bi)) {
			best = score;
			bi = i;
		}
	}
	block_best(best, bi);
	if (threadIdx.x == 0) out[blockIdx.x] = bi != NO_INDEX ? bi : f.am;
}

#define SAMPLE(suffix, T)                                                                                              \
	extern "C" __global__ void __launch_bounds__(1024)                                                             \
	    sample_##suffix(int* out, const T* logits, const int* params, const unsigned* masks, int mask_words,      \
	                    int vocab, i64 stride) {                                                                   \
		sample_rows<T>(out, logits, params, masks, mask_words, vocab, stride);                                     \
	}
SAMPLE(f32, float)
SAMPLE(bf16, bf16_t)
SAMPLE(f16, f16_t)

// Speculative verification of draft-tree nodes, one block per node.
//
//	logits: rows of stride elements    params: [n, SAMPLE_WORDS] int32 (sample_*'s, word 9 -1: no masks)
//	drafts: [n, VERIFY_DRAFTS] int32   out: [n, 2] int32
//
// drafts row r: the tokens drafted as node r's children, in the drafter's
// order, then -1s. out row r: the index in drafts of the accepted child
// (-1: none) and the token emitted, the accepted draft or the residual
// draw. The rule is sample.Sampler.Verify's (SpecInfer's multi-round
// rejection with deterministic drafts) on row_filter's distribution p,
// the one sample_* draws from: draft j is tried with u_j and accepted when
// u_j · (1 - Σ p of the drafts tried before it) < p_j, a rejected draft's
// mass leaving the pool; a draft the filters drop (p 0) is always
// rejected. When every draft is rejected, the token is the race of sample_*
// over the kept tokens less the rejected drafts (Gumbel-max over the
// residual is a draw from the renormalised residual); when rounding left
// no mass, the last draft tried with mass is accepted, as on the host.
// Greedy rows take the argmax and accept the child that drafted it.
//
// u_j comes from Philox4x32-10 keyed by the seed with counter (j, step,
// 1), the race from counter (token id, step, 0), as sample_*: a node with
// no drafts draws exactly sample_*'s token for its (seed, step). A node's
// step is its depth past the request's output count, so the decisions
// along any one path of a tree use distinct steps, and every node is
// decided on its own, in one launch: walking the path through these
// verdicts draws from the same distribution as deciding node after node.
// Launch: grid n, block 1024.
template <typename T>
__device__ void spec_verify_rows(int* out, const T* logits, const int* params, const int* drafts, int vocab,
                                 i64 stride) {
	const float NEG_INF = -__int_as_float(0x7f800000);
	const int* p = params + (i64)blockIdx.x * SAMPLE_WORDS;
	const int* d = drafts + (i64)blockIdx.x * VERIFY_DRAFTS;
	const T* row = logits + (i64)p[0] * stride;
	const unsigned* mask = (const unsigned*)0;
	const unsigned seed_lo = (unsigned)p[5], seed_hi = (unsigned)p[6];
	const unsigned step_lo = (unsigned)p[7], step_hi = (unsigned)p[8];
	int n = 0;
	while (n < VERIFY_DRAFTS && d[n] >= 0) n++;

	const RowFilter f = row_filter(row, mask, p, vocab);
	int child = -1;
	if (f.greedy) {
		const int token = f.am == NO_INDEX ? 0 : f.am;
		for (int j = 0; j < n; j++) {
			if (d[j] == token) {
				child = j;
				break;
			}
		}
		if (threadIdx.x == 0) {
			out[2 * blockIdx.x] = child;
			out[2 * blockIdx.x + 1] = token;
		}
		return;
	}
	// z: the unnormalised mass of the kept tokens (the max weighs 1).
	double z = 0;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) z += (double)expf(f.kept_lw(masked_logit(row, mask, i), i, NEG_INF));
	z = block_sum_double(z);

	// The drafts, in every thread alike (z is the same in each): bit j of
	// rejected marks draft j tried with mass and rejected.
	double total = z;
	unsigned rejected = 0u;
	int last_kept = -1;
	for (int j = 0; j < n; j++) {
		const unsigned bits = philox_4x32_10((unsigned)j, step_lo, step_hi, 1u, seed_lo, seed_hi);
		const double u = (double)(2u * (bits >> 9) + 1u) * 0x1p-24; // (0, 1)
		const int id = d[j];
		if (id >= vocab) continue;
		const double w = (double)expf(f.kept_lw(masked_logit(row, mask, id), id, NEG_INF));
		if (!(w > 0)) continue; // probability 0: always rejected
		last_kept = j;
		if (u * total < w) {
			child = j;
			break;
		}
		total -= w;
		rejected |= 1u << j;
	}
	if (child >= 0) {
		if (threadIdx.x == 0) {
			out[2 * blockIdx.x] = child;
			out[2 * blockIdx.x + 1] = d[child];
		}
		return;
	}
	auto is_rejected = [&](int i) -> bool {
		for (int j = 0; j < n; j++) {
			if (((rejected >> j) & 1u) && d[j] == i) return true;
		}
		return false;
	};
	// The residual's largest log weight sets the race's floor (the max
	// token of the row may be a rejected draft).
	float mr = NEG_INF;
	int mi = NO_INDEX;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
		const float lw = f.kept_lw(masked_logit(row, mask, i), i, NEG_INF);
		if (lw > mr && !is_rejected(i)) {
			mr = lw;
			mi = i;
		}
	}
	block_best(mr, mi);
	if (!(mr > NEG_INF)) {
		// Every kept token was drafted and rejected, which only rounding
		// can cause: accept the last one tried (last_kept >= 0, since the
		// max token weighs 1).
		if (threadIdx.x == 0) {
			out[2 * blockIdx.x] = last_kept;
			out[2 * blockIdx.x + 1] = last_kept >= 0 ? d[last_kept] : (f.am == NO_INDEX ? 0 : f.am);
		}
		return;
	}
	const float race_floor = mr + RACE_FLOOR;
	float best = NEG_INF;
	int bi = NO_INDEX;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
		const float lw = f.kept_lw(masked_logit(row, mask, i), i, race_floor);
		if (!(lw >= race_floor) || is_rejected(i)) continue;
		const float score = lw - logf(race_exp(i, step_lo, step_hi, seed_lo, seed_hi));
		if (score > best || (score == best && i < bi)) {
			best = score;
			bi = i;
		}
	}
	block_best(best, bi);
	if (threadIdx.x == 0) {
		out[2 * blockIdx.x] = -1;
		out[2 * blockIdx.x + 1] = bi != NO_INDEX ? bi : mi;
	}
}

#define SPEC_VERIFY(suffix, T)                                                                                         \
	extern "C" __global__ void __launch_bounds__(1024)                                                             \
	    spec_verify_##suffix(int* out, const T* logits, const int* params, const int* drafts, int vocab, i64 stride) { \
		spec_verify_rows<T>(out, logits, params, drafts, vocab, stride);                                           \
	}
SPEC_VERIFY(f32, float)
SPEC_VERIFY(bf16, bf16_t)
SPEC_VERIFY(f16, f16_t)

// Greedy rows over a long vocabulary, in two launches: one block per row
// (sample_*) would read the whole row alone, at one block's bandwidth.
// argmax_part reduces chunk logits of each row per block (grid (n_rows,
// n_parts), block 256), argmax_final each row's parts (grid n_rows, block
// 32); the same rule as argmax: the largest value, the lowest id on ties,
// NaN skipped, 0 when nothing is above -inf.
//
//	params, masks: the sample_* parameter block and token masks
//	part_v, part_i: [n_rows, n_parts]
template <typename T>
__device__ void argmax_part(float* part_v, int* part_i, const T* logits, const int* params, const unsigned* masks,
                            int mask_words, int vocab, i64 stride, int chunk) {
	const int lo = blockIdx.y * chunk;
	const int* p = params + (i64)blockIdx.x * SAMPLE_WORDS;
	float bv;
	int bi;
	row_best(logits + (i64)p[0] * stride, row_mask(p, masks, mask_words), lo, min(vocab, lo + chunk), bv, bi);
	if (threadIdx.x == 0) {
		part_v[blockIdx.x * gridDim.y + blockIdx.y] = bv;
		part_i[blockIdx.x * gridDim.y + blockIdx.y] = bi;
	}
}

#define ARGMAX_PART(suffix, T)                                                                                \
	extern "C" __global__ void argmax_part_##suffix(float* part_v, int* part_i, const T* logits, const int* params, \
	                                                 const unsigned* masks, int mask_words, int vocab, i64 stride, \
	                                                 int chunk) {                                               \
		argmax_part<T>(part_v, part_i, logits, params, masks, mask_words, vocab, stride, chunk);            \
	}
ARGMAX_PART(f32, float)
ARGMAX_PART(bf16, bf16_t)
ARGMAX_PART(f16, f16_t)

extern "C" __global__ void argmax_final(int* out, const float* part_v, const int* part_i, int n_parts) {
	float bv = -__int_as_float(0x7f800000);
	int bi = NO_INDEX;
	for (int p = threadIdx.x; p < n_parts; p += 32) better(bv, bi, part_v[blockIdx.x * n_parts + p], part_i[blockIdx.x * n_parts + p]);
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		better(bv, bi, ov, oi);
	}
	if (threadIdx.x == 0) out[blockIdx.x] = bi == NO_INDEX ? 0 : bi;
}
