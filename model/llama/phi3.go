package llama

import (
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/tensor"
)

// Phi-3 (and Phi-4, which shares its class) is the Llama layer with two
// fused projections: qkv_proj stacks q, k and v rows, gate_up_proj stacks
// gate then up rows. They are split at load into the separate matrices
// the Llama layer runs, so the forward and every device's kernels are the
// Llama ones; the split is a view of the stored rows, not a copy, and a
// device that places groups together (device.MatrixGrouper) gets them back
// side by side.

func isFused(cfg *model.Config) bool { return cfg.Architecture == "Phi3ForCausalLM" }

// loadFused loads a Phi-3 layer's projections.
func loadFused(ld *blocks.Loader, cfg *model.Config, p string, l *layer) {
	h, hd, inter := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
	qDim, kvDim := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	qkv := ld.Get(p+"self_attn.qkv_proj.weight", qDim+2*kvDim, h)
	ms := ld.MatrixGroup([]tensor.Weight{ld.Rows(qkv, 1, 0, qDim), ld.Rows(qkv, 1, qDim, kvDim), ld.Rows(qkv, 1, qDim+kvDim, kvDim)},
		make([][]float32, 3))
	l.q, l.k, l.v = ms[0], ms[1], ms[2]
	l.o = ld.Weight(p+"self_attn.o_proj.weight", h, qDim)
	gateUp := ld.Get(p+"mlp.gate_up_proj.weight", 2*inter, h)
	gu := ld.MatrixGroup([]tensor.Weight{ld.Rows(gateUp, 1, 0, inter), ld.Rows(gateUp, 1, inter, inter)}, make([][]float32, 2))
	l.gate, l.up = gu[0], gu[1]
	l.down = ld.Weight(p+"mlp.down_proj.weight", h, inter)
}

// fusedShapes is a Phi-3 layer's weight list.
func fusedShapes(out map[string][]int, cfg *model.Config, p string) {
	h, hd, inter := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
	qDim, kvDim := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	out[p+"self_attn.qkv_proj.weight"] = []int{qDim + 2*kvDim, h}
	out[p+"self_attn.o_proj.weight"] = []int{h, qDim}
	out[p+"mlp.gate_up_proj.weight"] = []int{2 * inter, h}
	out[p+"mlp.down_proj.weight"] = []int{h, inter}
}
