// Shared by every gosling kernel file; prepended to each before NVRTC
// compiles it, so the kernels need no CUDA headers (NVRTC finds none on a
// machine with only the driver and the NVRTC wheel).
//
// Element types: float, bf16_t and f16_t. The 16-bit types are raw bit
// patterns; arithmetic is always in float, converted on load and store.
// Kernels are extern "C" so the Go side finds them by plain name; the
// suffix names the dtypes (_f32, _bf16, _f16, or _<in>_<out>).

typedef unsigned short u16;
typedef long long i64;

struct bf16_t { u16 bits; };
struct f16_t { u16 bits; };

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16_t v) { return __uint_as_float(((unsigned)v.bits) << 16); }
__device__ __forceinline__ float to_f32(f16_t v) {
	float f;
	asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(v.bits));
	return f;
}

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
// Round to nearest even, NaN kept quiet: the same rule as tensor.F32ToBF16.
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float v) {
	unsigned u = __float_as_uint(v);
	bf16_t r;
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		r.bits = (u16)((u >> 16) | 0x40u);
		return r;
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	r.bits = (u16)(u >> 16);
	return r;
}
template <> __device__ __forceinline__ f16_t from_f32<f16_t>(float v) {
	f16_t r;
	asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(r.bits) : "f"(v));
	return r;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// block_sum returns the sum over the block to every thread. blockDim.x must
// be a multiple of 32 and at most 1024.
__device__ __forceinline__ float block_sum(float v) {
	__shared__ float partial[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = warp_sum(v);
	__syncthreads(); // partial may still be read by a previous call
	if (lane == 0) partial[warp] = v;
	__syncthreads();
	int nwarps = (blockDim.x + 31) >> 5;
	v = lane < nwarps ? partial[lane] : 0.f;
	return warp_sum(v);
}

// The gated activations' functions (activation.cu; gemv.cu's staging).
__device__ __forceinline__ float silu(float g) { return g / (1.f + expf(-g)); }

// expert_act is a mixture's gated expert activation (device.ExpertActivation):
// silu(g)·u, or, when clamped, GPT-OSS's (clamp(u, ±limit) + 1)·g'·sigmoid(alpha·g')
// with g' = min(g, limit).
__device__ __forceinline__ float expert_act(float g, float u, bool clamped, float alpha, float limit) {
	if (!clamped) return silu(g) * u;
	const float gc = fminf(g, limit), uc = fminf(fmaxf(u, -limit), limit);
	return (uc + 1.f) * gc / (1.f + expf(-alpha * gc));
}

__device__ __forceinline__ float gelu_tanh(float g) {
	const float k0 = 0.7978845608028654f; // sqrt(2/pi)
	return 0.5f * g * (1.f + tanhf(k0 * (g + 0.044715f * g * g * g)));
}

// Grid-stride loop over n elements of a 1-D launch.
#define FOR_EACH(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)
