// Package flash is a FlashAttention-2-style backend: each work item walks
// its keys in tiles read natively from the paged pool, keeping a running
// max and sum per query row (online softmax), so only one tile of scores
// exists at a time and every query head of a GQA group and every query of
// a block reuses the same K/V tile. On the CPU it is the attention core
// (attention/cpuattn) with the SplitWhenIdle policy: a query block's key
// range is split and merged (flash-decoding) only when the items are too
// few for the workers, as in a decode of a small batch. The CUDA entry is
// in cuda.go.
package flash

import (
	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/cpuattn"
)

// Entry registers the CPU backend.
var Entry = attention.Entry{
	Name:        "flash",
	Description: "FlashAttention-2 tiling: paged K/V tiles, online softmax, GQA-shared tiles, split-KV decode",
	Caps:        attention.CPUCaps,
	New: func(opts attention.Options) (attention.Backend, error) {
		return cpuattn.New("flash", opts, cpuattn.SplitWhenIdle), nil
	},
}
