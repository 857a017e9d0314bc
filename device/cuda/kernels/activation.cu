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
