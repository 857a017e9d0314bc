package kvcache

import "fmt"

// Spec is the per-token KV layout of one model.
type Spec struct {
	NumLayers  int
	NumKVHeads int
	HeadDim    int // width of one K head
	HeadDimV   int // width of one V head (may differ from HeadDim)
}

// BytesPerToken is the float32 storage of one token over all layers.
func (s Spec) BytesPerToken() int {
	return s.NumLayers * s.NumKVHeads * (s.HeadDim + s.HeadDimV) * 4
}

// Pool stores K and V for every slot of every layer, float32.
//
//	K[layer]: [NumSlots, NumKVHeads*HeadDim]
//	V[layer]: [NumSlots, NumKVHeads*HeadDimV]
type Pool struct {
	Spec     Spec
	NumSlots int
	K, V     [][]float32
}

// NewPool allocates numSlots slots per layer.
func NewPool(spec Spec, numSlots int) (*Pool, error) {
	if spec.NumLayers <= 0 || spec.NumKVHeads <= 0 || spec.HeadDim <= 0 || spec.HeadDimV <= 0 {
		return nil, fmt.Errorf("invalid KV spec %+v", spec)
	}
	p := &Pool{Spec: spec, NumSlots: numSlots, K: make([][]float32, spec.NumLayers), V: make([][]float32, spec.NumLayers)}
	for l := range spec.NumLayers {
		p.K[l] = make([]float32, numSlots*spec.NumKVHeads*spec.HeadDim)
		p.V[l] = make([]float32, numSlots*spec.NumKVHeads*spec.HeadDimV)
	}
	return p, nil
}

// KRow is the K vector of all KV heads of one slot in one layer.
func (p *Pool) KRow(layer int, slot int32) []float32 {
	w := p.Spec.NumKVHeads * p.Spec.HeadDim
	return p.K[layer][int(slot)*w : int(slot+1)*w]
}

// VRow is the V vector of all KV heads of one slot in one layer.
func (p *Pool) VRow(layer int, slot int32) []float32 {
	w := p.Spec.NumKVHeads * p.Spec.HeadDimV
	return p.V[layer][int(slot)*w : int(slot+1)*w]
}
