// Package deepseek implements DeepSeek-V3 (DeepseekV3ForCausalLM) and
// DeepSeek-V2 (DeepseekV2ForCausalLM): multi-head latent attention (MLA,
// mla.go) and a mixture of experts with shared experts (moe.go).
//
// Each layer is x += o(mla(n(x))); x += ffn(n(x)), where ffn is a plain
// SwiGLU MLP on the first first_k_dense_replace layers and a MoE after;
// logits = lm_head(norm(x)).
//
// Attention runs in the absorbed form: the KV cache holds one latent vector
// per token and layer, [kv_lora_rank normalised c_kv ‖ rope'd k_pe], and the
// per-head key/value up-projections are folded into the query and output
// (see mla.go).
package deepseek

import (
	"fmt"
	"strconv"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
	"github.com/gosling-ai/gosling/tensor"
)

// Architectures are the config.json `architectures` names served here.
var Architectures = []string{"DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"}

type layer struct {
	attnNorm, mlpNorm device.Vector
	attn              *mla
	dense             *blocks.MLP // exactly one of dense and moe is set
	moe               *blocks.MoE
}

// Model is a loaded DeepSeek V2/V3 network.
type Model struct {
	cfg    model.Config
	ops    device.Ops
	embed  device.Matrix // [vocab, hidden]
	layers []layer
	norm   device.Vector
	lmHead device.Matrix
}

// New binds weights to the architecture on the device of ops, checking
// every shape.
func New(cfg *model.Config, ws model.WeightSource, ops device.Ops) (*Model, error) {
	if err := validate(cfg); err != nil {
		return nil, fmt.Errorf("%s config: %w", cfg.Architecture, err)
	}
	m := &Model{cfg: *cfg, ops: ops}
	h := cfg.HiddenSize
	ld := &blocks.Loader{WS: ws, Ops: ops}
	m.embed = ld.Weight("model.embed_tokens.weight", cfg.VocabSize, h)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := layer{
			attnNorm: ld.Vec(p+"input_layernorm.weight", h),
			mlpNorm:  ld.Vec(p+"post_attention_layernorm.weight", h),
			attn:     loadMLA(ld, cfg, i),
		}
		if cfg.MoE.IsMoELayer(i) {
			l.moe = loadMoE(ld, cfg, p+"mlp.")
		} else {
			l.dense = ld.MLP(p+"mlp.", blocks.ProjNames, h, cfg.IntermediateSize)
		}
		m.layers = append(m.layers, l)
	}
	m.norm = ld.Vec("model.norm.weight", h)
	if cfg.TieWordEmbeddings || !ws.Has("lm_head.weight") {
		m.lmHead = m.embed
	} else {
		m.lmHead = ld.Weight("lm_head.weight", cfg.VocabSize, h)
	}
	if ld.Err != nil {
		return nil, ld.Err
	}
	return m, nil
}

// WeightShapes lists every tensor the architecture reads, with its shape,
// for a config (dummy weights are made from it).
func WeightShapes(cfg *model.Config) map[string][]int {
	h, a, e := cfg.HiddenSize, cfg.MLA, cfg.MoE
	heads := cfg.NumHeads
	out := map[string][]int{"model.embed_tokens.weight": {cfg.VocabSize, h}, "model.norm.weight": {h}}
	if !cfg.TieWordEmbeddings {
		out["lm_head.weight"] = []int{cfg.VocabSize, h}
	}
	mlpShapes := func(prefix string, inter int) {
		out[prefix+"gate_proj.weight"] = []int{inter, h}
		out[prefix+"up_proj.weight"] = []int{inter, h}
		out[prefix+"down_proj.weight"] = []int{h, inter}
	}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		out[p+"input_layernorm.weight"] = []int{h}
		out[p+"post_attention_layernorm.weight"] = []int{h}
		qDim := heads * (a.QKNopeHeadDim + a.QKRopeHeadDim)
		if a.QLoraRank > 0 {
			out[p+"self_attn.q_a_proj.weight"] = []int{a.QLoraRank, h}
			out[p+"self_attn.q_a_layernorm.weight"] = []int{a.QLoraRank}
			out[p+"self_attn.q_b_proj.weight"] = []int{qDim, a.QLoraRank}
		} else {
			out[p+"self_attn.q_proj.weight"] = []int{qDim, h}
		}
		out[p+"self_attn.kv_a_proj_with_mqa.weight"] = []int{a.KVLoraRank + a.QKRopeHeadDim, h}
		out[p+"self_attn.kv_a_layernorm.weight"] = []int{a.KVLoraRank}
		out[p+"self_attn.kv_b_proj.weight"] = []int{heads * (a.QKNopeHeadDim + a.VHeadDim), a.KVLoraRank}
		out[p+"self_attn.o_proj.weight"] = []int{h, heads * a.VHeadDim}
		if !e.IsMoELayer(i) {
			mlpShapes(p+"mlp.", cfg.IntermediateSize)
			continue
		}
		out[p+"mlp.gate.weight"] = []int{e.NumRoutedExperts, h}
		if e.TopKMethod == "noaux_tc" { // V3's selection bias
			out[p+"mlp.gate.e_score_correction_bias"] = []int{e.NumRoutedExperts}
		}
		for x := range e.NumRoutedExperts {
			mlpShapes(p+"mlp.experts."+strconv.Itoa(x)+".", e.IntermediateSize)
		}
		if e.NumSharedExperts > 0 {
			mlpShapes(p+"mlp.shared_experts.", e.IntermediateSize*e.NumSharedExperts)
		}
	}
	return out
}

