// The kernels of multi-head latent attention and mixtures of experts
// beyond the common ones: joining heads, a linear layer per head, the
// expert router, the sort of the routed pairs by expert, and the weighted
// adds that bring expert outputs back to their tokens. Activations are float32.

#define NEG_INF __int_as_float(0xff800000)
#define NO_INDEX 0x7fffffff
#define FULL_MASK 0xffffffffu

// concat_heads_f32: out[r, h] = a[r, h] ‖ b[r, h].
//
//	a: [rows, heads*da]   b: [rows, heads*db]   out: [rows, heads*(da+db)], all dense
//
// Launch: 1-D grid over the output elements.
extern "C" __global__ void concat_heads_f32(float* out, const float* a, const float* b, i64 rows, int heads, int da, int db) {
	const int w = da + db;
	FOR_EACH(i, rows * heads * w) {
		const i64 rh = i / w; // row·heads + head
		const int c = (int)(i - rh * w);
		out[i] = c < da ? a[rh * da + c] : b[rh * db + (c - da)];
	}
}

#define HL_TILE 32
#define HL_ROWS 8

// linear_tile accumulates one 32×32 tile (rows × outputs) of x·Wᵀ in acc,
// staging 32-wide slices of x and W in shared memory, so each weight is
// read once per 32 rows; the sum runs over in in order, in float32.
// Thread (tx, ty) of a (32, 8) block holds output o0+tx of rows ty,
// ty+8, ty+16 and ty+24.
//
//	x: rows r < nr at x + r·x_stride, in values each   w: [out, in]
template <typename W>
__device__ __forceinline__ void linear_tile(float (&acc)[HL_TILE / HL_ROWS], const float* x, i64 x_stride, int nr,
                                            const W* w, int o0, int out, int in) {
	__shared__ float xs[HL_TILE][HL_TILE + 1]; // [row][k]
	__shared__ float ws[HL_TILE][HL_TILE + 1]; // [output][k]
	const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
	for (int j = 0; j < HL_TILE / HL_ROWS; j++) acc[j] = 0.f;
	for (int k0 = 0; k0 < in; k0 += HL_TILE) {
		const int k = k0 + tx;
		for (int r = ty; r < HL_TILE; r += HL_ROWS) {
			const int o = o0 + r;
			xs[r][tx] = (r < nr && k < in) ? x[r * x_stride + k] : 0.f;
			ws[r][tx] = (o < out && k < in) ? to_f32(w[(i64)o * in + k]) : 0.f;
		}
		__syncthreads();
		const int kn = min(HL_TILE, in - k0);
		for (int kk = 0; kk < kn; kk++) {
			const float wv = ws[tx][kk];
#pragma unroll
			for (int j = 0; j < HL_TILE / HL_ROWS; j++) acc[j] += xs[ty + j * HL_ROWS][kk] * wv;
		}
		__syncthreads();
	}
}

// head_linear: one matrix per head, y_h = x_h·W_hᵀ.
//
//	x: [rows, heads*in] float32   w: [heads*out_h, in] (W_h is rows h·out_h…)   y: [rows, heads*out_h] float32
//
// Launch: grid (ceil(out_h/32), ceil(rows/32), heads), block (32, 8); a
// block computes one linear_tile of one head.
template <typename W>
__device__ __forceinline__ void head_linear(float* y, const float* x, const W* w, int rows, int heads, int in, int out_h) {
	const int h = blockIdx.z, o0 = blockIdx.x * HL_TILE, t0 = blockIdx.y * HL_TILE;
	const int tx = threadIdx.x, ty = threadIdx.y;
	const i64 x_stride = (i64)heads * in, y_stride = (i64)heads * out_h;
	float acc[HL_TILE / HL_ROWS];
	linear_tile<W>(acc, x + t0 * x_stride + (i64)h * in, x_stride, rows - t0, w + (i64)h * out_h * in, o0, out_h, in);
	const int o = o0 + tx;
	if (o >= out_h) return;
#pragma unroll
	for (int j = 0; j < HL_TILE / HL_ROWS; j++) {
		const int t = t0 + ty + j * HL_ROWS;
		if (t < rows) y[t * y_stride + (i64)h * out_h + o] = acc[j];
	}
}

