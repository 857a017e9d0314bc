package gpu

import (
	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cuda"
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
	if tc, ok := rt.decodeTC(p, layer, dt); ok && rt.UsesDecode(p, layer, dt) {
		if n := rt.DecodeSplits; n > 0 { // a measurement's setting
			return FixedSplit(SeqBucket(p.MaxSeq), n)
		}
		group := layer.NumHeads / layer.NumKVHeads
		return ChooseStreamSplit(rt.Dev.Info.SMs, rt.Blocks(p, layer, dt), SeqBucket(p.MaxSeq), tc.keyBytes, group*layer.HeadDimV*4)
	}
	if mk, ok := rt.mlaDecode(p, layer, dt); ok {
		if mk.wg {
			if n := rt.DecodeSplits; n > 0 {
				return FixedSplit(SeqBucket(p.MaxSeq), n)
			}
			// One block per SM; the fill is about two K tiles' time, and
			// a split block writes its 64 heads' partials and log-sum-exps.
			return ChooseWaveSplit(rt.Dev.Info.SMs, rt.Blocks(p, layer, dt), SeqBucket(p.MaxSeq), 2*mlaDK, 2*mlaWGKeys*mlaRow,
				mlaWGHeads*(mlaDV+1)*4)
		}
		// attn_merge combines the partials a block per (token, head), so a
		// split costs the merge one head's partial, not the block's.
		return ChooseStreamSplit(rt.Dev.Info.SMs, rt.Blocks(p, layer, dt), SeqBucket(p.MaxSeq), 2*mlaDK, mlaDV*4)
	}
	if rt.UsesDecode(p, layer, dt) {
		return ChooseDecodeSplit(rt.Dev.Info.SMs, rt.Blocks(p, layer, dt), SeqBucket(p.MaxSeq))
	}
	return ChooseSplit(rt.Dev.Info.SMs, rt.Blocks(p, layer, dt), SeqBucket(p.MaxSeq))
}

// FixedSplit is n chunks of maxSeq keys, each a multiple of 16 (the
// tensor-core decode's), or one split for n <= 1.
func FixedSplit(maxSeq, n int) Split {
	if n <= 1 {
		return Split{Splits: 1}
	}
	chunk := ((maxSeq+n-1)/n + 15) / 16 * 16
	return Split{Splits: (maxSeq + chunk - 1) / chunk, Chunk: chunk}
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

func (f *Fused) attend(qt, kt, vt tensor.T, layer *attention.Layer, b *forward.Batch, decode bool) (tensor.T, error) {
	out, err := f.attendDevice(qt, kt, vt, layer, b, decode)
	return out.T(), err
}

func (f *Fused) attendDevice(qt, kt, vt tensor.T, layer *attention.Layer, b *forward.Batch, decode bool) (tensor.Device, error) {
	q, k, v, err := CheckDevice(qt, kt, vt, layer, b)
	if err != nil {
		return tensor.Device{}, err
	}
	p, err := f.planner.For(b)
	if err != nil {
		return tensor.Device{}, err
	}
	if b.Mode != forward.Encode && f.rt.StoresKV(p, layer, q.DType) {
		// the decode kernel stores the new k and v itself
		return f.rt.AttendStoring(p, q, k, v, layer, b, f.policy(f.rt, p, layer, q.DType, decode))
	}
	if b.Mode != forward.Encode {
		if err := f.rt.StoreKV(p, k, v, layer, b.KV.Pool); err != nil {
			return tensor.Device{}, err
		}
	}
	if q.DType == tensor.F32 && b.Mode != forward.Encode && halfKV(b.KV.Pool.Spec.DType) && f.rt.UsesMMA(layer, tensor.BF16) &&
		!f.rt.UsesDecode(p, layer, q.DType) {
		return f.attendHalf(p, q, k, v, layer, b, decode)
	}
	return f.rt.Attend(p, q, k, v, layer, b, KernelAuto, f.policy(f.rt, p, layer, q.DType, decode))
}

// halfKV reports a KV cache the tensor-core kernel reads (16 or 8 bits).
func halfKV(dt tensor.DType) bool { return dt == tensor.BF16 || dt == tensor.FP8E4M3 }

// attendHalf runs float32 queries over a 16- or 8-bit KV cache on the
// tensor cores: q is rounded to bf16 (the cache already holds keys and
// values at that precision or below), the kernel attends in bf16 with
// float32 softmax and accumulation, and the output comes back as float32
// (or, where the layer's output feeds only a linear layer, as the bf16
// the kernel wrote).
// The CUDA-core kernel would read the same cache many times slower.
func (f *Fused) attendHalf(p *Plan, q, k, v tensor.Device, layer *attention.Layer, b *forward.Batch, decode bool) (tensor.Device, error) {
	rt := f.rt
	n := q.Len()
	q16, err := rt.scratch(2 * n)
	if err != nil {
		return tensor.Device{}, err
	}
	defer rt.release(q16)
	if err := rt.Kernels.Convert(rt.Stream, q16.Ptr, cuda.DevicePtr(q.Ptr), n, tensor.F32, tensor.BF16); err != nil {
		return tensor.Device{}, err
	}
	qh := tensor.Device{Shape: q.Shape, Ptr: uintptr(q16.Ptr), DType: tensor.BF16}
	out16, err := rt.Attend(p, qh, k, v, layer, b, KernelAuto, f.policy(rt, p, layer, tensor.BF16, decode))
	if err != nil {
		return tensor.Device{}, err
	}
	if layer.OutToLinear {
		return out16, nil
	}
	defer rt.FreeTensor(out16.T())
	m := out16.Len()
	buf, err := rt.allocOutput(4 * m)
	if err != nil {
		return tensor.Device{}, err
	}
	out := tensor.Device{Shape: out16.Shape, Ptr: uintptr(buf.Ptr), DType: tensor.F32}
	if err := rt.Kernels.Convert(rt.Stream, buf.Ptr, cuda.DevicePtr(out16.Ptr), m, tensor.BF16, tensor.F32); err != nil {
		rt.FreeOutput(out)
		return tensor.Device{}, err
	}
	return out, nil
}

// Close frees the planner's buffers.
func (f *Fused) Close() error { return f.planner.Close() }
