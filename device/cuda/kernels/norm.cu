// RMSNorm, optionally fused with the residual add before it.
//
//	x:        [n_tokens, heads*hidden] rows of x_stride elements
//	residual: [n_tokens, heads*hidden] dense, or null
//	weight:   [hidden]
//	out:      [n_tokens, heads*hidden] rows of out_stride elements (may alias x)
//
// With a residual: residual = x + residual, then out = norm(residual), as
// SGLang's fused_add_rmsnorm. The norm reads the stored (dtype-rounded) sum,
// as the unfused PyTorch reference does. heads > 1 normalises each head's
// hidden values separately (Qwen3's q/k norm inside a fused qkv row).
//
//	out = v / sqrt(mean(v²) + eps) * (weight + weight_offset)   (offset 1 for Gemma)
//
// rmsnorm_<T>_to_<To> writes out in To (a GEMM's 16-bit input), rounded
// once from the float32 result, as a separate conversion would.
//
// Launch: grid (n_tokens, heads), block a multiple of 32 up to 1024; a
// float32 row without a residual takes rmsnorm_vec's path when the block
// has at least hidden/16 threads.

// Four values of To stored at once.
template <typename To> struct __align__(4 * sizeof(To)) rms_vec4 { To v[4]; };

// rmsnorm_vec is the norm of one float32 row without a residual in 16-byte
// loads, the row held in registers between the sum of squares and the
// output (up to four float4 a thread: hidden <= 16·blockDim), so x is read
// once and a row needs few threads; the arithmetic of rmsnorm but for the
// order of the sum. false (nothing done) where the row or its pointers do
// not allow it; the condition is the same for every thread of the block.
template <typename T, typename To>
__device__ __forceinline__ bool rmsnorm_vec(To*, const T*, const T*, int, float, float) {
	return false;
}
template <typename To>
__device__ __forceinline__ bool rmsnorm_vec(To* orow, const float* xr, const float* weight, int hidden, float eps,
                                            float weight_offset) {
	const int n4 = hidden >> 2;
	if ((hidden & 3) != 0 || n4 > 4 * (int)blockDim.x ||
	    (((unsigned long long)xr | (unsigned long long)weight) & 15) != 0 ||
	    ((unsigned long long)orow & (4 * sizeof(To) - 1)) != 0)
		return false;
	float4 v[4];
	float ss = 0.f;
#pragma unroll
	for (int c = 0; c < 4; c++) {
		const int i = threadIdx.x + c * blockDim.x;
		if (i < n4) {
			v[c] = reinterpret_cast<const float4*>(xr)[i];
			ss += v[c].x * v[c].x + v[c].y * v[c].y + v[c].z * v[c].z + v[c].w * v[c].w;
		}
	}
	ss = block_sum(ss);
	const float inv = 1.f / sqrtf(ss / (float)hidden + eps);
#pragma unroll
	for (int c = 0; c < 4; c++) {
		const int i = threadIdx.x + c * blockDim.x;
		if (i < n4) {
			const float4 w = reinterpret_cast<const float4*>(weight)[i];
			rms_vec4<To> o;
			o.v[0] = from_f32<To>(v[c].x * inv * (w.x + weight_offset));
			o.v[1] = from_f32<To>(v[c].y * inv * (w.y + weight_offset));
			o.v[2] = from_f32<To>(v[c].z * inv * (w.z + weight_offset));
			o.v[3] = from_f32<To>(v[c].w * inv * (w.w + weight_offset));
			reinterpret_cast<rms_vec4<To>*>(orow)[i] = o;
		}
	}
	return true;
}

template <typename T, typename To = T>
__device__ void rmsnorm(To* out, T* residual, const T* x, const T* weight, int hidden, i64 x_stride, i64 out_stride,
                        float eps, float weight_offset) {
	int t = blockIdx.x, h = blockIdx.y;
	const T* xr = x + (i64)t * x_stride + (i64)h * hidden;
	To* orow = out + (i64)t * out_stride + (i64)h * hidden;
	if (residual == 0 && rmsnorm_vec(orow, xr, weight, hidden, eps, weight_offset)) return;
	const T* src = xr;
	float ss = 0.f;
	if (residual != 0) {
		T* rr = residual + ((i64)t * gridDim.y + h) * hidden;
		for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
			T s = from_f32<T>(to_f32(xr[i]) + to_f32(rr[i]));
			rr[i] = s;
			float v = to_f32(s);
			ss += v * v;
		}
		src = rr;
	} else {
		for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
			float v = to_f32(xr[i]);
			ss += v * v;
		}
	}
	ss = block_sum(ss);
	float inv = 1.f / sqrtf(ss / (float)hidden + eps);
	// Each thread re-reads only the elements it wrote above, so no barrier
	// is needed between the residual store and this load.
	for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
		orow[i] = from_f32<To>(to_f32(src[i]) * inv * (to_f32(weight[i]) + weight_offset));
	}
}

#define RMSNORM(suffix, T)                                                                                    \
	extern "C" __global__ void rmsnorm_##suffix(T* out, T* residual, const T* x, const T* weight, int hidden, \
	                                             i64 x_stride, i64 out_stride, float eps, float weight_offset) { \
		rmsnorm<T>(out, residual, x, weight, hidden, x_stride, out_stride, eps, weight_offset);               \
	}
RMSNORM(f32, float)
RMSNORM(bf16, bf16_t)
RMSNORM(f16, f16_t)

#define RMSNORM_TO(suffix, To)                                                                                       \
	extern "C" __global__ void rmsnorm_f32_to_##suffix(To* out, float* residual, const float* x, const float* weight, \
	                                                    int hidden, i64 x_stride, i64 out_stride, float eps,        \
	                                                    float weight_offset) {                                      \
		rmsnorm<float, To>(out, residual, x, weight, hidden, x_stride, out_stride, eps, weight_offset);             \
	}
RMSNORM_TO(bf16, bf16_t)
RMSNORM_TO(f16, f16_t)
