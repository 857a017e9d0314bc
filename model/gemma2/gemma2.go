// Package gemma2 implements Gemma 2 (Gemma2ForCausalLM) and the text
// model of Gemma 3 (Gemma3ForCausalLM).
//
// It is the Llama layer with Gemma's changes:
//
//	x = embed(ids) * sqrt(hidden)
//	x += post_attn_norm(o(attn(rope(q(n(x))), rope(k(n(x))), v(n(x)))))   scale query_pre_attn_scalar^-0.5, scores softcapped
//	x += post_ffw_norm(down(gelu_tanh(gate(pre_ffw_norm(x))) * up(pre_ffw_norm(x))))
//	logits = softcap(lm_head(norm(x)))
//
// Every RMSNorm multiplies by (1 + weight), and layers alternate between a
// sliding window and full attention (config layer_types, or even layers
// slide in older configs; model.Config.LayerWindow resolves both).
//
// Gemma 3 adds per-head q and k norms (also 1 + weight) before RoPE, and
// gives its sliding layers their own RoPE base (rope_local_base_freq,
// unscaled) while the global layers take rope_theta and rope_scaling; its
// softcaps are off and five of every six layers slide.
package gemma2

import (
	"fmt"
	"math"
	"slices"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/model/llama"
	"github.com/gosling-ai/gosling/tensor"
)

// Architectures are the config.json `architectures` names served here.
var Architectures = []string{"Gemma2ForCausalLM", "Gemma3ForCausalLM"}

type layer struct {
	// Norm weights are prepared as 1 + weight, the factor Gemma multiplies by.
	inputNorm, postAttnNorm, preFFWNorm, postFFWNorm device.Vector
	qNorm, kNorm                                     device.Vector // Gemma 3: 1 + weight per head; nil in Gemma 2
	q, k, v, o                                       device.Matrix
	gate, up, down                                   device.Matrix
	attn                                             attention.Layer
	rope                                             *device.Rope // Model.rope, or Model.localRope on Gemma 3's sliding layers
}

// Model is a loaded Gemma 2 network.
type Model struct {
	cfg   model.Config
	ops   device.Ops
	embed device.Matrix // [vocab, hidden]
	// embedScale is sqrt(hidden) rounded to the embedding's dtype, as
	// transformers builds it (torch.tensor(hidden**0.5, dtype=activations'
	// dtype)): 8 for hidden 64 in float32, but 59.75, not 59.87, for
	// Gemma-2-9B's 3584 in bfloat16.
	embedScale float32
	layers     []layer
	norm       device.Vector
	lmHead     device.Matrix
	rope       *device.Rope
	localRope  *device.Rope // Gemma 3's sliding layers: their own base, unscaled
}

