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

// ---------------------------------------------------------------------------
// Tensor-core primitives (mma.sync kernels of every package: attention's,
// moe_gemm). The instructions need sm_80; on an older target they trap,
// its host never launching the kernels that use them.

typedef unsigned int u32;

template <typename T> __device__ __forceinline__ u16 bits_of(float v) { return from_f32<T>(v).bits; }
__device__ __forceinline__ u32 pack2(u16 lo, u16 hi) { return (u32)lo | ((u32)hi << 16); }
// pack_f2 rounds two floats to Ti (nearest even, as from_f32) and packs
// them, lo in the low half: one converter instruction on sm_80 and newer.
template <typename Ti> __device__ __forceinline__ u32 pack_f2(float lo, float hi);
#if __CUDA_ARCH__ >= 800
#define PACK_F2(T, cvt)                                                              \
	template <> __device__ __forceinline__ u32 pack_f2<T>(float lo, float hi) {      \
		u32 r;                                                                       \
		asm(cvt " %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));                      \
		return r;                                                                    \
	}
#else
#define PACK_F2(T, cvt)                                                              \
	template <> __device__ __forceinline__ u32 pack_f2<T>(float lo, float hi) {      \
		return pack2(bits_of<T>(lo), bits_of<T>(hi));                                \
	}
#endif
PACK_F2(bf16_t, "cvt.rn.bf16x2.f32")
PACK_F2(f16_t, "cvt.rn.f16x2.f32")

// mma16816 is c += a·b, one m16n8k16 tile (a row-major, b column-major,
// c float32) in Ti.
template <typename Ti> __device__ __forceinline__ void mma16816(float* c, const u32* a, const u32* b);
#if __CUDA_ARCH__ >= 800
#define MMA16816(T, ty)                                                                                      \
	template <> __device__ __forceinline__ void mma16816<T>(float* c, const u32* a, const u32* b) {          \
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ty "." ty ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
		             "{%8,%9}, {%0,%1,%2,%3};\n"                                                             \
		             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                         \
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                    \
	}
#else
#define MMA16816(T, ty)                                                                             \
	template <> __device__ __forceinline__ void mma16816<T>(float*, const u32*, const u32*) { __trap(); }
#endif
MMA16816(bf16_t, "bf16")
MMA16816(f16_t, "f16")

__device__ __forceinline__ u32 smem_u32(const void* p) {
	u32 a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}
#if __CUDA_ARCH__ >= 800
// 16 bytes global → shared, bypassing L1; zero-filled when !valid (src is
// then not read, but must stay an address of the buffer).
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void ldsm_x4(u32* r, u32 addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
}
#else
__device__ __forceinline__ void cp_async16(u32, const void*, bool) { __trap(); }
__device__ __forceinline__ void cp_async_commit() {}
template <int N> __device__ __forceinline__ void cp_async_wait() {}
__device__ __forceinline__ void ldsm_x4(u32*, u32) { __trap(); }
#endif
