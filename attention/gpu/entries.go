package gpu

import "github.com/gosling-ai/gosling/attention"

// The CUDA attention backends, in the registry's order. They live here,
// not beside their CPU twins, so that a program without CUDA (an engine
// built for the host) links none of this package; device/cudadev
// registers them with attention/registry.

// Entries are the CUDA backends: native, flash, splitkv, and the cuDNN
// library backend (offered where libcudnn.so.9 loads).
func Entries() []attention.Entry {
	return []attention.Entry{NativeEntry, FlashEntry, SplitKVEntry, CudnnEntry}
}

// FlashEntry registers the GPU flash backend: one fused FlashAttention-2
// style kernel (attention/gpu, attn_kernels.cu) on tensor cores (mma.sync
// m16n8k16, float32 accumulation) for bf16/f16 activations, reading the
// paged pool natively by page (page id = slot / page size) for any page
// size, with the heads of a GQA group sharing each K/V tile; float32
// activations take the CUDA-core variant of the same kernel. No KV split:
// one pass per block of queries.
var FlashEntry = attention.Entry{
	Name:        "flash",
	Description: "GPU FlashAttention-2: fused tensor-core kernel (mma.sync), online softmax, paged KV read by page",
	Caps:        Caps,
	New: func(opts attention.Options) (attention.Backend, error) {
		rt, err := FromOptions(opts)
		if err != nil {
			return nil, err
		}
		return NewFused("flash", rt, NoSplit), nil
	},
}

// SplitKVEntry registers the GPU flash-decoding backend: when the queries
// alone give too few thread blocks to fill the GPU (decode of a small
// batch, or a short extend over a long prefix), every request's keys are
// cut into chunks attended in parallel (the fused kernels of attention/gpu
// writing per-chunk outputs and log-sum-exps), then merged by the LSE-merge
// kernel. Extend uses the same kernels with the same policy.
var SplitKVEntry = attention.Entry{
	Name:        "splitkv",
	Description: "GPU flash-decoding: KV split into chunks across the SMs, partials merged by an LSE-merge kernel",
	Caps:        Caps,
	New: func(opts attention.Options) (attention.Backend, error) {
		rt, err := FromOptions(opts)
		if err != nil {
			return nil, err
		}
		return NewFused("splitkv", rt, FillGPU), nil
	},
}