#define HEAD_LINEAR(W, suffix)                                                                                 \
	extern "C" __global__ void head_linear_##suffix(float* y, const float* x, const W* w, int rows, int heads, \
	                                                 int in, int out_h) {                                       \
		head_linear<W>(y, x, w, rows, heads, in, out_h);                                                       \
	}
HEAD_LINEAR(float, f32)
HEAD_LINEAR(bf16_t, bf16)
HEAD_LINEAR(f16_t, f16)

// moe_linear: a mixture's routed experts over rows sorted by expert, each
// row through its own expert's matrix: y[r] = x[r]·W_eᵀ + b_e for the rows
// r of expert e. The host lists the work as tiles of up to 32 rows of one
// expert, so that one launch serves every expert a step chose.
//
//	x: [rows, in] float32   w: [n_experts] pointers to [out, in] matrices
//	bias: [n_experts] pointers to [out] float32 (bias null, or an entry null: none)
//	tiles: [n_tiles][3] int: expert, first row, rows (0..32; 0: no work)   y: [rows, out] float32
//
// Launch: grid (ceil(out/32), n_tiles), block (32, 8); a block computes
// one linear_tile of one expert.
template <typename W>
__device__ __forceinline__ void moe_linear(float* y, const float* x, const W* const* w, const float* const* bias,
                                           const int* tiles, int in, int out) {
	const int* tile = tiles + 3 * (i64)blockIdx.y;
	const int e = tile[0], r0 = tile[1], nr = tile[2];
	if (nr <= 0) return; // the whole block: an unused tile of moe_align's list
	const int o0 = blockIdx.x * HL_TILE;
	const int tx = threadIdx.x, ty = threadIdx.y;
	float acc[HL_TILE / HL_ROWS];
	linear_tile<W>(acc, x + (i64)r0 * in, in, nr, w[e], o0, out, in);
	const int o = o0 + tx;
	if (o >= out) return;
	const float* be = bias != 0 ? bias[e] : 0;
	const float b = be != 0 ? be[o] : 0.f;
#pragma unroll
	for (int j = 0; j < HL_TILE / HL_ROWS; j++) {
		const int r = ty + j * HL_ROWS;
		if (r < nr) y[(i64)(r0 + r) * out + o] = acc[j] + b;
	}
}

#define MOE_LINEAR(W, suffix)                                                                                    \
	extern "C" __global__ void moe_linear_##suffix(float* y, const float* x, const W* const* w,                 \
	                                                const float* const* bias, const int* tiles, int in, int out) { \
		moe_linear<W>(y, x, w, bias, tiles, in, out);                                                          \
	}
MOE_LINEAR(float, f32)
MOE_LINEAR(bf16_t, bf16)
MOE_LINEAR(f16_t, f16)

// moe_combine_f32: dst[t] += Σ_j weights[t·k+j]·src[pos[t·k+j]], each
// token's k expert outputs (rows of src, sorted by expert) weighted and
// added, in slot order, to its row.
//
//	dst: [T, width]   src: [T·k, width]   pos, weights: [T·k]
//
// Launch: grid T, threads over width.
extern "C" __global__ void moe_combine_f32(float* dst, const float* src, const int* pos, const float* weights, int k,
                                           int width) {
	const i64 t = blockIdx.x;
	float* d = dst + t * width;
	for (int c = threadIdx.x; c < width; c += blockDim.x) {
		float acc = d[c];
		for (int j = 0; j < k; j++) acc += weights[t * k + j] * src[(i64)pos[t * k + j] * width + c];
		d[c] = acc;
	}
}

// moe_sort sorts a step's (token, expert) pairs by expert on the device,
// in planExperts' order (experts ascending, a token's rows in token
// order within its expert), so that the grouped expert kernels
// (moe_gemv_glu, moe_gemv, moe_combine_f32) run with no read-back and a
// launch grid fixed by the step's shape: one tile per expert with rows,
// the list padded with empty tiles to n_tiles (= min(n_experts, pairs),
// its most entries).
//
//	experts: [pairs] int (pair t·k+j: token t's j-th choice; one outside [0, n_experts) (NaN logits) counts as expert 0)
//	order: [pairs] the token of each sorted row   pos: [pairs] the sorted row of each pair
//	tiles: [n_tiles][3] int: expert, first sorted row, rows; then (0, 0, 0)
//
// Launch: grid 1, a block of a multiple of 32 threads (the pairs placed at
// a time), dynamic shared memory 4·(n_experts + blockDim.x) bytes.
__device__ __forceinline__ int sort_expert(int e, int n_experts) { return e >= 0 && e < n_experts ? e : 0; }

