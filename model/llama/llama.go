// Package llama implements the Llama family in one network with the config
// deltas of its members:
//
//	Llama    GQA/MHA, tied or untied embeddings, optional attention bias
//	Qwen2    q/k/v biases
//	Qwen3    per-head RMSNorm on q and k before RoPE
//	Mistral  sliding-window attention
//	Qwen2-MoE, Qwen3-MoE, Mixtral  a mixture of experts for the MLP (moe.go)
//	Phi-3    fused qkv and gate/up projections (phi3.go)
//	GPT-OSS  attention sinks and biases, a MoE with clamped SwiGLU experts (gptoss.go)
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
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/tensor"
)

// Architectures are the config.json `architectures` names served here.
var Architectures = []string{"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
	"Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM", "GptOssForCausalLM"}

type layer struct {
	attnNorm, mlpNorm device.Vector
	q, k, v, o        device.Matrix
	qNorm, kNorm      device.Vector // Qwen3; nil otherwise
	gate, up, down    device.Matrix // dense layers
	moe               *blocks.MoE   // MoE layers (gate, up, down nil)
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
	mrope  *model.MRope // Qwen2-VL's multimodal rope; nil for text models
	// capture points (model.HiddenCapture) and the latest Forward's capture.
	capture  []int
	captured tensor.T
}

// New binds weights to the architecture on the device of ops, checking
// every shape.
func New(cfg *model.Config, ws model.WeightSource, ops device.Ops) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s config: %w", cfg.Architecture, err)
	}
	m := &Model{cfg: *cfg, ops: ops}
	h, hd := cfg.HiddenSize, cfg.HeadDim
	// YaRN scales q and k by the rope's attention factor: their scores by its square.
	scale := cfg.RopeAttentionFactor() * cfg.RopeAttentionFactor() / math.Sqrt(float64(hd))
	ld := &blocks.Loader{WS: ws, Ops: ops}
	m.embed = ld.Weight("model.embed_tokens.weight", cfg.VocabSize, h)
	fused := isFused(cfg)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := layer{
			attnNorm: ld.Vec(p+"input_layernorm.weight", h),
			mlpNorm:  ld.Vec(p+"post_attention_layernorm.weight", h),
			attn: attention.Layer{
				Index: i, NumHeads: cfg.NumHeads, NumKVHeads: cfg.NumKVHeads,
				HeadDim: hd, HeadDimV: hd, Scale: float32(scale),
				SlidingWindow: cfg.LayerWindow(i),
				OutToLinear:   true, // o_proj (LinearAdd) alone reads it
			},
		}
		switch {
		case fused:
			loadFused(ld, cfg, p, &l)
		case isGptOSS(cfg):
			loadAttention(ld, cfg, p, &l)
			loadGptOSS(ld, cfg, p, &l)
		default:
			loadAttention(ld, cfg, p, &l)
			loadMLP(ld, cfg, i, p, &l)
		}
		if cfg.QKNorm {
			l.qNorm = ld.Vec(p+"self_attn.q_norm.weight", hd)
			l.kNorm = ld.Vec(p+"self_attn.k_norm.weight", hd)
		}
		m.layers = append(m.layers, l)
	}
	m.norm = ld.Vec("model.norm.weight", h)
	if cfg.TieWordEmbeddings || !ws.Has("lm_head.weight") {
		// Checkpoints that tie embeddings often omit lm_head entirely.
		m.lmHead = m.embed
	} else {
		m.lmHead = ld.Weight("lm_head.weight", cfg.VocabSize, h)
	}
	if ld.Err != nil {
		return nil, ld.Err
	}
	m.rope = &device.Rope{HeadDim: hd, InvFreq: cfg.RopeInvFreq(cfg.RopeDim()), Interleaved: cfg.RopeInterleaved}
	if cfg.Vision != nil && cfg.Vision.MRopeSection != nil {
		var err error
		if m.mrope, err = model.NewMRope(hd, m.rope.InvFreq, cfg.Vision.MRopeSection, cfg.RopeInterleaved); err != nil {
			return nil, fmt.Errorf("%s config: %w", cfg.Architecture, err)
		}
	}
	return m, nil
}

