// Embedding gather.
//
//	table: [vocab, hidden]   ids: [n_tokens] int32   out: [n_tokens, hidden]
//	out[t, :] = table[ids[t], :] * scale   (scale: Gemma's sqrt(hidden), else 1)
//
// An id outside [0, vocab) gives a zero row rather than a wild read.
// Launch: grid n_tokens, block up to 1024.
template <typename Tt, typename To>
__device__ void embedding(To* out, const Tt* table, const int* ids, int hidden, int vocab, float scale) {
	int t = blockIdx.x;
	int id = ids[t];
	To* o = out + (i64)t * hidden;
	if (id < 0 || id >= vocab) {
		for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = from_f32<To>(0.f);
		return;
	}
	const Tt* row = table + (i64)id * hidden;
	for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = from_f32<To>(to_f32(row[i]) * scale);
}

#define EMBEDDING(suffix, Tt, To)                                                                             \
	extern "C" __global__ void embedding_##suffix(To* out, const Tt* table, const int* ids, int hidden, int vocab, \
	                                               float scale) {                                                \
		embedding<Tt, To>(out, table, ids, hidden, vocab, scale);                                                 \
	}
EMBEDDING(f32_f32, float, float)
EMBEDDING(bf16_bf16, bf16_t, bf16_t)
EMBEDDING(f16_f16, f16_t, f16_t)
EMBEDDING(bf16_f32, bf16_t, float)
EMBEDDING(f16_f32, f16_t, float)