// warp_scan2 turns a and b into their inclusive prefix sums over the
// warp's lanes (all 32 active).
__device__ __forceinline__ void warp_scan2(int& a, int& b) {
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		const int x = __shfl_up_sync(FULL_MASK, a, o), y = __shfl_up_sync(FULL_MASK, b, o);
		if (lane >= o) a += x, b += y;
	}
}

extern "C" __global__ void moe_sort(const int* experts, int* order, int* pos, int* tiles, int pairs, int n_experts, int k,
                                    int n_tiles) {
	extern __shared__ int sort_smem[];
	int* next = sort_smem;             // [n_experts]: the expert's rows; then its next free sorted row
	int* chunk = next + n_experts;     // [blockDim.x]: the experts of the chunk of pairs being placed
	const int tid = threadIdx.x, nt = blockDim.x;
	for (int e = tid; e < n_experts; e += nt) next[e] = 0;
	__syncthreads();
	for (int i = tid; i < pairs; i += nt) atomicAdd(&next[sort_expert(experts[i], n_experts)], 1);
	__syncthreads();
	if (tid < 32) {
		// Exclusive scans, by the first warp, of the rows (each expert's
		// first sorted row) and of the experts with rows (each one's
		// tile): lane l takes a run of per experts.
		const int per = (n_experts + 31) / 32;
		const int e0 = min(tid * per, n_experts), e1 = min(e0 + per, n_experts);
		int rows = 0, used = 0;
		for (int e = e0; e < e1; e++) rows += next[e], used += next[e] > 0;
		int rs = rows, us = used;
		warp_scan2(rs, us);
		int row = rs - rows, t = us - used;
		for (int e = e0; e < e1; e++) {
			const int c = next[e];
			if (c > 0) {
				tiles[3 * t] = e, tiles[3 * t + 1] = row, tiles[3 * t + 2] = c;
				t++;
			}
			next[e] = row;
			row += c;
		}
		const int used_all = __shfl_sync(FULL_MASK, us, 31);
		for (int i = used_all + tid; i < n_tiles; i += 32) tiles[3 * i] = 0, tiles[3 * i + 1] = 0, tiles[3 * i + 2] = 0;
	}
	__syncthreads();
	// The pairs are placed a chunk of blockDim.x at a time: a pair's row
	// is its expert's next free row plus the pairs of the chunk before it
	// with the same expert.
	for (int base = 0; base < pairs; base += nt) {
		const int i = base + tid;
		const int e = i < pairs ? sort_expert(experts[i], n_experts) : -1;
		chunk[tid] = e;
		__syncthreads();
		if (e >= 0) {
			int r = next[e];
			for (int j = 0; j < tid; j++) r += chunk[j] == e;
			order[r] = i / k;
			pos[i] = r;
		}
		__syncthreads();
		if (e >= 0) atomicAdd(&next[e], 1);
		__syncthreads();
	}
}

