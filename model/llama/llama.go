// Package llama implements the Llama family in one network with the config
// deltas of its members:
//
//	Llama    GQA/MHA, tied or untied embeddings, optional attention bias
//	Qwen2    q/k/v biases
//	Qwen3    per-head RMSNorm on q and k before RoPE
//	Mistral  sliding-window attention
//
// Each layer is x += o(attn(rope(q(n(x))), rope(k(n(x))), v(n(x))));
// x += down(silu(gate(n(x))) * up(n(x))); logits = lm_head(norm(x)).
package llama

import (
	"fmt"
	"math"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// Architectures are the config.json `architectures` names served here.
var Architectures = []string{"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}

type layer struct {
	attnNorm, mlpNorm device.Vector
	q, k, v, o        device.Matrix
	qNorm, kNorm      device.Vector // Qwen3; nil otherwise
	gate, up, down    device.Matrix
	attn              attention.Layer
}

// Model is a loaded Llama-family network.
type Model struct {
	cfg    model.Config
	ops    device.Ops
	embed  device.Matrix // [vocab, hidden]
	layers []layer
	norm   device.Vector
	lmHead device.Matrix
	rope   *device.Rope
}

// New binds weights to the architecture on the device of ops, checking
// every shape.
func New(cfg *model.Config, ws model.WeightSource, ops device.Ops) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s config: %w", cfg.Architecture, err)
	}
	m := &Model{cfg: *cfg, ops: ops}
	h, hd := cfg.HiddenSize, cfg.HeadDim
	qDim, kvDim := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	// YaRN scales q and k by the rope's attention factor: their scores by its square.
	scale := cfg.RopeAttentionFactor() * cfg.RopeAttentionFactor() / math.Sqrt(float64(hd))
	var err error
	get := func(name string, shape ...int) tensor.Weight {
		if err != nil {
			return tensor.Weight{}
		}
		var w tensor.Weight
		w, err = model.Expect(ws, name, shape...)
		return w
	}
	floats := func(name string, n int) []float32 {
		w := get(name, n)
		if err != nil {
			return nil
		}
		return w.Float32()
	}
	vec := func(name string, n int) device.Vector {
		v := floats(name, n)
		if err != nil {
			return nil
		}
		var dv device.Vector
		dv, err = ops.Vector(v)
		return dv
	}
	matrix := func(w tensor.Weight, bias []float32) device.Matrix {
		if err != nil {
			return nil
		}
		var dm device.Matrix
		dm, err = ops.Matrix(w, bias)
		return dm
	}
	linear := func(prefix string, out, in int, bias bool) device.Matrix {
		w := get(prefix+".weight", out, in)
		var b []float32
		if bias || ws.Has(prefix+".bias") {
			b = floats(prefix+".bias", out)
		}
		return matrix(w, b)
	}

	embed := get("model.embed_tokens.weight", cfg.VocabSize, h)
	m.embed = matrix(embed, nil)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := layer{
			attnNorm: vec(p+"input_layernorm.weight", h),
			mlpNorm:  vec(p+"post_attention_layernorm.weight", h),
			q:        linear(p+"self_attn.q_proj", qDim, h, cfg.AttentionBias),
			k:        linear(p+"self_attn.k_proj", kvDim, h, cfg.AttentionBias),
			v:        linear(p+"self_attn.v_proj", kvDim, h, cfg.AttentionBias),
			o:        linear(p+"self_attn.o_proj", h, qDim, false),
			gate:     linear(p+"mlp.gate_proj", cfg.IntermediateSize, h, false),
			up:       linear(p+"mlp.up_proj", cfg.IntermediateSize, h, false),
			down:     linear(p+"mlp.down_proj", h, cfg.IntermediateSize, false),
			attn: attention.Layer{
				Index: i, NumHeads: cfg.NumHeads, NumKVHeads: cfg.NumKVHeads,
				HeadDim: hd, HeadDimV: hd, Scale: float32(scale),
				SlidingWindow: cfg.LayerWindow(i),
			},
		}
		if cfg.QKNorm {
			l.qNorm = vec(p+"self_attn.q_norm.weight", hd)
			l.kNorm = vec(p+"self_attn.k_norm.weight", hd)
		}
		m.layers = append(m.layers, l)
	}
	m.norm = vec("model.norm.weight", h)
	if cfg.TieWordEmbeddings || !ws.Has("lm_head.weight") {
		// Checkpoints that tie embeddings often omit lm_head entirely.
		m.lmHead = m.embed
	} else {
		m.lmHead = linear("lm_head", cfg.VocabSize, h, false)
	}
	if err != nil {
		return nil, err
	}
	m.rope = &device.Rope{HeadDim: hd, InvFreq: cfg.RopeInvFreq(hd), Interleaved: cfg.RopeInterleaved}
	return m, nil
}

