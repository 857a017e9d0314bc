package gpu

import (
	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// SplitPolicy decides how a layer's keys are split (see Split); decode
// tells a Decode call from an Extend.
type SplitPolicy func(rt *Runtime, p *Plan, layer *attention.Layer, dt tensor.DType, decode bool) Split

// NoSplit attends every query in one pass over its keys.
func NoSplit(*Runtime, *Plan, *attention.Layer, tensor.DType, bool) Split { return Split{Splits: 1} }

// FillGPU splits the keys when the queries alone give too few blocks to
// fill the GPU (ChooseSplit). The split follows the longest sequence
// rounded up to a power of two, so a decoding batch keeps one split (and
// one CUDA graph) while its sequences grow to the next power of two.
func FillGPU(rt *Runtime, p *Plan, layer *attention.Layer, dt tensor.DType, _ bool) Split {
	return ChooseSplit(rt.Dev.Info.SMs, rt.Blocks(p, layer, dt), SeqBucket(p.MaxSeq))
}

// SeqBucket rounds a sequence length up to a power of two (at least 64).
func SeqBucket(n int) int {
	b := 64
	for b < n {
		b *= 2
	}
	return b
}

// Fused is a backend over the fused kernels: the flash and splitkv CUDA
// entries are this type with different split policies, so the mode
// handling, KV store and planning live in one place.
type Fused struct {
	name    string
	rt      *Runtime
	planner *Planner
	policy  SplitPolicy
}

// NewFused builds a fused-kernel backend on rt.
func NewFused(name string, rt *Runtime, policy SplitPolicy) *Fused {
	return &Fused{name: name, rt: rt, planner: NewPlanner(rt), policy: policy}
}

func (f *Fused) Name() string { return f.name }

// Plan uploads the forward's plan; every layer reuses it.
func (f *Fused) Plan(b *forward.Batch) error {
	_, err := f.planner.Plan(b)
	return err
}

func (f *Fused) Extend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return f.attend(q, k, v, layer, b, false)
}

func (f *Fused) Decode(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return f.attend(q, k, v, layer, b, true)
}

func (f *Fused) attend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch, decode bool) (tensor.T, error) {
	if err := CheckShapes(q, k, v, layer, b); err != nil {
		return tensor.T{}, err
	}
	p, err := f.planner.For(b)
	if err != nil {
		return tensor.T{}, err
	}
	if b.Mode != forward.Encode {
		if err := f.rt.StoreKV(p, k, v, layer, b.KV.Pool); err != nil {
			return tensor.T{}, err
		}
	}
	return f.rt.Attend(p, q, k, v, layer, b, KernelAuto, f.policy(f.rt, p, layer, q.DType, decode))
}

// Close frees the planner's buffers.
func (f *Fused) Close() error { return f.planner.Close() }
