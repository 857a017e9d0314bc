// Package gemma2 implements Gemma 2 (Gemma2ForCausalLM).
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
package gemma2

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
var Architectures = []string{"Gemma2ForCausalLM"}

type layer struct {
	// Norm weights are stored as 1 + weight, the factor Gemma multiplies by.
	inputNorm, postAttnNorm, preFFWNorm, postFFWNorm []float32
	q, k, v, o                                       *cpu.Linear
	gate, up, down                                   *cpu.Linear
	attn                                             attention.Layer
}

// Model is a loaded Gemma 2 network.
type Model struct {
	cfg     model.Config
	workers *cpu.Workers
	embed   tensor.Weight // [vocab, hidden]
	// embedScale is sqrt(hidden) rounded to the embedding's dtype, as
	// transformers builds it (torch.tensor(hidden**0.5, dtype=activations'
	// dtype)): 8 for hidden 64 in float32, but 59.75, not 59.87, for
	// Gemma-2-9B's 3584 in bfloat16.
	embedScale float32
	layers     []layer
	norm       []float32
	lmHead     *cpu.Linear
	rope       *cpu.Rope
}

// New binds weights to the architecture, checking every shape.
func New(cfg *model.Config, ws model.WeightSource, workers *cpu.Workers) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s config: %w", cfg.Architecture, err)
	}
	if cfg.HiddenAct != "gelu_pytorch_tanh" && cfg.HiddenAct != "gelu_tanh" {
		return nil, fmt.Errorf("%s: hidden_activation %q is not supported (Gemma 2 uses gelu_pytorch_tanh)", cfg.Architecture, cfg.HiddenAct)
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
	// gemmaNorm returns 1 + weight, computed in float32 as transformers does.
	gemmaNorm := func(name string) []float32 {
		w := get(name, h)
		if err != nil {
			return nil
		}
		src := w.Float32()
		out := make([]float32, len(src))
		for i, v := range src {
			out[i] = 1 + v
		}
		return out
	}
	linear := func(name string, out, in int) *cpu.Linear {
		w := get(name, out, in)
		if err != nil {
			return nil
		}
		return cpu.NewLinear(w, nil)
	}
	scale := cfg.QueryPreAttnScalar
	if scale <= 0 {
		scale = float64(hd)
	}

	m.embed = get("model.embed_tokens.weight", cfg.VocabSize, h)
	m.embedScale = embedScale(h, m.embed.DType)
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
		m.lmHead = cpu.NewLinear(m.embed, nil)
	} else {
		m.lmHead = linear("lm_head.weight", cfg.VocabSize, h)
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
		row := x.Row(t)
		m.embed.DecodeRow(int(id), row)
		cpu.Scale(row, m.embedScale)
	}
	eps := m.cfg.RMSNormEps
	normed := tensor.New(nTok, h)
	for i := range m.layers {
		l := &m.layers[i]
		cpu.RMSNorm(normed, x, l.inputNorm, eps)
		q := l.q.Forward(m.workers, normed) // [T, heads*hd]
		k := l.k.Forward(m.workers, normed) // [T, kvHeads*hd]
		v := l.v.Forward(m.workers, normed) // [T, kvHeads*hd]
		m.rope.Apply(q.Data, q.Cols(), b.Positions)
		m.rope.Apply(k.Data, k.Cols(), b.Positions)
		a, err := attention.Run(attn, q, k, v, &l.attn, b) // [T, heads*hd]
		if err != nil {
			return tensor.T{}, err
		}
		attnOut := l.o.Forward(m.workers, a) // [T, hidden]
		cpu.RMSNorm(attnOut, attnOut, l.postAttnNorm, eps)
		cpu.Add(x, attnOut)

		cpu.RMSNorm(normed, x, l.preFFWNorm, eps)
		gate := l.gate.Forward(m.workers, normed) // [T, intermediate]
		cpu.GeLUTanhMul(gate, l.up.Forward(m.workers, normed))
		mlpOut := l.down.Forward(m.workers, gate) // [T, hidden]
		cpu.RMSNorm(mlpOut, mlpOut, l.postFFWNorm, eps)
		cpu.Add(x, mlpOut)
	}
	// Only the rows that need logits go through the final norm and head.
	last := tensor.New(len(b.LogitRows), h)
	for i, row := range b.LogitRows {
		copy(last.Row(i), x.Row(int(row)))
	}
	cpu.RMSNorm(last, last, m.norm, eps)
	logits := m.lmHead.Forward(m.workers, last) // [rows, vocab]
	cpu.Softcap(logits.Data, float32(m.cfg.FinalLogitSoftcap))
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