// loadAttention loads separate q, k, v and o projections.
func loadAttention(ld *blocks.Loader, cfg *model.Config, p string, l *layer) {
	h, hd := cfg.HiddenSize, cfg.HeadDim
	qDim, kvDim := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	qkv := ld.LinearGroup([]string{p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"},
		[]int{qDim, kvDim, kvDim}, h, cfg.AttentionBias)
	l.q, l.k, l.v = qkv[0], qkv[1], qkv[2]
	l.o = ld.Linear(p+"self_attn.o_proj", h, qDim, false)
}

// loadMLP loads layer i's dense SwiGLU MLP or its mixture of experts.
func loadMLP(ld *blocks.Loader, cfg *model.Config, i int, p string, l *layer) {
	if cfg.MoE.IsMoELayer(i) {
		prefix, names := moeNames(cfg)
		l.moe = ld.MoE(cfg.MoE, cfg.HiddenSize, p+prefix, names)
		return
	}
	mlp := ld.MLP(p+"mlp.", blocks.ProjNames, cfg.HiddenSize, cfg.IntermediateSize)
	l.gate, l.up, l.down = mlp.Gate, mlp.Up, mlp.Down
}

func (m *Model) Config() *model.Config { return &m.cfg }

func (m *Model) KVSpec() kvcache.Spec { return KVSpec(&m.cfg) }

// WeightShapes lists every tensor the architecture reads, with its shape,
// for a config (dummy weights are made from it).
func WeightShapes(cfg *model.Config) map[string][]int {
	h, hd := cfg.HiddenSize, cfg.HeadDim
	qDim, kvDim := cfg.NumHeads*hd, cfg.NumKVHeads*hd
	out := map[string][]int{"model.embed_tokens.weight": {cfg.VocabSize, h}, "model.norm.weight": {h}}
	if !cfg.TieWordEmbeddings {
		out["lm_head.weight"] = []int{cfg.VocabSize, h}
	}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		out[p+"input_layernorm.weight"], out[p+"post_attention_layernorm.weight"] = []int{h}, []int{h}
		if cfg.QKNorm {
			out[p+"self_attn.q_norm.weight"], out[p+"self_attn.k_norm.weight"] = []int{hd}, []int{hd}
		}
		if isFused(cfg) {
			fusedShapes(out, cfg, p)
			continue
		}
		out[p+"self_attn.q_proj.weight"], out[p+"self_attn.o_proj.weight"] = []int{qDim, h}, []int{h, qDim}
		out[p+"self_attn.k_proj.weight"], out[p+"self_attn.v_proj.weight"] = []int{kvDim, h}, []int{kvDim, h}
		if cfg.AttentionBias {
			out[p+"self_attn.q_proj.bias"], out[p+"self_attn.k_proj.bias"], out[p+"self_attn.v_proj.bias"] = []int{qDim}, []int{kvDim}, []int{kvDim}
		}
		switch {
		case isGptOSS(cfg):
			gptOSSShapes(out, cfg, p)
		case cfg.MoE.IsMoELayer(i):
			prefix, names := moeNames(cfg)
			blocks.MoEShapes(out, cfg.MoE, h, p+prefix, names)
		default:
			blocks.MLPShapes(out, p+"mlp.", blocks.ProjNames, h, cfg.IntermediateSize)
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
	if err := model.SpliceEmbeds(ops, x, b); err != nil {
		return tensor.T{}, err
	}
	var caps []tensor.T
	if len(m.capture) > 0 {
		caps = make([]tensor.T, len(m.capture))
		m.keep(caps, 0, x, b)
	}
	// The residual adds ride on the o and down projections and the norms on
	// the projections after them (NormLinearGroup, LinearAdd, GatedMLPAdd):
	// four launches for the linears of a layer on a GPU for a decode batch.
	// Each layer's activations go back at its end (blocks.Layer), x being
	// updated in place: a forward of T tokens holds one layer's [T, ·]
	// activations, not NumLayers of them.
	qkv16, dt16 := m.qkv16(b)
	for i := range m.layers {
		l := &m.layers[i]
		end := blocks.Layer(ops)
		var qkv []tensor.T
		if qkv16 != nil && l.qNorm == nil {
			qkv = qkv16.NormLinearGroup16(x, l.attnNorm, eps, dt16, l.q, l.k, l.v)
		} else {
			qkv = ops.NormLinearGroup(x, l.attnNorm, eps, l.q, l.k, l.v)
		}
		q, k, v := qkv[0], qkv[1], qkv[2] // [T, heads*hd], [T, kvHeads*hd], [T, kvHeads*hd]
		if l.qNorm != nil {
			q, k = ops.RMSNorm(q, l.qNorm, eps), ops.RMSNorm(k, l.kNorm, eps) // per head
		}
		if m.mrope != nil {
			m.mrope.RopeQK(ops, q, k, b, m.rope)
		} else {
			ops.RopeQK(q, k, b.Positions, m.rope)
		}
		a, err := attention.Run(attn, q, k, v, &l.attn, b) // [T, heads*hd]
		if err != nil {
			return tensor.T{}, err
		}
		ops.Adopt(a)
		ops.LinearAdd(x, a, l.o)

		if l.moe != nil {
			l.moe.AddTo(ops, x, ops.RMSNorm(x, l.mlpNorm, eps))
		} else {
			ops.GatedMLPAdd(x, l.mlpNorm, eps, l.gate, l.up, l.down)
		}
		end()
		if caps != nil {
			m.keep(caps, i+1, x, b)
		}
	}
	if caps != nil {
		m.keep(caps, model.CaptureFinalNorm, x, b)
		m.captured = caps[0]
		for _, c := range caps[1:] {
			m.captured = ops.ConcatHeads(m.captured, c, 1)
		}
	}
	// Only the rows that need logits go through the final norm and head.
	last := ops.RMSNorm(ops.GatherRows(x, b.LogitRows), m.norm, eps)
	return ops.Linear(last, m.lmHead), nil
}

// normLinear16 is a device whose NormLinearGroup can hand its products
// over in 16 bits (cuda.ModelOps), in dt where its GEMMs allow it and in
// float32 elsewhere: each result's DType says which.
type normLinear16 interface {
	NormLinearGroup16(x tensor.T, w device.Vector, eps float64, dt tensor.DType, ms ...device.Matrix) []tensor.T
}

// qkv16 is the device and dtype through which this batch's q, k and v may
// leave their projections in 16 bits (nil: float32 for all). They go only
// to RopeQK and the attention backend, which take 16-bit q, k and v on
// such a device, so it is asked where neither changes what they compute
// beyond rounding q, k and v to bf16 as a bf16 PyTorch model does: an
// extend-like batch (a prefill's tensor-core GEMMs and attention; a
// decode batch keeps its float32 path) over a bf16 or fp8 KV cache, which
// holds k and v in bf16 or less already and whose attention reads bf16
// queries. Layers with q/k norms (Qwen3: normalised in float32) and
// models with M-RoPE (rotated in float32) keep float32.
func (m *Model) qkv16(b *forward.Batch) (normLinear16, tensor.DType) {
	ops, ok := m.ops.(normLinear16)
	if !ok || m.mrope != nil || !b.Mode.IsExtendLike() || b.KV == nil || b.KV.Pool == nil {
		return nil, 0
	}
	switch b.KV.Pool.Spec.DType {
	case tensor.BF16, tensor.FP8E4M3:
		return ops, tensor.BF16
	}
	return nil, 0
}

// SetCapture implements model.HiddenCapture.
func (m *Model) SetCapture(points []int) error {
	for _, p := range points {
		if p != model.CaptureFinalNorm && (p < 0 || p > len(m.layers)) {
			return fmt.Errorf("%s: hidden-state capture point %d outside [0, %d] (a model of %d layers)", m.cfg.Architecture, p, len(m.layers), len(m.layers))
		}
	}
	m.capture, m.captured = points, tensor.T{}
	return nil
}

// Captured implements model.HiddenCapture.
func (m *Model) Captured() tensor.T { return m.captured }

// TokenEmbedding implements model.HiddenCapture.
func (m *Model) TokenEmbedding() device.Matrix { return m.embed }

// OutputHead implements model.HiddenCapture.
func (m *Model) OutputHead() device.Matrix { return m.lmHead }

// keep copies the residual stream x of every new token into caps at each
// capture point equal to point (x changes in place after it).
func (m *Model) keep(caps []tensor.T, point int, x tensor.T, b *forward.Batch) {
	for k, p := range m.capture {
		if p != point {
			continue
		}
		if point == model.CaptureFinalNorm {
			caps[k] = m.ops.RMSNorm(x, m.norm, m.cfg.RMSNormEps)
		} else {
			caps[k] = m.ops.GatherRows(x, model.AllRows(b.NumTokens()))
		}
	}
}
