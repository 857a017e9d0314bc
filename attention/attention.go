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
	"math"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
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
	// Sinks, when set, holds one learned logit per query head
	// ([NumHeads], GPT-OSS's attention sinks): it joins the softmax
	// denominator of every query of the head but has no value, so
	// out = Σ_j e^(s_j)·v_j / (Σ_j e^(s_j) + e^(sink)). It is not scaled
	// or softcapped. nil: no sinks.
	Sinks []float32
	// MLA: the layer attends over a latent cache (DeepSeek's multi-head
	// latent attention in its absorbed form). There is one KV "head" of
	// HeadDim = kv_lora_rank + rope dims shared by all heads; the value is
	// its first HeadDimV (= kv_lora_rank) values, and v is not passed.
	MLA bool
	// OutToLinear: the output feeds only a linear layer (o_proj), whose
	// device may take it in 16 bits; a backend that computed it in bf16
	// may then return it so (tensor.BF16) rather than widen it to float32
	// for the linear to round it back. Other backends ignore it.
	OutToLinear bool
}

// Backend computes attention for the layers of one model on one device.
//
// Shapes (T = new tokens of the batch, grouped by request):
//
//	q:   [T, NumHeads*HeadDim]
//	k:   [T, NumKVHeads*HeadDim]
//	v:   [T, NumKVHeads*HeadDimV]   (empty for MLA layers)
//	out: [T, NumHeads*HeadDimV]
//
// Which keys a query sees is decided by Visible, shared by all backends.
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

// Sink is head h's sink logit, or -Inf without sinks (a sink of weight 0).
func (l *Layer) Sink(h int) float32 {
	if l.Sinks == nil {
		return float32(math.Inf(-1))
	}
	return l.Sinks[h]
}

// Normalizer is the factor that turns an unnormalised softmax row of head
// h into the output: with the visible keys' scores s_j, m ≥ max s_j (a
// running max) and sum = Σ_j e^(s_j−m), the output Σ_j e^(s_j−m)·v_j times
// Normalizer is the softmax-weighted sum of the values, the sink included
// in the denominator. Without a sink it is 1/sum exactly; with one it is
// e^(m−M)/(sum·e^(m−M) + e^(sink−M)), M = max(m, sink), which cannot
// overflow however large the sink. sum must be positive (a row that sees
// nothing stays zero, as the reference gives).
func (l *Layer) Normalizer(h int, m, sum float32) float32 {
	if l.Sinks == nil {
		return 1 / sum
	}
	sink := l.Sinks[h]
	top := max(m, sink)
	a := float32(math.Exp(float64(m - top)))
	return a / (sum*a + float32(math.Exp(float64(sink-top))))
}

// Run is the one place that maps a batch mode to a backend call.
func Run(be Backend, q, k, v tensor.T, layer *Layer, b *forward.Batch) (tensor.T, error) {
	switch {
	case b.Mode == forward.Decode:
		return be.Decode(q, k, v, layer, b)
	case b.Mode.IsExtendLike() || b.Mode == forward.Encode:
		return be.Extend(q, k, v, layer, b)
	}
	return tensor.T{}, fmt.Errorf("attention: nothing to run for a %v batch", b.Mode)
}

// Shaped is what CheckShapes reads of q, k and v: how many values each
// holds and its row width (0: not recorded). tensor.T implements it for
// host and device storage alike (Len, Width).
type Shaped interface {
	Len() int
	Width() int
}

// CheckShapes verifies q, k, v against the layer and batch, wherever their
// values live; every backend calls it (through HostQKV, or
// gpu.CheckDevice) so a model bug is reported with shapes, not as a slice
// panic or a kernel reading out of bounds.
//
//	q: [n, NumHeads*HeadDim]   k: [n, NumKVHeads*HeadDim]   v: [n, NumKVHeads*HeadDimV], none for MLA
func CheckShapes(q, k, v Shaped, layer *Layer, b *forward.Batch) error {
	n := b.NumTokens()
	want := [3][2]int{{n, layer.NumHeads * layer.HeadDim}, {n, layer.NumKVHeads * layer.HeadDim}, {n, layer.NumKVHeads * layer.HeadDimV}}
	if layer.MLA {
		if layer.NumKVHeads != 1 || layer.HeadDimV > layer.HeadDim {
			return fmt.Errorf("attention layer %d: MLA needs one latent KV head with HeadDimV <= HeadDim", layer.Index)
		}
		if v.Len() != 0 {
			return fmt.Errorf("attention layer %d: an MLA layer takes no v (its values are the latent keys)", layer.Index)
		}
		want[2] = [2]int{0, 0}
	}
	for i, t := range [3]Shaped{q, k, v} {
		l, w := t.Len(), t.Width()
		if l != want[i][0]*want[i][1] || (l > 0 && w != 0 && w != want[i][1]) {
			return fmt.Errorf("attention layer %d: %c has %d values in rows of %d, want [%d, %d]", layer.Index, "qkv"[i], l, w, want[i][0], want[i][1])
		}
	}
	if layer.Sinks != nil && len(layer.Sinks) != layer.NumHeads {
		return fmt.Errorf("attention layer %d: %d sinks for %d heads", layer.Index, len(layer.Sinks), layer.NumHeads)
	}
	if layer.NumKVHeads <= 0 || layer.NumHeads%layer.NumKVHeads != 0 {
		return fmt.Errorf("attention layer %d: %d heads not divisible by %d KV heads", layer.Index, layer.NumHeads, layer.NumKVHeads)
	}
	if b.Mode != forward.Encode {
		spec := b.KV.Pool.Spec
		if spec.KWidth() != want[1][1] || spec.HeadDimV != layer.HeadDimV || spec.SharedV != layer.MLA {
			return fmt.Errorf("attention layer %d: KV pool layout %+v does not match the layer", layer.Index, spec)
		}
	}
	return nil
}

