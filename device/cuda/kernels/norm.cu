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
// Launch: grid (n_tokens, heads), block a multiple of 32 up to 1024.
template <typename T, typename To = T>
__device__ void rmsnorm(To* out, T* residual, const T* x, const T* weight, int hidden, i64 x_stride, i64 out_stride,
                        float eps, float weight_offset) {
	int t = blockIdx.x, h = blockIdx.y;
	const T* xr = x + (i64)t * x_stride + (i64)h * hidden;
	To* orow = out + (i64)t * out_stride + (i64)h * hidden;
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