// New binds weights to the architecture on the device of ops, checking
// every shape.
func New(cfg *model.Config, ws model.WeightSource, ops device.Ops) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s config: %w", cfg.Architecture, err)
	}
	if cfg.HiddenAct != "gelu_pytorch_tanh" && cfg.HiddenAct != "gelu_tanh" {
		return nil, fmt.Errorf("%s: hidden_activation %q is not supported (Gemma uses gelu_pytorch_tanh)", cfg.Architecture, cfg.HiddenAct)
	}
	m := &Model{cfg: *cfg, ops: ops}
	h, hd := cfg.HiddenSize, cfg.HeadDim
	qDim, kvDim := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	var err error
	get := func(name string, shape ...int) tensor.Weight {
		if err != nil {
			return tensor.Weight{}
		}
		var w tensor.Weight
		w, err = model.Expect(ws, name, shape...)
		return w
	}
	// gemmaNorm prepares 1 + weight, computed in float32 as transformers does
	// (or as the converter did, for checkpoints that store the sum).
	gemmaNormOf := func(name string, n int) device.Vector {
		w := get(name, n)
		if err != nil {
			return nil
		}
		scale := slices.Clone(w.Float32()) // Float32 may alias the read-only map
		for i, v := range scale {
			if !cfg.GemmaNormsShifted {
				scale[i] = 1 + v
			}
		}
		var dv device.Vector
		dv, err = ops.Vector(scale)
		return dv
	}
	gemmaNorm := func(name string) device.Vector { return gemmaNormOf(name, h) }
	matrix := func(w tensor.Weight) device.Matrix {
		if err != nil {
			return nil
		}
		var dm device.Matrix
		dm, err = ops.Matrix(w, nil)
		return dm
	}
	linear := func(name string, out, in int) device.Matrix { return matrix(get(name, out, in)) }
	scale := cfg.QueryPreAttnScalar
	if scale <= 0 {
		scale = float64(hd)
	}

	embed := get("model.embed_tokens.weight", cfg.VocabSize, h)
	m.embedScale = embedScale(h, embed.DType)
	m.embed = matrix(embed)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		m.layers = append(m.layers, layer{
			inputNorm:    gemmaNorm(p + "input_layernorm.weight"),
			postAttnNorm: gemmaNorm(p + "post_attention_layernorm.weight"),
			preFFWNorm:   gemmaNorm(p + "pre_feedforward_layernorm.weight"),
			postFFWNorm:  gemmaNorm(p + "post_feedforward_layernorm.weight"),
			q:            linear(p+"self_attn.q_proj.weight", qDim, h),
			k:            linear(p+"self_attn.k_proj.weight", kvDim, h),
			v:            linear(p+"self_attn.v_proj.weight", kvDim, h),
			o:            linear(p+"self_attn.o_proj.weight", h, qDim),
			gate:         linear(p+"mlp.gate_proj.weight", cfg.IntermediateSize, h),
			up:           linear(p+"mlp.up_proj.weight", cfg.IntermediateSize, h),
			down:         linear(p+"mlp.down_proj.weight", h, cfg.IntermediateSize),
			attn: attention.Layer{
				Index: i, NumHeads: cfg.NumHeads, NumKVHeads: cfg.NumKVHeads,
				HeadDim: hd, HeadDimV: hd, Scale: float32(1 / math.Sqrt(scale)),
				SlidingWindow: cfg.LayerWindow(i),
				LogitSoftcap:  float32(cfg.AttnLogitSoftcap),
			},
		})
	}
	m.norm = gemmaNorm("model.norm.weight")
	if cfg.TieWordEmbeddings || !ws.Has("lm_head.weight") {
		m.lmHead = m.embed
	} else {
		m.lmHead = linear("lm_head.weight", cfg.VocabSize, h)
	}
	if cfg.QKNorm {
		for i := range m.layers {
			p := fmt.Sprintf("model.layers.%d.self_attn.", i)
			m.layers[i].qNorm, m.layers[i].kNorm = gemmaNormOf(p+"q_norm.weight", hd), gemmaNormOf(p+"k_norm.weight", hd)
		}
	}
	if err != nil {
		return nil, err
	}
	m.rope = &device.Rope{HeadDim: hd, InvFreq: cfg.RopeInvFreq(hd), Interleaved: cfg.RopeInterleaved}
	m.localRope = m.rope
	if cfg.RopeLocalTheta > 0 {
		m.localRope = &device.Rope{HeadDim: hd, InvFreq: cfg.LocalRopeInvFreq(hd), Interleaved: cfg.RopeInterleaved}
	}
	for i := range m.layers {
		m.layers[i].rope = m.rope
		if cfg.LayerWindow(i) > 0 {
			m.layers[i].rope = m.localRope
		}
	}
	return m, nil
}

func (m *Model) Config() *model.Config { return &m.cfg }

func (m *Model) KVSpec() kvcache.Spec { return KVSpec(&m.cfg) }

// KVSpec is a standard K/V cache of every KV head.
func KVSpec(cfg *model.Config) kvcache.Spec {
	return kvcache.Spec{NumLayers: cfg.NumLayers, NumKVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, HeadDimV: cfg.HeadDim}
}