// HostArgs is what a CPU backend's code takes of one layer call: q, k
// and v as host views, and the host storage of the batch's KV pool (nil
// in Encode mode, which has no cache).
type HostArgs struct {
	Q, K, V tensor.Host
	KV      *kvcache.HostPool
}

// HostQKV is CheckShapes for a CPU backend: q, k and v as host views and
// the pool's host storage, or an error when one of them is in device
// memory or the shapes do not fit.
func HostQKV(q, k, v tensor.T, layer *Layer, b *forward.Batch) (HostArgs, error) {
	var a HostArgs
	var hs [3]tensor.Host
	for i, t := range [3]tensor.T{q, k, v} {
		var err error
		if hs[i], err = t.Host(); err != nil {
			return a, fmt.Errorf("attention layer %d: %c is in device memory; a CPU backend reads host tensors", layer.Index, "qkv"[i])
		}
	}
	if err := CheckShapes(hs[0], hs[1], hs[2], layer, b); err != nil {
		return a, err
	}
	if b.Mode != forward.Encode {
		kv, err := b.KV.Pool.Host()
		if err != nil {
			return a, fmt.Errorf("attention layer %d: %w", layer.Index, err)
		}
		a.KV = kv
	}
	a.Q, a.K, a.V = hs[0], hs[1], hs[2]
	return a, nil
}

// StoreKV writes the new tokens' k and v into the pool at b.OutSlots
// (nothing in Encode mode, which has no cache).
func StoreKV(a *HostArgs, layer *Layer, b *forward.Batch) { StoreKVSplit(a, layer, b, nil) }

// StoreKVSplit is StoreKV with the tokens divided among workers by split,
// a parallel for such as device.Workers.For (nil: serially). A decode step's
// new slots are often memory the process has never touched (the pool is
// allocated lazily by the kernel), so the stores are mostly page faults
// that other cores can take at the same time.
func StoreKVSplit(a *HostArgs, layer *Layer, b *forward.Batch, split func(n, minChunk int, fn func(lo, hi int))) {
	if b.Mode == forward.Encode {
		return
	}
	pool := a.KV
	store := func(lo, hi int) {
		for t := lo; t < hi; t++ {
			slot := b.OutSlots[t]
			pool.StoreK(layer.Index, slot, a.K.Row(t))
			if !layer.MLA {
				pool.StoreV(layer.Index, slot, a.V.Row(t))
			}
		}
	}
	if split == nil {
		store(0, len(b.OutSlots))
		return
	}
	split(len(b.OutSlots), 4, store)
}

// Visibility is the set of keys one query attends: sequence indices in
// [Lo, Hi), minus those whose Mask entry (indexed by key j) is false.
type Visibility struct {
	Lo, Hi int
	Mask   []bool // nil: all of [Lo, Hi)
}

// Sees reports whether key j is visible (for j in [Lo, Hi)).
func (v Visibility) Sees(j int) bool { return v.Mask == nil || v.Mask[j] }

// Visible is the one rule for which keys the new token t of request r
// attends: causal up to itself; the whole sequence in Encode mode; to the
// end of its bidirectional span; the custom mask when the request has one;
// and never further back than the layer's sliding window.
func Visible(b *forward.Batch, layer *Layer, r, t int) Visibility {
	i := int(b.PrefixLens[r]) + t // the query's sequence index
	v := Visibility{Hi: i + 1}
	if b.Mode == forward.Encode {
		v.Hi = b.SeqLen(r)
	}
	for _, s := range b.Spans {
		if int(s.Req) == r && int(s.Start) <= i && i < int(s.End) {
			v.Hi = max(v.Hi, int(s.End))
		}
	}
	if mask := b.MaskRow(r, t); mask != nil {
		v.Mask, v.Hi = mask, b.SeqLen(r)
	}
	if layer.SlidingWindow > 0 {
		v.Lo = max(0, i+1-layer.SlidingWindow)
	}
	return v
}