// validate checks what the generic Config.Validate does not know about.
func validate(cfg *model.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, e := cfg.MLA, cfg.MoE
	switch {
	case a.KVLoraRank <= 0 || a.QKNopeHeadDim <= 0 || a.QKRopeHeadDim <= 0 || a.VHeadDim <= 0:
		return fmt.Errorf("kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim must be positive, got %+v", a)
	case a.QKRopeHeadDim%2 != 0:
		return fmt.Errorf("qk_rope_head_dim must be even, got %d", a.QKRopeHeadDim)
	case cfg.HiddenAct != "silu":
		return fmt.Errorf("hidden_act %q is not supported (DeepSeek uses silu)", cfg.HiddenAct)
	case e.NumRoutedExperts == 0:
		return nil
	case e.NumExpertsPerTok <= 0 || e.NumExpertsPerTok > e.NumRoutedExperts:
		return fmt.Errorf("num_experts_per_tok %d must be in [1, n_routed_experts=%d]", e.NumExpertsPerTok, e.NumRoutedExperts)
	case e.IntermediateSize <= 0:
		return fmt.Errorf("moe_intermediate_size must be positive, got %d", e.IntermediateSize)
	case e.NumGroups > 0 && e.NumRoutedExperts%e.NumGroups != 0:
		return fmt.Errorf("n_group %d must divide n_routed_experts %d", e.NumGroups, e.NumRoutedExperts)
	case e.NumGroups > 0 && (e.TopKGroups <= 0 || e.TopKGroups > e.NumGroups):
		return fmt.Errorf("topk_group %d must be in [1, n_group=%d]", e.TopKGroups, e.NumGroups)
	case e.NumGroups > 1 && e.TopKGroups*(e.NumRoutedExperts/e.NumGroups) < e.NumExpertsPerTok:
		return fmt.Errorf("topk_group %d of n_group %d leaves fewer than num_experts_per_tok=%d experts", e.TopKGroups, e.NumGroups, e.NumExpertsPerTok)
	case e.ScoringFunc != "sigmoid" && e.ScoringFunc != "softmax":
		return fmt.Errorf("scoring_func %q is not supported (sigmoid or softmax)", e.ScoringFunc)
	}
	switch e.TopKMethod {
	case "noaux_tc", "group_limited_greedy", "greedy":
		return nil
	}
	return fmt.Errorf("topk_method %q is not supported (noaux_tc, group_limited_greedy or greedy)", e.TopKMethod)
}

func (m *Model) Config() *model.Config { return &m.cfg }

// KVSpec is the latent cache: per token and layer one vector of
// kv_lora_rank + qk_rope_head_dim values, whose first kv_lora_rank values
// double as the value.
func (m *Model) KVSpec() kvcache.Spec { return KVSpec(&m.cfg) }

// KVSpec is the latent cache: one vector of kv_lora_rank + rope dims per
// token per layer, shared by all heads; its first kv_lora_rank values are
// the value.
func KVSpec(cfg *model.Config) kvcache.Spec {
	a := cfg.MLA
	return kvcache.Spec{
		NumLayers: cfg.NumLayers, NumKVHeads: 1, SharedV: true,
		HeadDim: a.KVLoraRank + a.QKRopeHeadDim, HeadDimV: a.KVLoraRank,
	}
}

func (m *Model) AttentionLayers() []attention.Layer {
	out := make([]attention.Layer, len(m.layers))
	for i, l := range m.layers {
		out[i] = l.attn.layer
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
	for i := range m.layers {
		l := &m.layers[i]
		end := blocks.Layer(ops) // the layer's activations go back at its end
		a, err := l.attn.forward(ops, ops.RMSNorm(x, l.attnNorm, eps), b, attn)
		if err != nil {
			return tensor.T{}, err
		}
		ops.Add(x, a)

		normed := ops.RMSNorm(x, l.mlpNorm, eps)
		if l.moe != nil {
			l.moe.AddTo(ops, x, normed)
		} else {
			ops.Add(x, l.dense.Forward(ops, normed))
		}
		end()
	}
	// Only the rows that need logits go through the final norm and head.
	last := ops.RMSNorm(ops.GatherRows(x, b.LogitRows), m.norm, eps)
	return ops.Linear(last, m.lmHead), nil
}
