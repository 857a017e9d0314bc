package flash

import (
	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/gpu"
)

// CUDAEntry registers the GPU flash backend: one fused FlashAttention-2
// style kernel (attention/gpu, attn_kernels.cu) on tensor cores (mma.sync
// m16n8k16, float32 accumulation) for bf16/f16 activations, reading the
// paged pool natively by page (page id = slot / page size) for any page
// size, with the heads of a GQA group sharing each K/V tile; float32
// activations take the CUDA-core variant of the same kernel. No KV split:
// one pass per block of queries.
var CUDAEntry = attention.Entry{
	Name:        "flash",
	Description: "GPU FlashAttention-2: fused tensor-core kernel (mma.sync), online softmax, paged KV read by page",
	Caps:        gpu.Caps,
	New: func(opts attention.Options) (attention.Backend, error) {
		rt, err := gpu.FromOptions(opts)
		if err != nil {
			return nil, err
		}
		return gpu.NewFused("flash", rt, gpu.NoSplit), nil
	},
}
