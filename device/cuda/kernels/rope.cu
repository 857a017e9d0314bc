// Rotary position embedding, in place on q and k.
//
//	q: [n_tokens, n_q_heads*head_dim ...] rows of q_stride elements
//	k: [n_tokens, n_kv_heads*head_dim ...] rows of k_stride elements (null if n_kv_heads == 0)
//	positions: [n_tokens] int32     inv_freq: [rot_dim/2] float
//
// The first rot_dim values of each head rotate (partial rotary leaves the
// rest). Pair i is (i, i + rot_dim/2) in rotate-half (NeoX) style, or
// (2i, 2i+1) in interleaved (GPT-J) style. Scaling schemes (llama3, yarn,
// linear, NTK) differ only in inv_freq, which the host computes; yarn's
// attention factor arrives as mscale, multiplying cos and sin.
//
// Launch: grid (n_tokens, n_q_heads + n_kv_heads), block up to rot_dim/2 threads.
template <typename T>
__device__ void rope(T* q, T* k, const int* positions, const float* inv_freq, int n_q_heads, int head_dim,
                     int rot_dim, i64 q_stride, i64 k_stride, int interleaved, float mscale) {
	int t = blockIdx.x, h = blockIdx.y;
	T* head = h < n_q_heads ? q + (i64)t * q_stride + (i64)h * head_dim
	                        : k + (i64)t * k_stride + (i64)(h - n_q_heads) * head_dim;
	float pos = (float)positions[t];
	int half = rot_dim / 2;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float s, c;
		// Full-range sincosf, not __sincosf: positions reach 10⁵ and more.
		sincosf(pos * inv_freq[i], &s, &c);
		s *= mscale;
		c *= mscale;
		int a = interleaved ? 2 * i : i;
		int b = interleaved ? 2 * i + 1 : i + half;
		float x0 = to_f32(head[a]), x1 = to_f32(head[b]);
		head[a] = from_f32<T>(x0 * c - x1 * s);
		head[b] = from_f32<T>(x0 * s + x1 * c);
	}
}

#define ROPE(suffix, T)                                                                                             \
	extern "C" __global__ void rope_##suffix(T* q, T* k, const int* positions, const float* inv_freq, int n_q_heads, \
	                                          int head_dim, int rot_dim, i64 q_stride, i64 k_stride, int interleaved, \
	                                          float mscale) {                                                      \
		rope<T>(q, k, positions, inv_freq, n_q_heads, head_dim, rot_dim, q_stride, k_stride, interleaved, mscale); \
	}
ROPE(f32, float)
ROPE(bf16, bf16_t)
ROPE(f16, f16_t)

// rope_<dt>_v8: rope of 16-bit q and k in rotate-half style, eight pairs
// a thread in 16-byte loads and stores, a block a token: its cos and sin
// are computed once into shared memory, not once per head. The arithmetic
// of rope (float32, one rounding a value), so the results are the same.
// rot_dim a multiple of 16; head_dim, q_stride and k_stride multiples of
// 8; q and k 16-byte aligned.
//
// Launch: grid (n_tokens), block a multiple of 32, shared rot_dim·4 bytes.
template <typename T>
__device__ void rope_v8(T* q, T* k, const int* positions, const float* inv_freq, int n_q_heads, int n_kv_heads,
                        int head_dim, int rot_dim, i64 q_stride, i64 k_stride, float mscale) {
	extern __shared__ float rope_smem[]; // cos of each pair, then sin
	const int t = blockIdx.x, half = rot_dim / 2;
	const float pos = (float)positions[t];
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float s, c;
		sincosf(pos * inv_freq[i], &s, &c);
		rope_smem[i] = c * mscale;
		rope_smem[half + i] = s * mscale;
	}
	__syncthreads();
	const int per_head = half / 8, n = (n_q_heads + n_kv_heads) * per_head;
	for (int w = threadIdx.x; w < n; w += blockDim.x) {
		const int h = w / per_head, i = (w - h * per_head) * 8;
		T* head = h < n_q_heads ? q + (i64)t * q_stride + (i64)h * head_dim
		                        : k + (i64)t * k_stride + (i64)(h - n_q_heads) * head_dim;
		uint4 a = *reinterpret_cast<const uint4*>(head + i);
		uint4 b = *reinterpret_cast<const uint4*>(head + i + half);
		T* av = reinterpret_cast<T*>(&a);
		T* bv = reinterpret_cast<T*>(&b);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const float c = rope_smem[i + j], s = rope_smem[half + i + j];
			const float x0 = to_f32(av[j]), x1 = to_f32(bv[j]);
			av[j] = from_f32<T>(x0 * c - x1 * s);
			bv[j] = from_f32<T>(x0 * s + x1 * c);
		}
		*reinterpret_cast<uint4*>(head + i) = a;
		*reinterpret_cast<uint4*>(head + i + half) = b;
	}
}

#define ROPE_V8(suffix, T)                                                                                        \
	extern "C" __global__ void rope_##suffix##_v8(T* q, T* k, const int* positions, const float* inv_freq,       \
	                                               int n_q_heads, int n_kv_heads, int head_dim, int rot_dim,     \
	                                               i64 q_stride, i64 k_stride, float mscale) {                  \
		rope_v8<T>(q, k, positions, inv_freq, n_q_heads, n_kv_heads, head_dim, rot_dim, q_stride, k_stride, mscale); \
	}
ROPE_V8(bf16, bf16_t)
ROPE_V8(f16, f16_t)
