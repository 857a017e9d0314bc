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
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// Architectures are the config.json `architectures` names served here.
var Architectures = []string{"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}

type layer struct {
	attnNorm, mlpNorm []float32
	q, k, v, o        *cpu.Linear
	qNorm, kNorm      []float32 // Qwen3; nil otherwise
	gate, up, down    *cpu.Linear
	attn              attention.Layer
}

// Model is a loaded Llama-family network.
type Model struct {
	cfg     model.Config
	workers *cpu.Workers
	embed   tensor.Weight // [vocab, hidden]
	layers  []layer
	norm    []float32
	lmHead  *cpu.Linear
	rope    *cpu.Rope
}

// New binds weights to the architecture, checking every shape.
func New(cfg *model.Config, ws model.WeightSource, workers *cpu.Workers) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s config: %w", cfg.Architecture, err)
	}
	m := &Model{cfg: *cfg, workers: workers}
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
	vec := func(name string, n int) []float32 {
		w := get(name, n)
		if err != nil {
			return nil
		}
		return w.Float32()
	}
	optBias := func(name string, n int, required bool) []float32 {
		if !required && !ws.Has(name) {
			return nil
		}
		return vec(name, n)
	}
	linear := func(prefix string, out, in int, bias bool) *cpu.Linear {
		w := get(prefix+".weight", out, in)
		b := optBias(prefix+".bias", out, bias)
		if err != nil {
			return nil
		}
		return cpu.NewLinear(w, b)
	}

	m.embed = get("model.embed_tokens.weight", cfg.VocabSize, h)
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
				HeadDim: hd, HeadDimV: hd, Scale: float32(1 / math.Sqrt(float64(hd))),
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
		m.lmHead = cpu.NewLinear(m.embed, nil)
	} else {
		m.lmHead = linear("lm_head", cfg.VocabSize, h, false)
	}
	if err != nil {
		return nil, err
	}
	m.rope = cpu.NewRope(hd, cfg.RopeInvFreq(hd), cfg.RopeInterleaved)
	return m, nil
}

func (m *Model) Config() *model.Config { return &m.cfg }

func (m *Model) KVSpec() kvcache.Spec { return KVSpec(&m.cfg) }

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
	normed := tensor.New(nTok, h)
	for i := range m.layers {
		l := &m.layers[i]
		cpu.RMSNorm(normed, x, l.attnNorm, m.cfg.RMSNormEps)
		q := l.q.Forward(m.workers, normed) // [T, heads*hd]
		k := l.k.Forward(m.workers, normed) // [T, kvHeads*hd]
		v := l.v.Forward(m.workers, normed) // [T, kvHeads*hd]
		if l.qNorm != nil {
			headNorm(q, l.qNorm, m.cfg.RMSNormEps)
			headNorm(k, l.kNorm, m.cfg.RMSNormEps)
		}
		m.rope.Apply(q.Data, q.Cols(), b.Positions)
		m.rope.Apply(k.Data, k.Cols(), b.Positions)
		a, err := attention.Run(attn, q, k, v, &l.attn, b) // [T, heads*hd]
		if err != nil {
			return tensor.T{}, err
		}
		cpu.Add(x, l.o.Forward(m.workers, a))

		cpu.RMSNorm(normed, x, l.mlpNorm, m.cfg.RMSNormEps)
		gate := l.gate.Forward(m.workers, normed) // [T, intermediate]
		cpu.SiLUMul(gate, l.up.Forward(m.workers, normed))
		cpu.Add(x, l.down.Forward(m.workers, gate))
	}
	// Only the rows that need logits go through the final norm and head.
	last := tensor.New(len(b.LogitRows), h)
	for i, row := range b.LogitRows {
		copy(last.Row(i), x.Row(int(row)))
	}
	cpu.RMSNorm(last, last, m.norm, m.cfg.RMSNormEps)
	return m.lmHead.Forward(m.workers, last), nil
}

// headNorm applies RMSNorm to each head of each row: x [T, heads*hd].
func headNorm(x tensor.T, weight []float32, eps float64) {
	hd := len(weight)
	heads := tensor.From(x.Data, len(x.Data)/hd, hd)
	cpu.RMSNorm(heads, heads, weight, eps)
}
