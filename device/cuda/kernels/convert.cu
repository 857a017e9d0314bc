// Element-type conversion.  in: [n]  out: [n]
// Narrowing rounds to nearest even (bf16 keeps NaN quiet).
// Launch: 1-D grid over n.
#define CONVERT(name, Ti, To)                                                  \
	extern "C" __global__ void name(To* out, const Ti* in, i64 n) {           \
		FOR_EACH(i, n) { out[i] = from_f32<To>(to_f32(in[i])); }              \
	}
CONVERT(convert_f32_bf16, float, bf16_t)
CONVERT(convert_bf16_f32, bf16_t, float)
CONVERT(convert_f32_f16, float, f16_t)
CONVERT(convert_f16_f32, f16_t, float)
CONVERT(convert_bf16_f16, bf16_t, f16_t)
CONVERT(convert_f16_bf16, f16_t, bf16_t)
