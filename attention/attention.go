// Package attention is the contract between models and attention kernels.
//
// A model calls Run once per layer; Run dispatches on the batch mode to the
// backend's Extend or Decode. A backend stores the new tokens' K/V in the
// pool and attends each query over its request's whole sequence. Which
// backend serves which forward is decided once, by Resolve, from the
// capabilities each registry Entry declares.
package attention

import (
	"fmt"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// Layer is what a backend needs to know about one attention layer.
type Layer struct {
	Index      int
	NumHeads   int
	NumKVHeads int // NumHeads % NumKVHeads == 0 (GQA/MQA when smaller)
	HeadDim    int // of Q and K
	HeadDimV   int // of V and the output
	Scale      float32
	// SlidingWindow: a query at sequence index i attends keys j with
	// i-SlidingWindow < j <= i; 0 means full causal attention.
	SlidingWindow int
	// LogitSoftcap: scores become cap*tanh(score/cap); 0 disables.
	LogitSoftcap float32
}

// Backend computes attention for the layers of one model on one device.
//
// Shapes (T = new tokens of the batch, grouped by request):
//
//	q:   [T, NumHeads*HeadDim]
//	k:   [T, NumKVHeads*HeadDim]
//	v:   [T, NumKVHeads*HeadDimV]
//	out: [T, NumHeads*HeadDimV]
type Backend interface {
	Name() string
	// Plan prepares what every layer of this forward shares. Called once
	// per forward, before layer 0.
	Plan(b *forward.Batch) error
	// Extend: prefill, prefill over a cached prefix, mixed and verify
	// batches. Stores k, v at b.OutSlots, then attends causally over each
	// request's whole sequence.
	Extend(q, k, v tensor.T, layer *Layer, b *forward.Batch) (tensor.T, error)
	// Decode: one new token per request.
	Decode(q, k, v tensor.T, layer *Layer, b *forward.Batch) (tensor.T, error)
}

// Run is the one place that maps a batch mode to a backend call.
func Run(be Backend, q, k, v tensor.T, layer *Layer, b *forward.Batch) (tensor.T, error) {
	switch {
	case b.Mode == forward.Decode:
		return be.Decode(q, k, v, layer, b)
	case b.Mode.IsExtendLike():
		return be.Extend(q, k, v, layer, b)
	}
	return tensor.T{}, fmt.Errorf("attention: nothing to run for a %v batch", b.Mode)
}

// CheckShapes verifies q, k, v against the layer and batch; every backend
// calls it so a model bug is reported with shapes, not as a slice panic.
func CheckShapes(q, k, v tensor.T, layer *Layer, b *forward.Batch) error {
	n := b.NumTokens()
	want := [3][2]int{{n, layer.NumHeads * layer.HeadDim}, {n, layer.NumKVHeads * layer.HeadDim}, {n, layer.NumKVHeads * layer.HeadDimV}}
	for i, t := range [3]tensor.T{q, k, v} {
		if len(t.Data) != want[i][0]*want[i][1] {
			return fmt.Errorf("attention layer %d: %c has %d values, want [%d, %d]", layer.Index, "qkv"[i], len(t.Data), want[i][0], want[i][1])
		}
	}
	if layer.NumKVHeads <= 0 || layer.NumHeads%layer.NumKVHeads != 0 {
		return fmt.Errorf("attention layer %d: %d heads not divisible by %d KV heads", layer.Index, layer.NumHeads, layer.NumKVHeads)
	}
	return nil
}

// StoreKV writes the new tokens' k and v into the pool at b.OutSlots.
func StoreKV(k, v tensor.T, layer *Layer, b *forward.Batch) {
	pool := b.KV.Pool
	for t, slot := range b.OutSlots {
		copy(pool.KRow(layer.Index, slot), k.Row(t))
		copy(pool.VRow(layer.Index, slot), v.Row(t))
	}
}

// KeyRange is the half-open range [lo, hi) of sequence indices that the
// query at sequence index i attends under causality and the layer's window.
func KeyRange(i int, layer *Layer) (lo, hi int) {
	hi = i + 1
	if layer.SlidingWindow > 0 {
		lo = max(0, hi-layer.SlidingWindow)
	}
	return lo, hi
}