func (m *Model) Config() *model.Config { return &m.cfg }

func (m *Model) KVSpec() kvcache.Spec { return KVSpec(&m.cfg) }

// WeightShapes lists every tensor the architecture reads, with its shape,
// for a config (dummy weights are made from it).
func WeightShapes(cfg *model.Config) map[string][]int {
	h, hd, inter := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
	qDim, kvDim := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	out := map[string][]int{"model.embed_tokens.weight": {cfg.VocabSize, h}, "model.norm.weight": {h}}
	if !cfg.TieWordEmbeddings {
		out["lm_head.weight"] = []int{cfg.VocabSize, h}
	}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		for name, shape := range map[string][]int{
			"input_layernorm.weight": {h}, "post_attention_layernorm.weight": {h},
			"self_attn.q_proj.weight": {qDim, h}, "self_attn.k_proj.weight": {kvDim, h},
			"self_attn.v_proj.weight": {kvDim, h}, "self_attn.o_proj.weight": {h, qDim},
			"mlp.gate_proj.weight": {inter, h}, "mlp.up_proj.weight": {inter, h}, "mlp.down_proj.weight": {h, inter},
		} {
			out[p+name] = shape
		}
		if cfg.AttentionBias {
			out[p+"self_attn.q_proj.bias"], out[p+"self_attn.k_proj.bias"], out[p+"self_attn.v_proj.bias"] = []int{qDim}, []int{kvDim}, []int{kvDim}
		}
		if cfg.QKNorm {
			out[p+"self_attn.q_norm.weight"], out[p+"self_attn.k_norm.weight"] = []int{hd}, []int{hd}
		}
	}
	return out
}

// KVSpec is a standard K/V cache of every KV head.
func KVSpec(cfg *model.Config) kvcache.Spec {
	return kvcache.Spec{NumLayers: cfg.NumLayers, NumKVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, HeadDimV: cfg.HeadDim}
}

func (m *Model) AttentionLayers() []attention.Layer {
	out := make([]attention.Layer, len(m.layers))
	for i, l := range m.layers {
		out[i] = l.attn
	}
	return out
}

// Forward runs the batch; see model.Runnable. The logits stay on the ops'
// device (host memory on the CPU).
func (m *Model) Forward(b *forward.Batch, attn attention.Backend) (tensor.T, error) {
	if err := model.CheckInputIDs(b.InputIDs, m.cfg.VocabSize); err != nil {
		return tensor.T{}, err
	}
	ops, eps := m.ops, m.cfg.RMSNormEps
	ops.BeginForward()
	defer ops.EndForward()
	x := ops.Embed(m.embed, b.InputIDs) // residual stream [T, hidden]
	// The residual adds ride on the o and down projections and the norms on
	// the projections after them (NormLinearGroup, LinearAdd, GatedMLPAdd):
	// four launches for the linears of a layer on a GPU for a decode batch.
	for i := range m.layers {
		l := &m.layers[i]
		qkv := ops.NormLinearGroup(x, l.attnNorm, eps, l.q, l.k, l.v)
		q, k, v := qkv[0], qkv[1], qkv[2] // [T, heads*hd], [T, kvHeads*hd], [T, kvHeads*hd]
		if l.qNorm != nil {
			q, k = ops.RMSNorm(q, l.qNorm, eps), ops.RMSNorm(k, l.kNorm, eps) // per head
		}
		ops.RopeQK(q, k, b.Positions, m.rope)
		a, err := attention.Run(attn, q, k, v, &l.attn, b) // [T, heads*hd]
		if err != nil {
			return tensor.T{}, err
		}
		ops.Adopt(a)
		ops.LinearAdd(x, a, l.o)

		ops.GatedMLPAdd(x, l.mlpNorm, eps, l.gate, l.up, l.down)
	}
	// Only the rows that need logits go through the final norm and head.
	last := ops.RMSNorm(ops.GatherRows(x, b.LogitRows), m.norm, eps)
	return ops.Linear(last, m.lmHead), nil
}
