// Gated activations and the logit soft-cap.
//
//	gate, up: [n_tokens, inter] rows of in_stride elements
//	out:      [n_tokens, inter] dense (may alias gate when in_stride == inter)
//	silu_mul:      out = gate * sigmoid(gate) * up
//	gelu_tanh_mul: out = gelu_tanh(gate) * up
//
// A fused gate_up projection [n_tokens, 2*inter] is gate = base,
// up = base + inter, in_stride = 2*inter (SGLang's silu_and_mul layout).
// Launch: 1-D grid over n_tokens*inter elements.
// silu and gelu_tanh are in common.cuh (gemv.cu stages silu(x)·x2 too).

#define GATED(name, fn, suffix, T)                                                                         \
	extern "C" __global__ void name##_##suffix(T* out, const T* gate, const T* up, i64 n_tokens, int inter, \
	                                            i64 in_stride) {                                          \
		FOR_EACH(i, n_tokens * inter) {                                                                    \
			i64 t = i / inter;                                                                             \
			int c = (int)(i - t * inter);                                                                  \
			float g = to_f32(gate[t * in_stride + c]), u = to_f32(up[t * in_stride + c]);                  \
			out[i] = from_f32<T>(fn(g) * u);                                                               \
		}                                                                                                  \
	}
GATED(silu_mul, silu, f32, float)
GATED(silu_mul, silu, bf16, bf16_t)
GATED(silu_mul, silu, f16, f16_t)
GATED(gelu_tanh_mul, gelu_tanh, f32, float)
GATED(gelu_tanh_mul, gelu_tanh, bf16, bf16_t)
GATED(gelu_tanh_mul, gelu_tanh, f16, f16_t)

// <name>_f32_to_<To>: float32 gate and up, out [n_tokens, inter] dense in
// To (the down projection's 16-bit input), rounded once as a separate
// conversion would. Four values per thread (inter and in_stride multiples
// of 4, 16-byte aligned rows); grid (ceil(inter/4/256), min(n_tokens,
// 65535)), block 256, blocks stride over the tokens.
#define GATED_TO(name, fn, suffix, To)                                                                             \
	extern "C" __global__ void name##_f32_to_##suffix(To* out, const float* gate, const float* up, i64 n_tokens, \
	                                                   int inter, i64 in_stride) {                              \
		const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;                                             \
		if (c >= inter) return;                                                                                 \
		for (i64 t = blockIdx.y; t < n_tokens; t += gridDim.y) {                                               \
			const float4 g = *reinterpret_cast<const float4*>(gate + t * in_stride + c);                      \
			const float4 u = *reinterpret_cast<const float4*>(up + t * in_stride + c);                        \
			To* o = out + t * inter + c;                                                                       \
			o[0] = from_f32<To>(fn(g.x) * u.x);                                                                \
			o[1] = from_f32<To>(fn(g.y) * u.y);                                                                \
			o[2] = from_f32<To>(fn(g.z) * u.z);                                                                \
			o[3] = from_f32<To>(fn(g.w) * u.w);                                                                \
		}                                                                                                      \
	}
GATED_TO(silu_mul, silu, bf16, bf16_t)
GATED_TO(silu_mul, silu, f16, f16_t)
GATED_TO(gelu_tanh_mul, gelu_tanh, bf16, bf16_t)
GATED_TO(gelu_tanh_mul, gelu_tanh, f16, f16_t)

// <name>_<suffix>_v8: GATED over 16-bit gate, up and out, eight values
// per thread in 16-byte loads and stores (inter and in_stride multiples of
// 8, 16-byte aligned rows); the arithmetic of GATED, the launch shape of
// GATED_TO with eight values a thread.
#define GATED_V8(name, fn, suffix, T)                                                                            \
	extern "C" __global__ void name##_##suffix##_v8(T* out, const T* gate, const T* up, i64 n_tokens, int inter, \
	                                                i64 in_stride) {                                           \
		const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 8;                                           \
		if (c >= inter) return;                                                                               \
		for (i64 t = blockIdx.y; t < n_tokens; t += gridDim.y) {                                             \
			const uint4 g = *reinterpret_cast<const uint4*>(gate + t * in_stride + c);                       \
			const uint4 u = *reinterpret_cast<const uint4*>(up + t * in_stride + c);                         \
			const T* gv = reinterpret_cast<const T*>(&g);                                                    \
			const T* uv = reinterpret_cast<const T*>(&u);                                                    \
			uint4 o;                                                                                         \
			T* ov = reinterpret_cast<T*>(&o);                                                                \
			_Pragma("unroll") for (int j = 0; j < 8; j++) ov[j] = from_f32<T>(fn(to_f32(gv[j])) * to_f32(uv[j])); \
			*reinterpret_cast<uint4*>(out + t * inter + c) = o;                                              \
		}                                                                                                    \
	}
GATED_V8(silu_mul, silu, bf16, bf16_t)
GATED_V8(silu_mul, silu, f16, f16_t)
GATED_V8(gelu_tanh_mul, gelu_tanh, bf16, bf16_t)
GATED_V8(gelu_tanh_mul, gelu_tanh, f16, f16_t)

// Soft-cap, in place: x = cap * tanh(x / cap) (Gemma 2's final logits and
// attention scores).  x: [n]
#define SOFTCAP(suffix, T)                                                 \
	extern "C" __global__ void softcap_##suffix(T* x, i64 n, float cap) { \
		FOR_EACH(i, n) { x[i] = from_f32<T>(cap * tanhf(to_f32(x[i]) / cap)); } \
	}
SOFTCAP(f32, float)
SOFTCAP(bf16, bf16_t)
SOFTCAP(f16, f16_t)

// GPT-OSS's clamped SwiGLU, in place on float32 activations (the rule of
// device.ClampedSwiGLUOps): g = min(gate, limit), u = clamp(up, ±limit),
// gate = (u + 1)·g·sigmoid(alpha·g).  gate, up: [n] dense
extern "C" __global__ void clamped_swiglu_f32(float* gate, const float* up, i64 n, float alpha, float limit) {
	FOR_EACH(i, n) {
		const float g = fminf(gate[i], limit);
		const float u = fminf(fmaxf(up[i], -limit), limit);
		gate[i] = (u + 1.f) * g / (1.f + expf(-alpha * g));
	}
}