// moe_align sorts a step's (token, expert) pairs by expert for the
// grouped GEMMs of a step too large for moe_sort's streaming kernels
// (prefill): each expert's rows are contiguous, experts ascending, and
// cut into tiles of at most tile_rows rows, so that a GEMM block takes
// one tile and the grid (n_tiles tiles, its bound for the step's shape)
// does not depend on the routing. Within an expert the rows are in no
// particular order: a row's result does not depend on its neighbours.
//
//	experts: [pairs] int (pair t·k+j: token t's j-th choice; one outside [0, n_experts) counts as expert 0)
//	order: [pairs] the token of each sorted row   pos: [pairs] the sorted row of each pair
//	tiles: [n_tiles][3] int: expert, first sorted row, rows (1..tile_rows); then (0, 0, 0)
//
// n_tiles >= Σ_e ceil(rows_e / tile_rows) for every routing, which
// (pairs + min(n_experts, pairs)·(tile_rows − 1)) / tile_rows is.
// Launch: grid 1, a block of a multiple of 32 threads, dynamic shared
// memory 12·n_experts bytes.
extern "C" __global__ void moe_align(const int* experts, int* order, int* pos, int* tiles, int pairs, int n_experts, int k,
                                     int n_tiles, int tile_rows) {
	extern __shared__ int align_smem[];
	int* count = align_smem;           // [n_experts]: the expert's rows
	int* next = count + n_experts;     // [n_experts]: its first sorted row; then its next free one
	int* first = next + n_experts;     // [n_experts]: its first tile
	const int tid = threadIdx.x, nt = blockDim.x;
	for (int e = tid; e < n_experts; e += nt) count[e] = 0;
	__syncthreads();
	for (int i = tid; i < pairs; i += nt) atomicAdd(&count[sort_expert(experts[i], n_experts)], 1);
	__syncthreads();
	__shared__ int used_tiles;
	if (tid < 32) {
		// Exclusive scans, by the first warp, of the rows and of the
		// tiles: lane l takes a run of per experts.
		const int per = (n_experts + 31) / 32;
		const int e0 = min(tid * per, n_experts), e1 = min(e0 + per, n_experts);
		int rows = 0, nts = 0;
		for (int e = e0; e < e1; e++) rows += count[e], nts += (count[e] + tile_rows - 1) / tile_rows;
		int rs = rows, ts = nts;
		warp_scan2(rs, ts);
		int row = rs - rows, t = ts - nts;
		for (int e = e0; e < e1; e++) {
			next[e] = row, first[e] = t;
			row += count[e], t += (count[e] + tile_rows - 1) / tile_rows;
		}
		if (tid == 31) used_tiles = ts;
	}
	__syncthreads();
	for (int e = tid; e < n_experts; e += nt) {
		const int c = count[e], r0 = next[e], t0 = first[e];
		for (int j = 0; j * tile_rows < c && t0 + j < n_tiles; j++) {
			int* tile = tiles + 3 * (i64)(t0 + j);
			tile[0] = e, tile[1] = r0 + j * tile_rows, tile[2] = min(tile_rows, c - j * tile_rows);
		}
	}
	for (int i = used_tiles + tid; i < n_tiles; i += nt) tiles[3 * i] = 0, tiles[3 * i + 1] = 0, tiles[3 * i + 2] = 0;
	__syncthreads(); // every first row is read before the rows are taken
	for (int i = tid; i < pairs; i += nt) {
		const int r = atomicAdd(&next[sort_expert(experts[i], n_experts)], 1);
		order[r] = i / k;
		pos[i] = r;
	}
}

// sigmoid_gate_add_f32: dst[t] += sigmoid(gate[t])·src[t] (Qwen2-MoE's
// shared expert behind its one-logit gate).
//
//	dst, src: [T, width]   gate: [T] logits
//
// Launch: grid T, threads over width.
extern "C" __global__ void sigmoid_gate_add_f32(float* dst, const float* src, const float* gate, int width) {
	const i64 t = blockIdx.x;
	const float s = 1.f / (1.f + expf(-gate[t]));
	float* d = dst + t * width;
	const float* x = src + t * width;
	for (int c = threadIdx.x; c < width; c += blockDim.x) d[c] += s * x[c];
}

// scatter_add_rows_f32: dst[rows[i]] += scales[i]·src[i]. The rows are
// distinct, so no two blocks touch the same values.
//
//	dst: [*, width]   src: [n, width]   rows, scales: [n]
//
// Launch: grid n, threads over width.
extern "C" __global__ void scatter_add_rows_f32(float* dst, const float* src, const int* rows, const float* scales, int width) {
	const i64 i = blockIdx.x;
	const float s = scales[i];
	float* d = dst + (i64)rows[i] * width;
	const float* x = src + i * width;
	for (int c = threadIdx.x; c < width; c += blockDim.x) d[c] += s * x[c];
}

// better orders candidates: the higher value, then the lower index (a
// stable descending sort). NaN never wins.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

// warp_best is the index of the warp's best (value, index) pair, on every lane.
__device__ __forceinline__ int warp_best(float v, int i) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(FULL_MASK, v, o);
		const int oi = __shfl_xor_sync(FULL_MASK, i, o);
		if (better(ov, oi, v, i)) v = ov, i = oi;
	}
	return i;
}

__device__ __forceinline__ float route_warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
	return v;
}

// Flags of moe_route_f32 (device.Router's switches).
#define ROUTE_SOFTMAX 1
#define ROUTE_GROUPED 2
#define ROUTE_GROUP_MAX 4
#define ROUTE_NORM 8

