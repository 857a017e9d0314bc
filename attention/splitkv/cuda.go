package splitkv

import (
	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/gpu"
)

// CUDAEntry registers the GPU flash-decoding backend: when the queries
// alone give too few thread blocks to fill the GPU (decode of a small
// batch, or a short extend over a long prefix), every request's keys are
// cut into chunks attended in parallel (the fused kernels of attention/gpu
// writing per-chunk outputs and log-sum-exps), then merged by the LSE-merge
// kernel. Extend uses the same kernels with the same policy.
var CUDAEntry = attention.Entry{
	Name:        "splitkv",
	Description: "GPU flash-decoding: KV split into chunks across the SMs, partials merged by an LSE-merge kernel",
	Caps:        gpu.Caps,
	New: func(opts attention.Options) (attention.Backend, error) {
		rt, err := gpu.FromOptions(opts)
		if err != nil {
			return nil, err
		}
		return gpu.NewFused("splitkv", rt, gpu.FillGPU), nil
	},
}
