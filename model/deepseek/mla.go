package deepseek

import (
	"fmt"
	"math"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/blocks"
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
//
// The projections whose outputs split (q into nope and rope parts per
// head, kv_a into c_kv and k_pe) are split by rows at load, so each part
// comes out of its own matrix and no op has to slice columns.
type mla struct {
	heads, nope, rope, rank, vDim int

	qA     device.Matrix // [q_lora_rank, hidden]; nil when q is a plain projection
	qANorm device.Vector // [q_lora_rank]
	// qNope and qPe are q_b_proj (or q_proj) split per head into its nope
	// rows [heads*nope, in] and rope rows [heads*rope, in].
	qNope, qPe device.Matrix

	// kvC and kvPe are kv_a_proj_with_mqa split into c_kv [rank, hidden]
	// and k_pe [rope, hidden].
	kvC, kvPe device.Matrix
	kvANorm   device.Vector // [rank]
	// absorbK stacks W_UK_hᵀ [rank, nope] per head: [heads*rank, nope],
	// so head h of LinearPerHead(q_nope) is the absorbed query.
	absorbK device.Matrix
	// absorbV stacks W_UV_h [v, rank] per head: [heads*v, rank].
	absorbV device.Matrix
	o       device.Matrix // [hidden, heads*v]

	rotary     *device.Rope
	ropeFactor float32 // YaRN's scaling of cos and sin (1 for plain RoPE)
	layer      attention.Layer
}

func loadMLA(ld *blocks.Loader, cfg *model.Config, index int) *mla {
	a := cfg.MLA
	h := cfg.HiddenSize
	p := fmt.Sprintf("model.layers.%d.self_attn.", index)
	m := &mla{heads: cfg.NumHeads, nope: a.QKNopeHeadDim, rope: a.QKRopeHeadDim, rank: a.KVLoraRank, vDim: a.VHeadDim}
	qDim := m.heads * (m.nope + m.rope)

	qRank := a.QLoraRank
	if qRank <= 0 && ld.WS.Has(p+"q_a_proj.weight") {
		// A config without q_lora_rank: let the checkpoint say.
		if w, err := ld.WS.Tensor(p + "q_a_proj.weight"); err == nil && len(w.Shape) == 2 {
			qRank = w.Shape[0]
		}
	}
	var q tensor.Weight // [heads*(nope+rope), q_lora_rank or hidden]
	if qRank > 0 {
		m.qA = ld.Weight(p+"q_a_proj.weight", qRank, h)
		m.qANorm = ld.Vec(p+"q_a_layernorm.weight", qRank)
		q = ld.Get(p+"q_b_proj.weight", qDim, qRank)
	} else {
		q = ld.Get(p+"q_proj.weight", qDim, h)
	}
	kvA := ld.Get(p+"kv_a_proj_with_mqa.weight", m.rank+m.rope, h)
	m.kvANorm = ld.Vec(p+"kv_a_layernorm.weight", m.rank)
	kvB := ld.Get(p+"kv_b_proj.weight", m.heads*(m.nope+m.vDim), m.rank)
	m.o = ld.Weight(p+"o_proj.weight", h, m.heads*m.vDim)
	if ld.Err != nil {
		return nil
	}
	m.qNope = ld.Matrix(ld.Rows(q, m.heads, 0, m.nope), nil)
	m.qPe = ld.Matrix(ld.Rows(q, m.heads, m.nope, m.rope), nil)
	m.kvC = ld.Matrix(ld.Rows(kvA, 1, 0, m.rank), nil)
	m.kvPe = ld.Matrix(ld.Rows(kvA, 1, m.rank, m.rope), nil)
	absorbK, absorbV := m.splitKVB(kvB.Float32())
	m.absorbK = ld.Matrix(tensor.FromFloat32(p+"kv_b_proj.weight (absorbed into q)", absorbK, m.heads*m.rank, m.nope), nil)
	m.absorbV = ld.Matrix(tensor.FromFloat32(p+"kv_b_proj.weight (absorbed into o)", absorbV, m.heads*m.vDim, m.rank), nil)

	invFreq, ropeFactor, mscale := ropeParams(cfg, m.rope)
	m.rotary = &device.Rope{HeadDim: m.rope, InvFreq: invFreq, Interleaved: cfg.RopeInterleaved}
	m.ropeFactor = ropeFactor
	m.layer = attention.Layer{
		Index: index, NumHeads: m.heads, NumKVHeads: 1,
		HeadDim: m.rank + m.rope, HeadDimV: m.rank,
		Scale: float32(mscale * mscale / math.Sqrt(float64(m.nope+m.rope))),
		MLA:   true,
	}
	return m
}

// splitKVB builds the absorbed matrices from kv_b_proj, whose rows are,
// per head, nope key rows then v value rows: W_UK_hᵀ stacked
// [heads*rank, nope] and W_UV_h stacked [heads*v, rank].
func (m *mla) splitKVB(kvB []float32) (absorbK, absorbV []float32) {
	stride := m.nope + m.vDim
	absorbK = make([]float32, m.heads*m.rank*m.nope)
	absorbV = make([]float32, 0, m.heads*m.vDim*m.rank)
	for h := range m.heads {
		base := h * stride * m.rank
		uk := absorbK[h*m.rank*m.nope : (h+1)*m.rank*m.nope] // [rank, nope]
		for d := range m.nope {
			row := kvB[base+d*m.rank : base+(d+1)*m.rank]
			for r, w := range row {
				uk[r*m.nope+d] = w
			}
		}
		absorbV = append(absorbV, kvB[base+m.nope*m.rank:base+stride*m.rank]...) // [v, rank]
	}
	return absorbK, absorbV
}

// forward maps the normalised hidden states x [T, hidden] to the attention
// output [T, hidden].
func (m *mla) forward(ops device.Ops, x tensor.T, b *forward.Batch, be attention.Backend) (tensor.T, error) {
	// Everything that reads x shares its preparation.
	var qNope, qPe, kvC, kPe tensor.T
	if m.qA != nil {
		outs := ops.LinearGroup(x, m.kvC, m.kvPe, m.qA)
		kvC, kPe = outs[0], outs[1]
		qa := ops.RMSNorm(outs[2], m.qANorm, latentNormEps) // [T, q_lora_rank]
		q := ops.LinearGroup(qa, m.qNope, m.qPe)
		qNope, qPe = q[0], q[1]
	} else {
		outs := ops.LinearGroup(x, m.kvC, m.kvPe, m.qNope, m.qPe)
		kvC, kPe, qNope, qPe = outs[0], outs[1], outs[2], outs[3]
	}
	// kvC [T, rank], kPe [T, rope], qNope [T, heads*nope], qPe [T, heads*rope]

	// The latent key [normalised c_kv ‖ rope(k_pe)]: the row the cache stores.
	ops.Rope(kPe, b.Positions, m.rotary)
	ops.Rope(qPe, b.Positions, m.rotary)
	if m.ropeFactor != 1 {
		ops.Scale(kPe, m.ropeFactor)
		ops.Scale(qPe, m.ropeFactor)
	}
	latent := ops.ConcatHeads(ops.RMSNorm(kvC, m.kvANorm, latentNormEps), kPe, 1) // [T, rank+rope]

	// The query per head: [W_UK_hᵀ q_nope ‖ rope(q_pe)].
	qAbs := ops.LinearPerHead(qNope, m.absorbK, m.heads) // [T, heads*rank]
	query := ops.ConcatHeads(qAbs, qPe, m.heads)         // [T, heads*(rank+rope)]

	out, err := attention.Run(be, query, latent, tensor.T{}, &m.layer, b) // [T, heads*rank]
	if err != nil {
		return tensor.T{}, err
	}
	ops.Adopt(out)

	// Back from the latent space to each head's values: [T, heads*v].
	values := ops.LinearPerHead(out, m.absorbV, m.heads)
	return ops.Linear(values, m.o), nil
}