// moe_route_f32 chooses top_k experts per token by device.Router's rule:
// scores (sigmoid or softmax), choice = score + bias, the best topk_groups
// groups (by the sum of their two best choices, or their best score), then
// the top_k choices among their experts, ties to the lower index; weights
// are the scores, normalised by their sum (in choice order) and scaled. An
// index that cannot be filled (NaN logits) is -1 with weight 0.
//
//	logits: [T, n_experts]   bias: [n_experts] or null   experts, weights: [T, top_k]
//
// Launch: grid T, block 32 (one warp per token), dynamic shared memory
// 4·(3·n_experts + 2·n_groups) bytes.
extern "C" __global__ void moe_route_f32(const float* logits, const float* bias, int* experts, float* weights, int n_experts,
                                         int top_k, int n_groups, int topk_groups, int flags, float scale) {
	extern __shared__ float route_smem[];
	float* score = route_smem;                     // [n_experts]
	float* choice = score + n_experts;             // [n_experts]
	float* gscore = choice + n_experts;            // [n_groups]
	int* out_of_play = (int*)(gscore + n_groups);  // [n_experts]: ineligible or already chosen
	int* gchosen = out_of_play + n_experts;        // [n_groups]
	const int lane = threadIdx.x;
	const i64 tok = blockIdx.x;
	const float* row = logits + tok * n_experts;

	if (flags & ROUTE_SOFTMAX) {
		float m = NEG_INF;
		for (int e = lane; e < n_experts; e += 32) m = fmaxf(m, row[e]);
		m = route_warp_max(m);
		float sum = 0.f;
		for (int e = lane; e < n_experts; e += 32) sum += expf(row[e] - m);
		sum = warp_sum(sum);
		for (int e = lane; e < n_experts; e += 32) score[e] = expf(row[e] - m) / sum;
	} else {
		for (int e = lane; e < n_experts; e += 32) score[e] = 1.f / (1.f + expf(-row[e]));
	}
	for (int e = lane; e < n_experts; e += 32) {
		choice[e] = score[e] + (bias ? bias[e] : 0.f);
		out_of_play[e] = 0;
	}
	__syncwarp();

	if (flags & ROUTE_GROUPED) {
		const int per = n_experts / n_groups;
		for (int g = lane; g < n_groups; g += 32) {
			float v;
			if (flags & ROUTE_GROUP_MAX) {
				v = NEG_INF;
				for (int j = 0; j < per; j++) v = fmaxf(v, score[g * per + j]);
			} else {
				float best = NEG_INF, second = NEG_INF;
				for (int j = 0; j < per; j++) {
					const float c = choice[g * per + j];
					if (c > best) second = best, best = c;
					else if (c > second) second = c;
				}
				v = per < 2 ? best : best + second;
			}
			gscore[g] = v;
			gchosen[g] = 0;
		}
		__syncwarp();
		for (int it = 0; it < topk_groups; it++) {
			float bv = NEG_INF;
			int bi = NO_INDEX;
			for (int g = lane; g < n_groups; g += 32)
				if (!gchosen[g] && better(gscore[g], g, bv, bi)) bv = gscore[g], bi = g;
			const int best = warp_best(bv, bi);
			if (lane == 0 && best != NO_INDEX) gchosen[best] = 1;
			__syncwarp();
		}
		for (int e = lane; e < n_experts; e += 32) out_of_play[e] = !gchosen[e / per];
		__syncwarp();
	}

	int* tok_experts = experts + tok * top_k;
	float* tok_weights = weights + tok * top_k;
	float sum = 0.f;
	for (int j = 0; j < top_k; j++) {
		float bv = NEG_INF;
		int bi = NO_INDEX;
		for (int e = lane; e < n_experts; e += 32)
			if (!out_of_play[e] && better(choice[e], e, bv, bi)) bv = choice[e], bi = e;
		const int best = warp_best(bv, bi);
		if (best != NO_INDEX) sum += score[best];
		if (lane == 0) {
			tok_experts[j] = best != NO_INDEX ? best : -1;
			tok_weights[j] = best != NO_INDEX ? score[best] : 0.f;
			if (best != NO_INDEX) out_of_play[best] = 1;
		}
		__syncwarp();
	}
	if (lane == 0) {
		for (int j = 0; j < top_k; j++) {
			float w = tok_weights[j];
			if (flags & ROUTE_NORM) w /= sum + 1e-20f;
			tok_weights[j] = w * scale;
		}
	}
}
