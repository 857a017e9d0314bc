// Synthetic weights (--load-format dummy) made on the device, so a dummy
// model needs no host data and no upload. Element i of the flat tensor is
// tensor.Synthetic.Value(i) (tensor/synthetic.go), restated here bit for
// bit: splitmix64's mix of seed + i·φ, the top 24 bits as a float in
// [-1, 1) (exact), then offset + scale·u with the multiply and the add each
// rounded to nearest even (never fused into an FMA, which the host does not
// do either), then rounded to the output dtype as tensor.F32ToBF16 and
// tensor.F32ToF16 do (from_f32).
//
// fill_synthetic_<dt>: out[j] = value(first + j) for j in [0, n).
//
//	out: [n] (dt)
//
// Launch: 1-D grid over n (grid-stride past the grid cap).

__device__ __forceinline__ float synthetic_value(unsigned long long seed, unsigned long long i, float scale, float offset) {
	unsigned long long z = seed + i * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	float u = (float)((int)(z >> 40) - (1 << 23)) * (1.0f / 8388608.0f);
	return __fadd_rn(__fmul_rn(scale, u), offset);
}

#define FILL_SYNTHETIC(name, T)                                                                         \
	extern "C" __global__ void name(T* out, i64 first, i64 n, unsigned long long seed, float scale, float offset) { \
		FOR_EACH(j, n) { out[j] = from_f32<T>(synthetic_value(seed, (unsigned long long)(first + j), scale, offset)); } \
	}
FILL_SYNTHETIC(fill_synthetic_f32, float)
FILL_SYNTHETIC(fill_synthetic_bf16, bf16_t)
FILL_SYNTHETIC(fill_synthetic_f16, f16_t)
