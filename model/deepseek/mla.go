package deepseek

import (
	"fmt"
	"math"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// latentNormEps is the epsilon of q_a_layernorm and kv_a_layernorm, which
// transformers and DeepSeek's reference build with the RMSNorm default, not
// rms_norm_eps.
const latentNormEps = 1e-6

// mla is one multi-head latent attention layer in its absorbed form.
//
// Per head h, with c the normalised latent [rank] and kv_b_proj split into
// W_UK_h [nope, rank] and W_UV_h [v, rank]:
//
//	score(i, j) = q_nope_h(i)·(W_UK_h c(j)) + q_pe_h(i)·k_pe(j)
//	            = (W_UK_hᵀ q_nope_h(i))·c(j) + q_pe_h(i)·k_pe(j)
//	out_h(i)    = Σ_j p(i, j) W_UV_h c(j) = W_UV_h Σ_j p(i, j) c(j)
//
// so the backend attends a query [W_UK_hᵀ q_nope_h ‖ q_pe_h] over one
// shared latent key [c ‖ k_pe] per token, returns Σ_j p c(j) per head, and
// W_UV_h maps that back to the head's value space.
type mla struct {
	heads, nope, rope, rank, vDim int

	qA     *cpu.Linear // [q_lora_rank, hidden]; nil when q is a plain projection
	qANorm []float32
	qB     *cpu.Linear // [heads*(nope+rope), q_lora_rank]
	q      *cpu.Linear // [heads*(nope+rope), hidden]; nil with the LoRA query

	kvA     *cpu.Linear // kv_a_proj_with_mqa: [rank+rope, hidden]
	kvANorm []float32   // [rank]
	// absorbK[h] is W_UK_hᵀ: [rank, nope] row-major, so that row r dotted
	// with q_nope_h is component r of the absorbed query.
	absorbK [][]float32
	// absorbV[h] is W_UV_h: [v, rank] row-major.
	absorbV [][]float32
	o       *cpu.Linear // [hidden, heads*v]

	rotary     *cpu.Rope
	ropeFactor float32 // YaRN's scaling of cos and sin (1 for plain RoPE)
	layer      attention.Layer
}

func loadMLA(ld *loader, cfg *model.Config, index int) *mla {
	a := cfg.MLA
	h := cfg.HiddenSize
	p := fmt.Sprintf("model.layers.%d.self_attn.", index)
	m := &mla{heads: cfg.NumHeads, nope: a.QKNopeHeadDim, rope: a.QKRopeHeadDim, rank: a.KVLoraRank, vDim: a.VHeadDim}
	qDim := m.heads * (m.nope + m.rope)

	qRank := a.QLoraRank
	if qRank <= 0 && ld.ws.Has(p+"q_a_proj.weight") {
		// A config without q_lora_rank: let the checkpoint say.
		if w, err := ld.ws.Tensor(p + "q_a_proj.weight"); err == nil && len(w.Shape) == 2 {
			qRank = w.Shape[0]
		}
	}
	if qRank > 0 {
		m.qA = ld.linear(p+"q_a_proj.weight", qRank, h)
		m.qANorm = ld.vec(p+"q_a_layernorm.weight", qRank)
		m.qB = ld.linear(p+"q_b_proj.weight", qDim, qRank)
	} else {
		m.q = ld.linear(p+"q_proj.weight", qDim, h)
	}
	m.kvA = ld.linear(p+"kv_a_proj_with_mqa.weight", m.rank+m.rope, h)
	m.kvANorm = ld.vec(p+"kv_a_layernorm.weight", m.rank)
	kvB := ld.get(p+"kv_b_proj.weight", m.heads*(m.nope+m.vDim), m.rank)
	m.o = ld.linear(p+"o_proj.weight", h, m.heads*m.vDim)
	if ld.err != nil {
		return nil
	}
	m.splitKVB(kvB.Float32())

	invFreq, ropeFactor, mscale := ropeParams(cfg, m.rope)
	m.rotary = cpu.NewRope(m.rope, invFreq, cfg.RopeInterleaved)
	m.ropeFactor = ropeFactor
	m.layer = attention.Layer{
		Index: index, NumHeads: m.heads, NumKVHeads: 1,
		HeadDim: m.rank + m.rope, HeadDimV: m.rank,
		Scale: float32(mscale * mscale / math.Sqrt(float64(m.nope+m.rope))),
		MLA:   true,
	}
	return m
}

// splitKVB precomputes the per-head absorbed matrices from kv_b_proj,
// whose rows are, per head, nope key rows then v value rows.
func (m *mla) splitKVB(kvB []float32) {
	stride := m.nope + m.vDim
	for h := range m.heads {
		base := h * stride * m.rank
		uk := make([]float32, m.rank*m.nope) // [rank, nope]
		for d := range m.nope {
			row := kvB[base+d*m.rank : base+(d+1)*m.rank]
			for r, w := range row {
				uk[r*m.nope+d] = w
			}
		}
		uv := make([]float32, m.vDim*m.rank) // [v, rank]
		copy(uv, kvB[base+m.nope*m.rank:base+stride*m.rank])
		m.absorbK = append(m.absorbK, uk)
		m.absorbV = append(m.absorbV, uv)
	}
}

// forward maps the normalised hidden states x [T, hidden] to the attention
// output [T, hidden].
func (m *mla) forward(w *cpu.Workers, x tensor.T, b *forward.Batch, be attention.Backend) (tensor.T, error) {
	nTok := x.Rows()
	var q tensor.T // [T, heads*(nope+rope)]
	if m.qA != nil {
		qa := m.qA.Forward(w, x) // [T, q_lora_rank]
		cpu.RMSNorm(qa, qa, m.qANorm, latentNormEps)
		q = m.qB.Forward(w, qa)
	} else {
		q = m.q.Forward(w, x)
	}
	kv := m.kvA.Forward(w, x) // [T, rank+rope]: c_kv ‖ k_pe

	// The latent key [normalised c_kv ‖ rope(k_pe)]: the row the cache stores.
	latent := tensor.New(nTok, m.rank+m.rope)
	kPe := tensor.New(nTok, m.rope)
	for t := range nTok {
		c := latent.Row(t)[:m.rank]
		copy(c, kv.Row(t)[:m.rank])
		cpu.RMSNorm(tensor.From(c, 1, m.rank), tensor.From(c, 1, m.rank), m.kvANorm, latentNormEps)
		copy(kPe.Row(t), kv.Row(t)[m.rank:])
	}
	m.rotary.Apply(kPe.Data, m.rope, b.Positions)
	if m.ropeFactor != 1 {
		cpu.Scale(kPe.Data, m.ropeFactor)
	}
	for t := range nTok {
		copy(latent.Row(t)[m.rank:], kPe.Row(t))
	}

	// The query per head: [W_UK_hᵀ q_nope ‖ rope(q_pe)].
	qDim := m.nope + m.rope
	qPe := tensor.New(nTok, m.heads*m.rope)
	for t := range nTok {
		src, dst := q.Row(t), qPe.Row(t)
		for h := range m.heads {
			copy(dst[h*m.rope:(h+1)*m.rope], src[h*qDim+m.nope:(h+1)*qDim])
		}
	}
	m.rotary.Apply(qPe.Data, qPe.Cols(), b.Positions)
	if m.ropeFactor != 1 {
		cpu.Scale(qPe.Data, m.ropeFactor)
	}
	width := m.rank + m.rope
	qAbs := tensor.New(nTok, m.heads*width)
	w.For(m.heads, 1, func(lo, hi int) {
		for h := lo; h < hi; h++ {
			uk := m.absorbK[h]
			for t := range nTok {
				qNope := q.Row(t)[h*qDim : h*qDim+m.nope]
				dst := qAbs.Row(t)[h*width : (h+1)*width]
				for r := range m.rank {
					dst[r] = cpu.Dot(uk[r*m.nope:(r+1)*m.nope], qNope)
				}
				copy(dst[m.rank:], qPe.Row(t)[h*m.rope:(h+1)*m.rope])
			}
		}
	})

	out, err := attention.Run(be, qAbs, latent, tensor.T{}, &m.layer, b) // [T, heads*rank]
	if err != nil {
		return tensor.T{}, err
	}

	// Back from the latent space to each head's values: [T, heads*v].
	values := tensor.New(nTok, m.heads*m.vDim)
	w.For(m.heads, 1, func(lo, hi int) {
		for h := lo; h < hi; h++ {
			uv := m.absorbV[h]
			for t := range nTok {
				src := out.Row(t)[h*m.rank : (h+1)*m.rank]
				dst := values.Row(t)[h*m.vDim : (h+1)*m.vDim]
				for d := range m.vDim {
					dst[d] = cpu.Dot(uv[d*m.rank:(d+1)*m.rank], src)
				}
			}
		}
	})
	return m.o.Forward(w, values), nil
}
