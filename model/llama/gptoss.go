package llama

import (
	"fmt"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/tensor"
)

// GPT-OSS is the Llama layer with:
//
//   - biases on q, k, v and o, and one attention sink per head
//     (self_attn.sinks, attention.Layer.Sinks);
//   - sliding and full layers alternating (layer_types), YaRN on both;
//   - a MoE in every layer: a router with a bias whose top-k logits are
//     softmaxed (the same weights as a softmax over all experts
//     renormalised over the top k), and experts with biases and a clamped
//     SwiGLU, out = down((clamp(up, ±limit) + 1) · g·sigmoid(1.702·g)),
//     g = min(gate, limit).
//
// The checkpoint keeps each layer's experts fused as x·W tensors:
// gate_up_proj [experts, hidden, 2·inter] with gate and up interleaved by
// column (gate in the even ones), down_proj [experts, inter, hidden]. They
// are cut at load into each expert's [out, in] matrices in the stored
// dtype. MXFP4 checkpoints (the published ones) store *_blocks and
// *_scales instead; model's mxfp4 source presents those, as GGUF files
// do, one [out, in] matrix and bias per expert (experts.N.gate_proj, …).

// gptOSSAlpha is the sigmoid's slope in GPT-OSS's gated activation.
const gptOSSAlpha = 1.702

func isGptOSS(cfg *model.Config) bool { return cfg.Architecture == "GptOssForCausalLM" }

// loadGptOSS loads what a GPT-OSS layer adds to the Llama attention: the
// sinks and the MoE.
func loadGptOSS(ld *blocks.Loader, cfg *model.Config, p string, l *layer) {
	e, h, inter := cfg.MoE, cfg.HiddenSize, cfg.MoE.IntermediateSize
	l.attn.Sinks = ld.Floats(p+"self_attn.sinks", cfg.NumHeads)
	glu, ok := ld.Ops.(device.ClampedSwiGLUOps)
	if !ok {
		ld.Fail(fmt.Errorf("GPT-OSS's clamped SwiGLU is not implemented on the %s device yet", ld.Ops.Name()))
		return
	}
	limit := float32(cfg.SwigluLimit)
	act := func(_ device.Ops, gate, up tensor.T) { glu.ClampedSwiGLU(gate, up, gptOSSAlpha, limit) }

	p += "mlp."
	if w, err := ld.WS.Tensor(p + "router.weight"); err == nil && len(w.Shape) == 2 && w.Shape[0] != e.NumRoutedExperts {
		ld.Fail(fmt.Errorf("tensor %s has %d experts, but config.json %s is %d", w.Name, w.Shape[0], e.ExpertsKey, e.NumRoutedExperts))
	}
	m := &blocks.MoE{Router: blocks.RouterOf(e), Gate: ld.Linear(p+"router", e.NumRoutedExperts, h, true)}
	if err := m.Router.Check(e.NumRoutedExperts); err != nil {
		ld.Fail(err)
	}
	if !ld.WS.Has(p + "experts.gate_up_proj") {
		// One [out, in] matrix and bias per expert and projection: GGUF
		// files and dequantized MXFP4 checkpoints present them so.
		for x := range e.NumRoutedExperts {
			q := fmt.Sprintf("%sexperts.%d.", p, x)
			m.Experts = append(m.Experts, &blocks.MLP{
				Gate: ld.Linear(q+"gate_proj", inter, h, true),
				Up:   ld.Linear(q+"up_proj", inter, h, true),
				Down: ld.Linear(q+"down_proj", h, inter, true),
				Act:  act,
			})
		}
		groupGptOSS(ld, m, limit)
		l.moe = m
		return
	}
	gateUp := ld.Get(p+"experts.gate_up_proj", e.NumRoutedExperts, h, 2*inter)
	gateUpBias := ld.Floats2(p+"experts.gate_up_proj_bias", e.NumRoutedExperts, 2*inter)
	down := ld.Get(p+"experts.down_proj", e.NumRoutedExperts, inter, h)
	downBias := ld.Floats2(p+"experts.down_proj_bias", e.NumRoutedExperts, h)
	gateUps, downs := ld.Transpose(gateUp, 2), ld.Transpose(down, 1)
	if ld.Err != nil {
		return
	}
	for x := range e.NumRoutedExperts {
		gb, db := gateUpBias[x*2*inter:(x+1)*2*inter], downBias[x*h:(x+1)*h]
		m.Experts = append(m.Experts, &blocks.MLP{
			Gate: ld.Matrix(gateUps[0][x], strided(gb, 0, 2)),
			Up:   ld.Matrix(gateUps[1][x], strided(gb, 1, 2)),
			Down: ld.Matrix(downs[0][x], db),
			Act:  act,
		})
	}
	groupGptOSS(ld, m, limit)
	l.moe = m
}

// groupGptOSS prepares the experts to run grouped, with the clamped SwiGLU.
func groupGptOSS(ld *blocks.Loader, m *blocks.MoE, limit float32) {
	if ld.Err == nil {
		ld.Fail(m.Group(ld.Ops, device.ExpertActivation{Clamped: true, Alpha: gptOSSAlpha, Limit: limit}))
	}
}

// strided picks values first, first+step, ... of x.
func strided(x []float32, first, step int) []float32 {
	if x == nil {
		return nil
	}
	out := make([]float32, 0, len(x)/step)
	for i := first; i < len(x); i += step {
		out = append(out, x[i])
	}
	return out
}

// gptOSSShapes is what a GPT-OSS layer reads besides the Llama attention.
func gptOSSShapes(out map[string][]int, cfg *model.Config, p string) {
	e, h, inter := cfg.MoE.NumRoutedExperts, cfg.HiddenSize, cfg.MoE.IntermediateSize
	out[p+"self_attn.sinks"] = []int{cfg.NumHeads}
	out[p+"self_attn.o_proj.bias"] = []int{h}
	out[p+"mlp.router.weight"], out[p+"mlp.router.bias"] = []int{e, h}, []int{e}
	out[p+"mlp.experts.gate_up_proj"], out[p+"mlp.experts.gate_up_proj_bias"] = []int{e, h, 2 * inter}, []int{e, 2 * inter}
	out[p+"mlp.experts.down_proj"], out[p+"mlp.experts.down_proj_bias"] = []int{e, inter, h}, []int{e, h}
}
