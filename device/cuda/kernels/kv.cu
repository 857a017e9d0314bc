// Store the new tokens' keys and values into the paged KV pool.
//
//	k, v:             [n_tokens, kv_width] rows of k_stride / v_stride elements
//	slots:            [n_tokens] int32, token-granular (page*page_size + offset)
//	k_cache, v_cache: [n_slots, kv_width] dense, kv_width = n_kv_heads*head_dim
//
// k_cache[slots[t], :] = k[t, :] and likewise v. A negative slot is skipped:
// padded rows of a graph-captured batch write nowhere.
// Launch: grid n_tokens, block up to 1024.
template <typename Ti, typename Tc>
__device__ void kv_store(Tc* k_cache, Tc* v_cache, const Ti* k, const Ti* v, const int* slots, int kv_width,
                         i64 k_stride, i64 v_stride) {
	int t = blockIdx.x;
	int slot = slots[t];
	if (slot < 0) return;
	Tc* kc = k_cache + (i64)slot * kv_width;
	Tc* vc = v_cache + (i64)slot * kv_width;
	const Ti* kr = k + (i64)t * k_stride;
	const Ti* vr = v + (i64)t * v_stride;
	for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
		kc[i] = from_f32<Tc>(to_f32(kr[i]));
		vc[i] = from_f32<Tc>(to_f32(vr[i]));
	}
}

#define KV_STORE(suffix, Ti, Tc)                                                                              \
	extern "C" __global__ void kv_store_##suffix(Tc* k_cache, Tc* v_cache, const Ti* k, const Ti* v,          \
	                                              const int* slots, int kv_width, i64 k_stride, i64 v_stride) { \
		kv_store<Ti, Tc>(k_cache, v_cache, k, v, slots, kv_width, k_stride, v_stride);                        \
	}
KV_STORE(f32_f32, float, float)
KV_STORE(bf16_bf16, bf16_t, bf16_t)
KV_STORE(f16_f16, f16_t, f16_t)
KV_STORE(f32_bf16, float, bf16_t)
KV_STORE(f32_f16, float, f16_t)
