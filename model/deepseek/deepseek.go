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

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// Architectures are the config.json `architectures` names served here.
var Architectures = []string{"DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"}

// mlp is a SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
type mlp struct {
	gate, up, down *cpu.Linear
}

// forward maps x [T, hidden] to [T, hidden].
func (f *mlp) forward(w *cpu.Workers, x tensor.T) tensor.T {
	gate := f.gate.Forward(w, x) // [T, intermediate]
	cpu.SiLUMul(gate, f.up.Forward(w, x))
	return f.down.Forward(w, gate)
}

type layer struct {
	attnNorm, mlpNorm []float32
	attn              *mla
	dense             *mlp // exactly one of dense and moe is set
	moe               *moe
}

// Model is a loaded DeepSeek V2/V3 network.
type Model struct {
	cfg     model.Config
	workers *cpu.Workers
	embed   tensor.Weight // [vocab, hidden]
	layers  []layer
	norm    []float32
	lmHead  *cpu.Linear
}

// loader fetches tensors, keeping the first error so that New reads as a
// list of weights.
type loader struct {
	ws  model.WeightSource
	err error
}

func (l *loader) get(name string, shape ...int) tensor.Weight {
	if l.err != nil {
		return tensor.Weight{}
	}
	w, err := model.Expect(l.ws, name, shape...)
	l.err = err
	return w
}

func (l *loader) vec(name string, n int) []float32 {
	w := l.get(name, n)
	if l.err != nil {
		return nil
	}
	return w.Float32()
}

func (l *loader) linear(name string, out, in int) *cpu.Linear {
	w := l.get(name, out, in)
	if l.err != nil {
		return nil
	}
	return cpu.NewLinear(w, nil)
}

func (l *loader) mlp(prefix string, hidden, inter int) *mlp {
	return &mlp{
		gate: l.linear(prefix+"gate_proj.weight", inter, hidden),
		up:   l.linear(prefix+"up_proj.weight", inter, hidden),
		down: l.linear(prefix+"down_proj.weight", hidden, inter),
	}
}

// New binds weights to the architecture, checking every shape.
func New(cfg *model.Config, ws model.WeightSource, workers *cpu.Workers) (*Model, error) {
	if err := validate(cfg); err != nil {
		return nil, fmt.Errorf("%s config: %w", cfg.Architecture, err)
	}
	m := &Model{cfg: *cfg, workers: workers}
	h := cfg.HiddenSize
	ld := &loader{ws: ws}
	m.embed = ld.get("model.embed_tokens.weight", cfg.VocabSize, h)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := layer{
			attnNorm: ld.vec(p+"input_layernorm.weight", h),
			mlpNorm:  ld.vec(p+"post_attention_layernorm.weight", h),
			attn:     loadMLA(ld, cfg, i),
		}
		if cfg.MoE.IsMoELayer(i) {
			l.moe = loadMoE(ld, cfg, p+"mlp.")
		} else {
			l.dense = ld.mlp(p+"mlp.", h, cfg.IntermediateSize)
		}
		m.layers = append(m.layers, l)
	}
	m.norm = ld.vec("model.norm.weight", h)
	if cfg.TieWordEmbeddings || !ws.Has("lm_head.weight") {
		m.lmHead = cpu.NewLinear(m.embed, nil)
	} else {
		m.lmHead = ld.linear("lm_head.weight", cfg.VocabSize, h)
	}
	if ld.err != nil {
		return nil, ld.err
	}
	return m, nil
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

// Forward runs the batch; see model.Runnable.
func (m *Model) Forward(b *forward.Batch, attn attention.Backend) (tensor.T, error) {
	if err := b.Finalize(); err != nil {
		return tensor.T{}, err
	}
	if err := attn.Plan(b); err != nil {
		return tensor.T{}, fmt.Errorf("attention plan: %w", err)
	}
	nTok, h := b.NumTokens(), m.cfg.HiddenSize
	x := tensor.New(nTok, h) // residual stream [T, hidden]
	for t, id := range b.InputIDs {
		if id < 0 || int(id) >= m.cfg.VocabSize {
			return tensor.T{}, fmt.Errorf("token id %d outside the vocabulary [0, %d)", id, m.cfg.VocabSize)
		}
		m.embed.DecodeRow(int(id), x.Row(t))
	}
	eps := m.cfg.RMSNormEps
	normed := tensor.New(nTok, h)
	for i := range m.layers {
		l := &m.layers[i]
		cpu.RMSNorm(normed, x, l.attnNorm, eps)
		a, err := l.attn.forward(m.workers, normed, b, attn)
		if err != nil {
			return tensor.T{}, err
		}
		cpu.Add(x, a)

		cpu.RMSNorm(normed, x, l.mlpNorm, eps)
		if l.moe != nil {
			cpu.Add(x, l.moe.forward(m.workers, normed))
		} else {
			cpu.Add(x, l.dense.forward(m.workers, normed))
		}
	}
	// Only the rows that need logits go through the final norm and head.
	last := tensor.New(len(b.LogitRows), h)
	for i, row := range b.LogitRows {
		copy(last.Row(i), x.Row(int(row)))
	}
	cpu.RMSNorm(last, last, m.norm, eps)
	return m.lmHead.Forward(m.workers, last), nil
}
