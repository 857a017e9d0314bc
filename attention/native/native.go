// Package native is the reference attention backend: for every query it
// materialises the full row of scores, applies softcap and mask, takes a
// float32-accumulated softmax and sums the values. It is deliberately
// plain; every faster backend is tested against it and the conformance
// suite's float64 reference.
package native

import (
	"math"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// Entry registers the backend.
var Entry = attention.Entry{
	Name:        "native",
	Description: "reference: materialised scores, float32 softmax, token-indexed KV",
	Caps:        attention.CPUCaps,
	New:         func(opts attention.Options) (attention.Backend, error) { return &Backend{opts: opts}, nil },
}

// Backend keeps only scratch space; the token slots come from the batch.
type Backend struct {
	opts   attention.Options // Output: where layer outputs go
	scores []float32
	kv     attention.SeqKV
}

func (*Backend) Name() string { return "native" }

func (*Backend) Plan(b *forward.Batch) error { return nil }

// Extend and Decode share one loop: a decode is an extend of length 1.
func (be *Backend) Extend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

func (be *Backend) Decode(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

func (be *Backend) attend(qt, kt, vt tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	in, err := attention.HostQKV(qt, kt, vt, layer, b)
	if err != nil {
		return tensor.T{}, err
	}
	attention.StoreKV(&in, layer, b)
	q := in.Q
	dk, dv := layer.HeadDim, layer.HeadDimV
	group := layer.NumHeads / layer.NumKVHeads
	out := be.opts.NewOutput(b.NumTokens(), layer.NumHeads*dv)
	negInf := float32(math.Inf(-1))

	for r := range b.NumReqs() {
		be.kv.Reset(&in, layer, b, r)
		for t := range int(b.ExtendLens[r]) {
			row := int(b.ExtendStarts[r]) + t
			vis := attention.Visible(b, layer, r, t)
			if cap(be.scores) < vis.Hi-vis.Lo {
				be.scores = make([]float32, vis.Hi-vis.Lo)
			}
			scores := be.scores[:vis.Hi-vis.Lo]
			for h := range layer.NumHeads {
				kvh := h / group
				qh := q.Row(row)[h*dk : (h+1)*dk]
				for j := vis.Lo; j < vis.Hi; j++ {
					if !vis.Sees(j) {
						scores[j-vis.Lo] = negInf
						continue
					}
					kh := be.kv.K(j, 1)[kvh*dk : (kvh+1)*dk]
					var s float32
					for d := range dk {
						s += qh[d] * kh[d]
					}
					s *= layer.Scale
					if c := layer.LogitSoftcap; c > 0 {
						s = c * float32(math.Tanh(float64(s/c)))
					}
					scores[j-vis.Lo] = s
				}
				m, sum := expScores(scores)
				if sum == 0 {
					continue // nothing visible (cannot happen: a query sees itself)
				}
				norm := layer.Normalizer(h, m, sum)
				oh := out.Row(row)[h*dv : (h+1)*dv]
				for j := vis.Lo; j < vis.Hi; j++ {
					p := scores[j-vis.Lo] * norm
					if p == 0 {
						continue
					}
					vh := be.kv.V(j, 1)[kvh*dv : (kvh+1)*dv]
					for d := range dv {
						oh[d] += p * vh[d]
					}
				}
			}
		}
	}
	return out.T(), nil
}

// expScores replaces the scores x by e^(x−m), m their max, and returns m
// and their sum, the unnormalised softmax that Layer.Normalizer completes;
// masked entries are -Inf and become 0. A row with nothing visible is all
// 0 with sum 0.
func expScores(x []float32) (m, sum float32) {
	m = float32(math.Inf(-1))
	for _, s := range x {
		m = max(m, s)
	}
	if math.IsInf(float64(m), -1) {
		clear(x)
		return m, 0
	}
	for i, s := range x {
		e := float32(math.Exp(float64(s - m)))
		x[i] = e
		sum += e
	}
	return m, sum
}
