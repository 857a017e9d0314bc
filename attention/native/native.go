// Package native is the reference attention backend: for every query it
// materialises the full row of scores, applies softcap and mask, takes a
// float32-accumulated softmax and sums the values. It is deliberately
// plain; every faster backend is tested against it.
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
	Caps: attention.Caps{
		Devices:       []string{"cpu"},
		PageSizes:     attention.PageSizes{Any: true},
		KVDTypes:      []tensor.DType{tensor.F32},
		SlidingWindow: true,
	},
	New: func(opts attention.Options) (attention.Backend, error) { return &Backend{}, nil },
}

// Backend is stateless: the token slots come straight from the batch.
type Backend struct {
	scores []float32 // scratch, one row of scores
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

func (be *Backend) attend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	if err := attention.CheckShapes(q, k, v, layer, b); err != nil {
		return tensor.T{}, err
	}
	attention.StoreKV(k, v, layer, b)
	pool := b.KV.Pool
	dk, dv := layer.HeadDim, layer.HeadDimV
	group := layer.NumHeads / layer.NumKVHeads
	out := tensor.New(b.NumTokens(), layer.NumHeads*dv)

	for r := range b.NumReqs() {
		slots := b.SeqSlots(r)
		prefix := int(b.PrefixLens[r])
		for t := range int(b.ExtendLens[r]) {
			row := int(b.ExtendStarts[r]) + t
			lo, hi := attention.KeyRange(prefix+t, layer)
			if cap(be.scores) < hi-lo {
				be.scores = make([]float32, hi-lo)
			}
			scores := be.scores[:hi-lo]
			for h := range layer.NumHeads {
				kvh := h / group
				qh := q.Row(row)[h*dk : (h+1)*dk]
				for j := lo; j < hi; j++ {
					kh := pool.KRow(layer.Index, slots[j])[kvh*dk : (kvh+1)*dk]
					var s float32
					for d := range dk {
						s += qh[d] * kh[d]
					}
					s *= layer.Scale
					if c := layer.LogitSoftcap; c > 0 {
						s = c * float32(math.Tanh(float64(s/c)))
					}
					scores[j-lo] = s
				}
				softmax(scores)
				oh := out.Row(row)[h*dv : (h+1)*dv]
				for j := lo; j < hi; j++ {
					vh := pool.VRow(layer.Index, slots[j])[kvh*dv : (kvh+1)*dv]
					p := scores[j-lo]
					for d := range dv {
						oh[d] += p * vh[d]
					}
				}
			}
		}
	}
	return out, nil
}

func softmax(x []float32) {
	m := float32(math.Inf(-1))
	for _, s := range x {
		m = max(m, s)
	}
	var sum float32
	for i, s := range x {
		e := float32(math.Exp(float64(s - m)))
		x[i] = e
		sum += e
	}
	for i := range x {
		x[i] /= sum
	}
}