// WeightShapes lists every tensor the architecture reads, with its shape,
// for a config (dummy weights are made from it): a Llama layer's (Gemma 2
// has neither projection biases nor q/k norms) plus the norms around the
// MLP.
func WeightShapes(cfg *model.Config) map[string][]int {
	out := llama.WeightShapes(cfg) // with q/k norms when cfg.QKNorm (Gemma 3)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		out[p+"pre_feedforward_layernorm.weight"] = []int{cfg.HiddenSize}
		out[p+"post_feedforward_layernorm.weight"] = []int{cfg.HiddenSize}
	}
	return out
}

func (m *Model) AttentionLayers() []attention.Layer {
	out := make([]attention.Layer, len(m.layers))
	for i, l := range m.layers {
		out[i] = l.attn
	}
	return out
}

// Forward runs the batch, finalized and planned by the caller; see
// model.Runnable. The logits are the last op's tensor, on the device of
// ops.
func (m *Model) Forward(b *forward.Batch, attn attention.Backend) (tensor.T, error) {
	if err := model.CheckInputIDs(b.InputIDs, m.cfg.VocabSize); err != nil {
		return tensor.T{}, err
	}
	ops, eps := m.ops, m.cfg.RMSNormEps
	ops.BeginForward()
	defer ops.EndForward()
	x := ops.Embed(m.embed, b.InputIDs) // residual stream [T, hidden]
	ops.Scale(x, m.embedScale)
	// Image features replace the scaled embeddings unscaled, as
	// Gemma3ForConditionalGeneration scatters them after the scaled lookup.
	if err := model.SpliceEmbeds(ops, x, b); err != nil {
		return tensor.T{}, err
	}
	for i := range m.layers {
		l := &m.layers[i]
		end := blocks.Layer(ops) // the layer's activations go back at its end
		qkv := ops.NormLinearGroup(x, l.inputNorm, eps, l.q, l.k, l.v)
		q, k, v := qkv[0], qkv[1], qkv[2] // [T, heads*hd], [T, kvHeads*hd], [T, kvHeads*hd]
		if l.qNorm != nil {
			q, k = ops.RMSNorm(q, l.qNorm, eps), ops.RMSNorm(k, l.kNorm, eps) // per head
		}
		ops.RopeQK(q, k, b.Positions, l.rope)
		a, err := attention.Run(attn, q, k, v, &l.attn, b) // [T, heads*hd]
		if err != nil {
			return tensor.T{}, err
		}
		ops.Adopt(a)
		ops.Add(x, ops.RMSNorm(ops.Linear(a, l.o), l.postAttnNorm, eps))

		gateUp := ops.NormLinearGroup(x, l.preFFWNorm, eps, l.gate, l.up) // [T, intermediate] each
		ops.GeLUTanhMul(gateUp[0], gateUp[1])
		ops.Add(x, ops.RMSNorm(ops.Linear(gateUp[0], l.down), l.postFFWNorm, eps))
		end()
	}
	// Only the rows that need logits go through the final norm and head.
	last := ops.RMSNorm(ops.GatherRows(x, b.LogitRows), m.norm, eps)
	logits := ops.Linear(last, m.lmHead) // [rows, vocab]
	if c := float32(m.cfg.FinalLogitSoftcap); c > 0 {
		ops.Softcap(logits, c)
	}
	return logits, nil
}

// embedScale is sqrt(hidden) rounded to dtype (float32 for other dtypes,
// which the engine computes in).
func embedScale(hidden int, dtype tensor.DType) float32 {
	s := float32(math.Sqrt(float64(hidden)))
	switch dtype {
	case tensor.BF16:
		return tensor.BF16ToF32(tensor.F32ToBF16(s))
	case tensor.F16:
		return tensor.F16ToF32(tensor.F32ToF16(s))
	}
	return s
}
