package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// The per-forward methods of ModelOps. Each checks its arguments on the
// caller's goroutine (pure functions below, tested without a GPU), then
// enqueues its kernels on the ModelOps stream inside one Device.Do. None
// of them synchronises except ToHost.
//
// Activations are float32 device tensors, dense and row-major: [T, width]
// for T tokens, or any shape whose last dimension is the row width.

// BeginForward starts a forward pass: the previous forward's tensors go
// back to the allocator (their queued work is on the same stream, so the
// next forward's use of the memory is ordered after it) and this forward's
// uploads start on the other staging half.
func (o *ModelOps) BeginForward() {
	o.do("BeginForward", func() error {
		o.uploads.clear()
		if o.graph.active { // a recorded forward: the same staging addresses every time (RunGraph)
			o.staging.rewind()
			return o.arena.reset()
		}
		return errors.Join(o.staging.flip(), o.arena.reset())
	})
}

// EndForward ends the forward pass. It enqueues nothing and does not wait:
// the forward's tensors stay valid until the next BeginForward, so ToHost
// may read the logits after it.
func (o *ModelOps) EndForward() {}

// NewTensor allocates an uninitialised float32 tensor of the given shape
// in this forward's arena.
func (o *ModelOps) NewTensor(shape ...int) tensor.T {
	var t tensor.T
	o.do("NewTensor", func() (err error) {
		t, err = o.newTensor(shape)
		return err
	})
	return t
}

func (o *ModelOps) newTensor(shape []int) (tensor.T, error) { return o.newTensorOf(shape, F32) }

// newTensorOf is newTensor in dt (F32, BF16 or F16).
func (o *ModelOps) newTensorOf(shape []int, dt DType) (tensor.T, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return tensor.T{}, fmt.Errorf("negative dimension in shape %v", shape)
		}
		n *= d
	}
	b, err := o.arena.alloc(ElemSize(dt) * n)
	if err != nil {
		return tensor.T{}, err
	}
	return tensor.Device{Shape: slices.Clone(shape), Ptr: uintptr(b.Ptr), DType: dt}.T(), nil
}

// Upload copies a host float32 tensor into a new device tensor of the same
// shape in this forward's arena. Up to 1 MiB goes through the pinned
// staging without waiting; larger tensors are copied synchronously,
// except in a forward recorded for a graph (an EAGLE head's features),
// whose uploads all go through the graph staging, where a replay finds
// them at the same addresses (a synchronisation would keep the forward
// out of a graph).
func (o *ModelOps) Upload(x tensor.T) tensor.T {
	if x.OnDevice() {
		must("Upload", errors.New("the tensor is already on the device"))
	}
	if len(x.HostData()) != x.NumElements() {
		must("Upload", fmt.Errorf("shape %v holds %d values, Data has %d", x.Shape, x.NumElements(), len(x.HostData())))
	}
	var t tensor.T
	o.do("Upload", func() (err error) {
		if t, err = o.newTensor(x.Shape); err != nil || len(x.HostData()) == 0 {
			return err
		}
		if 4*len(x.HostData()) <= 1<<20 || o.dev.Recording() {
			return o.stageCopy(DevicePtr(t.DevPtr()), x.HostData())
		}
		if err := CopyHtoDAsync(o.dev, DevicePtr(t.DevPtr()), x.HostData(), o.stream); err != nil {
			return err
		}
		return o.dev.StreamSync(o.stream)
	})
	return t
}

// Adopt makes this forward's arena own a device tensor allocated from the
// same Device.Mem elsewhere on the same stream (an attention backend's
// output), so BeginForward or Release frees it with the rest.
func (o *ModelOps) Adopt(t tensor.T) {
	o.do("Adopt", func() error { return o.arena.adopt(DevicePtr(t.DevPtr())) })
}

// Release hands tensors of this forward back to the allocator now; the
// caller promises not to use them again. A long prefill keeps its peak
// memory to a layer's worth of activations this way. Tensors the arena
// does not hold (host tensors, weights, already released) are ignored.
func (o *ModelOps) Release(ts ...tensor.T) {
	o.do("Release", func() error {
		var errs []error
		for _, t := range ts {
			if t.OnDevice() {
				_, err := o.arena.release(DevicePtr(t.DevPtr()))
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

// Mark is device.Scoped: where the tensors made from now on start.
func (o *ModelOps) Mark() int {
	var m int
	o.do("Mark", func() error { m = o.arena.mark(); return nil })
	return m
}

// ReleaseSince is device.Scoped: every tensor of this forward made since
// mark goes back to the arena, whose next requests of their size classes
// reuse them (a layer's activations serve the next layer). The uploads
// this forward caches (positions, shared by every layer) stay.
func (o *ModelOps) ReleaseSince(mark int) {
	o.do("ReleaseSince", func() error {
		return o.arena.releaseSince(mark, func(p DevicePtr) bool { return o.uploads.holds(p) })
	})
}

// ForwardAlloc takes a block of this forward's arena for the attention
// runtime (gpu.Runtime.Forward): a layer's attention output, released
// with the layer's other activations so that its block serves the next
// layer, or a scratch buffer it gives back with ForwardRelease once the
// kernels that read it are enqueued. Every block of a forward then
// comes from the arena, which hands the caching allocator's blocks back
// in the order it took them; a scratch buffer taken from the allocator
// directly and freed after a block taken later (an output the layer
// keeps) would reorder the allocator's free list, and the next forward,
// a graph's capture after its dry run, would get its buffers at other
// addresses. Call it inside a forward.
func (o *ModelOps) ForwardAlloc(bytes int) (Buffer, error) {
	var b Buffer
	err := o.dev.Do(func() (err error) {
		b, err = o.arena.alloc(bytes)
		return err
	})
	return b, err
}

// ForwardRelease gives a block ForwardAlloc took back to this forward's
// arena, whose next request of its size class reuses it (stream-ordered:
// the kernels reading it are enqueued first). A block of an earlier
// forward, already given back, is ignored.
func (o *ModelOps) ForwardRelease(b Buffer) {
	o.do("ForwardRelease", func() error {
		_, err := o.arena.release(b.Ptr)
		return err
	})
}

// ActivationPeak is device.ForwardMemory: forward runs as a dry run (its
// host code, allocating its activations for real; no kernel, copy or
// collective enqueued) and the most bytes of the caching allocator it
// held at once beyond what was in use before is returned. Its
// activations are then freed and the allocator's cache given back to the
// device. A forward that would read back to the host (MoE routing) reads
// placeholders: the peak is of its allocations, never of its values.
func (o *ModelOps) ActivationPeak(forward func() error) (int64, error) {
	var peak int64
	err := o.dev.Do(func() error {
		if err := o.arena.reset(); err != nil {
			return err
		}
		o.uploads.clear()
		mem := o.dev.Mem
		before := mem.Stats().InUse
		mem.ResetPeak()
		_, _, ferr := o.recorded(recordDry, forward)
		peak = mem.Stats().PeakInUse - before
		o.uploads.clear()
		return errors.Join(ferr, o.arena.reset(), mem.ReleaseCached())
	})
	return peak, err
}

// Held is the number of tensors and bytes this forward's arena holds
// (adopted tensors count as 0 bytes).
func (o *ModelOps) Held() (tensors, bytes int) {
	o.do("Held", func() error {
		tensors, bytes = o.arena.held()
		return nil
	})
	return
}

// stageCopy enqueues a copy of vals to dst through pinned staging.
func (o *ModelOps) stageCopy(dst DevicePtr, vals []float32) error {
	b, err := stageValues(&o.staging, vals)
	if err != nil {
		return err
	}
	return CopyHtoDAsync(o.dev, dst, b, o.stream)
}

// uploadIndex uploads int32 indices into the arena through pinned staging,
// reusing this forward's earlier upload of the same values.
func (o *ModelOps) uploadIndex(vals []int32) (DevicePtr, error) {
	if len(vals) == 0 {
		return 0, nil
	}
	if p, ok := o.uploads.find(vals); ok {
		return p, nil
	}
	b, err := o.arena.alloc(4 * len(vals))
	if err != nil {
		return 0, err
	}
	staged, err := stageValues(&o.staging, vals)
	if err != nil {
		return 0, err
	}
	if err := CopyHtoDAsync(o.dev, b.Ptr, staged, o.stream); err != nil {
		return 0, err
	}
	o.uploads.add(vals, b.Ptr)
	return b.Ptr, nil
}

// Embed gathers rows of table ([vocab, hidden], the weight dtype) for ids:
// [len(ids), hidden] float32. An id outside [0, vocab) gives a zero row.
func (o *ModelOps) Embed(table device.Matrix, ids []int32) tensor.T {
	const op = "Embed"
	m := asMatrix(op, table)
	if m.fp8 != nil {
		must(op, fmt.Errorf("an FP8 matrix [%d, %d] is not an embedding table", m.out, m.in))
	}
	var out tensor.T
	o.do(op, func() (err error) {
		if out, err = o.newTensor([]int{len(ids), m.in}); err != nil {
			return err
		}
		dIDs, err := o.uploadIndex(ids)
		if err != nil {
			return err
		}
		if m.quant != nil && len(ids) > 0 {
			return o.k.QEmbed(o.stream, DevicePtr(out.DevPtr()), dIDs, len(ids), m)
		}
		return o.k.Embedding(o.stream, DevicePtr(out.DevPtr()), m.ptr, dIDs, len(ids), m.in, m.out, m.dtype, F32, 1)
	})
	return out
}

// Linear is x·Wᵀ + b: x [..., In] → [..., Out], float32.
func (o *ModelOps) Linear(x tensor.T, m device.Matrix) tensor.T {
	return o.linear("Linear", x, []device.Matrix{m})[0]
}

// LinearGroup applies several matrices to the same x ([..., In] each →
// [..., Out_i]); with 16-bit weights x is rounded to their type once for
// all.
func (o *ModelOps) LinearGroup(x tensor.T, ms ...device.Matrix) []tensor.T {
	return o.linear("LinearGroup", x, ms)
}

// LinearAdd sets dst += x·Wᵀ + b: the residual add rides on the linear
// (the skinny kernel's store, or cuBLASLt's beta = 1).
func (o *ModelOps) LinearAdd(dst, x tensor.T, m device.Matrix) {
	o.linearTo("LinearAdd", dst, x, m, true)
}

// LinearInto sets dst = x·Wᵀ + b (device.OverwriteOps).
func (o *ModelOps) LinearInto(dst, x tensor.T, m device.Matrix) {
	o.linearTo("LinearInto", dst, x, m, false)
}

// linearTo writes x·Wᵀ + b into dst, or adds it to dst when accumulate.
func (o *ModelOps) linearTo(op string, dst, x tensor.T, m device.Matrix, accumulate bool) {
	mat := asMatrix(op, m)
	must(op, checkActivation("dst", dst))
	if want := withCols(x.Shape, mat.out); !slices.Equal(dst.Shape, want) {
		must(op, fmt.Errorf("dst %v, x·Wᵀ %v", dst.Shape, want))
	}
	if x.DType != F32 && !takes16(x, mat) && !fp8Takes16(x, mat) {
		x = o.widen(op, x)
	}
	if x.DType == F32 && o.fuses(x, mat.in, []*Matrix{mat}, GemvRound, 0) {
		o.fusedGemv(op, x, mat.in, []*Matrix{mat}, GemvRound, 0, 0, []tensor.T{dst}, accumulate)
		return
	}
	must(op, checkLinearInput(x, mat))
	o.linearInto(op, x, []*Matrix{mat}, []tensor.T{dst}, accumulate)
}

// NormLinearGroup is LinearGroup(RMSNorm(x, w, eps), ms...) with the norm
// over whole rows (w.Len() == the row width). For a decode batch the skinny
// kernel normalises x as it stages it, so the normalised rows are never
// written out.
func (o *ModelOps) NormLinearGroup(x tensor.T, w device.Vector, eps float64, ms ...device.Matrix) []tensor.T {
	const op = "NormLinearGroup"
	v, mats := normLinearArgs(op, x, w, ms)
	if quantFuses(x.Rows(), v.n, mats, DevicePtr(x.DevPtr())) {
		outs := o.newOutputs(op, x, mats)
		o.do(op, func() error {
			return o.quantNormGroups(DevicePtr(x.DevPtr()), x.Rows(), v.ptr, float32(eps), mats, tensorPtrs(outs))
		})
		return outs
	}
	if !o.fuses(x, v.n, mats, GemvRMSNorm, v.ptr) {
		if dt, ok := gemmInput16(x.Rows(), mats...); ok {
			return o.normLinear16(op, x, v, eps, mats, dt)
		}
		return o.LinearGroup(o.RMSNorm(x, w, eps), ms...)
	}
	outs := o.newOutputs(op, x, mats)
	o.fusedGemv(op, x, v.n, mats, GemvRMSNorm, v.ptr, float32(eps), outs, false)
	return outs
}

// NormLinearGroup16 is NormLinearGroup with the products in dt (BF16 or
// F16) where each takes a cuBLASLt GEMM of its own from the norm's dt
// output (normLinear16Applies: a prefill's rows, plain matrices of dt
// without a bias): the GEMMs accumulate in float32 and round once, where a
// 16-bit PyTorch model rounds q, k and v. Elsewhere (a decode batch, a
// bias, FP8 or compact weights, float32 weights) the results are
// NormLinearGroup's float32 ones: the caller reads each result's DType.
// A model asks for it only where every reader of the results takes 16
// bits: RopeQK and the CUDA attention backends, for q, k and v.
func (o *ModelOps) NormLinearGroup16(x tensor.T, w device.Vector, eps float64, dt DType, ms ...device.Matrix) []tensor.T {
	const op = "NormLinearGroup16"
	v, mats := normLinearArgs(op, x, w, ms)
	rows := x.Rows()
	if fp8Scaled(rows, mats...) && (dt == BF16 || dt == F16) {
		return o.fp8NormLinear16(op, x, v, eps, mats, dt)
	}
	if !normLinear16Applies(rows, mats, dt) {
		return o.NormLinearGroup(x, w, eps, ms...)
	}
	var outs []tensor.T
	o.do(op, func() (err error) {
		if outs, err = o.outputsOf(x, mats, dt); err != nil {
			return err
		}
		x16, err := o.norm16(x, v, eps, dt)
		if err != nil {
			return err
		}
		defer o.dev.Mem.Free(x16) // once the GEMMs that read it are enqueued (one stream)
		for i, m := range mats {
			if err := o.gemmTo(x16.Ptr, rows, m, DevicePtr(outs[i].DevPtr()), dt, false); err != nil {
				return err
			}
		}
		return nil
	})
	return outs
}

// fp8Scaled reports whether every one of mats is an FP8 matrix on the
// FP8Scaled path at rows rows (cuBLASLt's e4m3 GEMM, x quantised per row).
func fp8Scaled(rows int, mats ...*Matrix) bool {
	for _, m := range mats {
		if m.fp8 == nil || device.FP8PathOf(rows, m.fp8.shape) != device.FP8Scaled {
			return false
		}
	}
	return len(mats) > 0
}

// fp8NormLinear16 is NormLinearGroup16 through FP8 matrices: x normalised
// and quantised per row once (rmsnorm_f32_to_e4m3), each product's raw
// bf16 result scaled (and its bias added) into a dt output.
func (o *ModelOps) fp8NormLinear16(op string, x tensor.T, v *Vector, eps float64, mats []*Matrix, dt DType) []tensor.T {
	rows := x.Rows()
	var outs []tensor.T
	o.do(op, func() (err error) {
		if outs, err = o.outputsOf(x, mats, dt); err != nil {
			return err
		}
		var xq fp8X
		defer xq.free(o.dev.Mem)
		if err := o.normQuantFP8(&xq, x, v, eps); err != nil {
			return err
		}
		for i, m := range mats {
			if err := o.fp8Linear(m, 0, F32, DevicePtr(outs[i].DevPtr()), dt, rows, false, &xq); err != nil {
				return err
			}
		}
		return nil
	})
	return outs
}

// normQuantFP8 fills xq with float32 x RMS-normalised by v and quantised
// to e4m3 per row, for the FP8 GEMMs that read it.
func (o *ModelOps) normQuantFP8(xq *fp8X, x tensor.T, v *Vector, eps float64) (err error) {
	rows, in := x.Rows(), x.Cols()
	if xq.q, err = o.dev.Mem.Alloc(rows * in); err != nil {
		return err
	}
	if xq.sx, err = o.dev.Mem.Alloc(4 * rows); err != nil {
		return err
	}
	return o.k.NormQuantFP8(o.stream, xq.q.Ptr, xq.sx.Ptr, DevicePtr(x.DevPtr()), v.ptr, rows, in, in, float32(eps), 0)
}

// normLinearArgs checks NormLinearGroup's arguments and returns this
// package's vector and matrices.
func normLinearArgs(op string, x tensor.T, w device.Vector, ms []device.Matrix) (*Vector, []*Matrix) {
	v := asVector(op, w)
	must(op, checkActivation("x", x))
	if x.Cols() != v.n {
		must(op, fmt.Errorf("rows of %d values, norm of %d", x.Cols(), v.n))
	}
	mats := make([]*Matrix, len(ms))
	for i, m := range ms {
		mats[i] = asMatrix(op, m)
		must(op, checkLinear(x, mats[i]))
	}
	return v, mats
}

// normLinear16Applies reports whether NormLinearGroup16 writes the
// products of rows rows through mats in dt: every matrix on normLinear16's
// cuBLASLt path (gemmInput16) in dt, plain (no FP8 scales or compact
// blocks) and without a bias (added in float32), and each matrix a GEMM
// of its own (no fused product of adjacent matrices, whose split is
// float32).
func normLinear16Applies(rows int, mats []*Matrix, dt DType) bool {
	in, ok := gemmInput16(rows, mats...)
	if !ok || in != dt || fusesAdjacent(rows, mats) {
		return false
	}
	for _, m := range mats {
		if m.bias != 0 || m.fp8 != nil || m.quant != nil {
			return false
		}
	}
	return true
}

// GatedMLPAdd sets x += down(silu(gate(xn)) · up(xn)), xn = RMSNorm(x, w,
// eps): a SwiGLU MLP and its residual add. For a decode batch that is two
// launches: gate and up with the activation in their epilogue (one warp
// takes row j of both), writing h in the weights' dtype, and the down
// projection reading h directly and adding to x.
func (o *ModelOps) GatedMLPAdd(x tensor.T, w device.Vector, eps float64, gate, up, down device.Matrix) {
	o.gatedMLP("GatedMLPAdd", x, w, eps, gate, up, down, true)
}

// GatedMLPInto sets x = down(silu(gate(xn))·up(xn)) (device.OverwriteOps):
// GatedMLPAdd's launches with the down projection writing x. x is read
// (normalised) by the launches before it, which the stream runs first.
func (o *ModelOps) GatedMLPInto(x tensor.T, w device.Vector, eps float64, gate, up, down device.Matrix) {
	o.gatedMLP("GatedMLPInto", x, w, eps, gate, up, down, false)
}

var _ device.OverwriteOps = (*ModelOps)(nil)

// gatedMLP is GatedMLPAdd, or GatedMLPInto without accumulate.
func (o *ModelOps) gatedMLP(op string, x tensor.T, w device.Vector, eps float64, gate, up, down device.Matrix, accumulate bool) {
	v := asVector(op, w)
	g, u, d := asMatrix(op, gate), asMatrix(op, up), asMatrix(op, down)
	must(op, checkActivation("x", x))
	switch {
	case x.Cols() != v.n:
		must(op, fmt.Errorf("rows of %d values, norm of %d", x.Cols(), v.n))
	case g.in != x.Cols() || u.in != x.Cols() || g.out != u.out || d.in != g.out || d.out != x.Cols():
		must(op, fmt.Errorf("x of %d values through gate [%d, %d], up [%d, %d] and down [%d, %d]", x.Cols(), g.out, g.in, u.out, u.in, d.out, d.in))
	}
	rows := x.Rows()
	if quantMLP(rows, DevicePtr(x.DevPtr()), g, u, d) {
		o.do(op, func() error {
			h, err := o.arena.alloc(4 * rows * g.out)
			if err != nil {
				return err
			}
			var xq Buffer // gate's and up's x, normalised and quantised once (quantPreq)
			if quantPreq() {
				if xq, err = o.quantX(DevicePtr(x.DevPtr()), rows, g.in, GemvRMSNorm, v.ptr, float32(eps), g.dtype); err != nil {
					return err
				}
				defer o.quantXRelease(xq)
			}
			if err := o.k.QGemvSwiGLU(o.stream, DevicePtr(x.DevPtr()), v.ptr, float32(eps), rows, g, u, h.Ptr, xq.Ptr); err != nil {
				return err
			}
			_, err = o.quantLinear(0, []*Matrix{d}, []DevicePtr{DevicePtr(x.DevPtr())}, h.Ptr, rows, accumulate, nil)
			return err
		})
		return
	}
	if fp8Scaled(rows, g, u, d) && g.bias == 0 && u.bias == 0 && g.out%2 == 0 {
		// e4m3 GEMMs: the norm quantises x once for gate and up, whose raw
		// bf16 products fp8_swiglu_quant scales, multiplies and quantises
		// into the down projection's input; its pass adds to x.
		o.do(op, func() error {
			var xq, hq fp8X
			defer xq.free(o.dev.Mem)
			if err := o.normQuantFP8(&xq, x, v, eps); err != nil {
				return err
			}
			gu, err := o.dev.Mem.Alloc(2 * 2 * rows * g.out)
			if err != nil {
				return err
			}
			defer o.dev.Mem.Free(gu)
			gate, up := gu.Ptr, gu.Ptr.Add(2*rows*g.out)
			if err := errors.Join(o.fp8Raw(g, &xq, rows, gate), o.fp8Raw(u, &xq, rows, up)); err != nil {
				return err
			}
			defer hq.free(o.dev.Mem)
			if hq.q, err = o.dev.Mem.Alloc(rows * g.out); err != nil {
				return err
			}
			if hq.sx, err = o.dev.Mem.Alloc(4 * rows); err != nil {
				return err
			}
			if err := o.k.FP8SwiGLUQuant(o.stream, hq.q.Ptr, hq.sx.Ptr, gate, up, xq.sx.Ptr, g.fp8.scale, u.fp8.scale, rows, g.out, g.out); err != nil {
				return err
			}
			return o.fp8Linear(d, 0, F32, DevicePtr(x.DevPtr()), F32, rows, accumulate, &hq)
		})
		return
	}
	if dt, ok := gemmInput16(rows, g, u); ok && gemmDType(d) == dt && (d.quant == nil || rows > quantMaxRows()) && g.out%4 == 0 {
		// cuBLASLt: the norm writes the GEMMs' 16-bit input; gate and up
		// land in that dtype too, as a 16-bit PyTorch model rounds them
		// (one GEMM into [rows, 2·inter] when adjacent, else [2, rows,
		// inter]), or in float32 where biases are added; the activation
		// writes the down projection's input.
		o.do(op, func() error {
			x16, err := o.norm16(x, v, eps, dt)
			if err != nil {
				return err
			}
			defer o.dev.Mem.Free(x16) // each buffer: once its readers are enqueued
			h, err := o.dev.Mem.Alloc(rows * g.out * ElemSize(dt))
			if err != nil {
				return err
			}
			defer o.dev.Mem.Free(h)
			var gu Buffer
			switch {
			case g.bias == 0 && u.bias == 0 && g.out%8 == 0 && fusesAdjacent(rows, []*Matrix{g, u}):
				if gu, err = o.gemmAdjacent(x16.Ptr, rows, []*Matrix{g, u}, dt); err != nil {
					return err
				}
				defer o.dev.Mem.Free(gu)
				if err := o.k.GatedActVec(o.stream, SiLU, h.Ptr, gu.Ptr, gu.Ptr.Add(ElemSize(dt)*g.out), rows, g.out, 2*g.out, dt); err != nil {
					return err
				}
			case g.bias == 0 && u.bias == 0 && g.out%8 == 0: // the same rounding, two GEMMs
				if gu, err = o.dev.Mem.Alloc(2 * rows * g.out * ElemSize(dt)); err != nil {
					return err
				}
				defer o.dev.Mem.Free(gu)
				gate, up := gu.Ptr, gu.Ptr.Add(ElemSize(dt)*rows*g.out)
				if err := errors.Join(o.gemmTo(x16.Ptr, rows, g, gate, dt, false), o.gemmTo(x16.Ptr, rows, u, up, dt, false)); err != nil {
					return err
				}
				if err := o.k.GatedActVec(o.stream, SiLU, h.Ptr, gate, up, rows, g.out, g.out, dt); err != nil {
					return err
				}
			default:
				if gu, err = o.dev.Mem.Alloc(2 * rows * g.out * 4); err != nil {
					return err
				}
				defer o.dev.Mem.Free(gu)
				gate, up := gu.Ptr, gu.Ptr.Add(4*rows*g.out)
				if err := errors.Join(o.gemm(x16.Ptr, rows, g, gate, false), o.gemm(x16.Ptr, rows, u, up, false)); err != nil {
					return err
				}
				if err := o.k.GatedActTo(o.stream, SiLU, h.Ptr, gate, up, rows, g.out, g.out, dt); err != nil {
					return err
				}
			}
			return o.gemm(h.Ptr, rows, d, DevicePtr(x.DevPtr()), accumulate)
		})
		return
	}
	if !gemvFuses(rows, g.in, []*Matrix{g, u}, DevicePtr(x.DevPtr()), v.ptr) || d.dtype != g.dtype || g.out%8 != 0 ||
		d.fp8 != nil && device.FP8PathOf(rows, d.fp8.shape) != device.FP8Skinny {
		gu := o.NormLinearGroup(x, w, eps, gate, up)
		o.SiLUMul(gu[0], gu[1])
		o.linearTo(op, x, gu[0], down, accumulate)
		return
	}
	o.do(op, func() error {
		h, err := o.arena.alloc(ElemSize(gemvX(g.dtype)) * rows * g.out)
		if err != nil {
			return err
		}
		if err := o.k.GemvSwiGLU(o.stream, GemvSwiGLUCall{X: DevicePtr(x.DevPtr()), Norm: v.ptr, Eps: float32(eps), M: rows, In: g.in,
			WDType: g.dtype, H: h.Ptr, Gate: g.gemvTarget(0), Up: u.gemvTarget(0)}); err != nil {
			return err
		}
		return o.k.Gemv(o.stream, GemvCall{X: h.Ptr, M: rows, In: d.in, WDType: d.dtype, Accumulate: accumulate,
			Targets: []GemvTarget{d.gemvTarget(DevicePtr(x.DevPtr()))}})
	})
}

// newOutputs allocates x·W_iᵀ's float32 result for each matrix.
func (o *ModelOps) newOutputs(op string, x tensor.T, mats []*Matrix) []tensor.T {
	var outs []tensor.T
	o.do(op, func() (err error) {
		outs, err = o.outputsOf(x, mats, F32)
		return err
	})
	return outs
}

// outputsOf allocates x·W_iᵀ's result in dt for each matrix.
func (o *ModelOps) outputsOf(x tensor.T, mats []*Matrix, dt DType) ([]tensor.T, error) {
	outs := make([]tensor.T, len(mats))
	for i, m := range mats {
		var err error
		if outs[i], err = o.newTensorOf(withCols(x.Shape, m.out), dt); err != nil {
			return nil, err
		}
	}
	return outs, nil
}

// fuses reports whether mats on float32 x go through one staged
// skinny-kernel launch (fusedGemv) rather than the unfused ops.
func (o *ModelOps) fuses(x tensor.T, in int, mats []*Matrix, stage GemvStage, norm DevicePtr) bool {
	// (float32 weights read float32 x directly, unstaged)
	return gemvFuses(x.Rows(), in, mats, DevicePtr(x.DevPtr()), norm) && !(stage == GemvRound && mats[0].dtype == F32)
}

// fusedGemv enqueues mats on float32 x, staged by stage, in one
// skinny-kernel launch (Kernels.Gemv with Staged), where fuses allows it;
// into outs, adding to them when accumulate.
func (o *ModelOps) fusedGemv(op string, x tensor.T, in int, mats []*Matrix, stage GemvStage, norm DevicePtr, eps float32, outs []tensor.T, accumulate bool) {
	c := GemvCall{X: DevicePtr(x.DevPtr()), Staged: true, Stage: stage, Norm: norm, Eps: eps,
		M: x.Rows(), In: in, WDType: mats[0].dtype, Accumulate: accumulate}
	for i, m := range mats {
		c.Targets = append(c.Targets, m.gemvTarget(DevicePtr(outs[i].DevPtr())))
	}
	o.do(op, func() error { return o.k.Gemv(o.stream, c) })
}

// gemvFuses reports whether rows rows of float32 x (and norm where set) go
// through mats in one staged skinny launch: a decode-sized batch (for
// the dtype: gemvRowsOf), at most three matrices of one dtype (gemvTakes)
// and width, rows of whole 16-byte groups, x staged within the shared
// memory, and 16-byte aligned operands; FP8 matrices on the skinny path
// (device.FP8Skinny) with scale blocks of one shape.
func gemvFuses(rows, in int, mats []*Matrix, ptrs ...DevicePtr) bool {
	if len(mats) == 0 || len(mats) > gemvMaxGroup || in%8 != 0 {
		return false
	}
	dt := mats[0].dtype
	if !gemvRowsOf(rows, dt) || !gemvTakes(dt) || !gemvStages(rows, in, dt) {
		return false
	}
	for _, m := range mats {
		if m.dtype != dt || m.in != in {
			return false
		}
		if f := m.fp8; f != nil && (device.FP8PathOf(rows, f.shape) != device.FP8Skinny ||
			f.br != mats[0].fp8.br || f.bc != mats[0].fp8.bc) {
			return false
		}
	}
	for _, p := range ptrs {
		if uintptr(p)%16 != 0 {
			return false
		}
	}
	return true
}

// linear enqueues x·W_iᵀ + b_i for each matrix into new tensors.
func (o *ModelOps) linear(op string, x tensor.T, ms []device.Matrix) []tensor.T {
	mats := make([]*Matrix, len(ms))
	for i, m := range ms {
		mats[i] = asMatrix(op, m)
		must(op, checkLinear(x, mats[i]))
	}
	return o.linearInto(op, x, mats, o.newOutputs(op, x, mats), false)
}

// linearInto enqueues x·W_iᵀ + b_i for each matrix (checked against x by
// the caller) into outs[i] (one tensor per matrix), or adds it to outs[i]
// when accumulate.
func (o *ModelOps) linearInto(op string, x tensor.T, mats []*Matrix, outs []tensor.T, accumulate bool) []tensor.T {
	o.do(op, func() error {
		rows := x.Rows()
		if rows == 0 || len(mats) == 0 {
			return nil
		}
		in := mats[0].in
		// The 16-bit copy of x is needed only until the GEMMs that read it
		// have run; freeing it right after enqueueing them is safe on one
		// stream and keeps a prefill from holding one per layer.
		var x16, xq Buffer // xq: compact matrices' bf16 x
		var x8 fp8X        // FP8 matrices' e4m3 x
		defer func() {
			x8.free(o.dev.Mem)
			for _, b := range []Buffer{x16, xq} {
				if b.Ptr != 0 {
					o.dev.Mem.Free(b)
				}
			}
		}()
		for i := 0; i < len(mats); i++ {
			m := mats[i]
			a := DevicePtr(x.DevPtr())
			if m.quant != nil && x.DType == BF16 { // takes16: a GEMM-sized batch, x already bf16
				if err := o.quantGemm(m, a, rows, DevicePtr(outs[i].DevPtr()), F32, accumulate); err != nil {
					return err
				}
				continue
			}
			if m.quant != nil {
				var err error
				if i, err = o.quantLinear(i, mats, tensorPtrs(outs), a, rows, accumulate, &xq); err != nil {
					return err
				}
				continue
			}
			if m.fp8 != nil {
				if err := o.fp8Linear(m, a, x.DType, DevicePtr(outs[i].DevPtr()), F32, rows, accumulate, &x8); err != nil {
					return err
				}
				continue
			}
			if x.DType == F32 && gemvApplies(rows, m, a) && m.dtype != F32 && gemvStages(rows, m.in, m.dtype) {
				// decode: stream the weights once; x is rounded to their type in the kernel
				var err error
				if i, err = o.gemvGroup(i, mats, outs, a, true, rows, accumulate); err != nil {
					return err
				}
				continue
			}
			if m.dtype != F32 && x.DType == m.dtype { // already the GEMM's input (checkLinearInput)
				a = DevicePtr(x.DevPtr())
			} else if m.dtype != F32 {
				if x16.Ptr == 0 {
					var err error
					if x16, err = o.dev.Mem.Alloc(rows * in * ElemSize(m.dtype)); err != nil {
						return err
					}
					if err := o.k.Convert(o.stream, x16.Ptr, DevicePtr(x.DevPtr()), rows*in, F32, m.dtype); err != nil {
						return err
					}
				}
				a = x16.Ptr
			}
			if gemvApplies(rows, m, a) { // decode: stream the weights once
				var err error
				if i, err = o.gemvGroup(i, mats, outs, a, false, rows, accumulate); err != nil {
					return err
				}
				continue
			}
			if err := o.gemm(a, rows, m, DevicePtr(outs[i].DevPtr()), accumulate); err != nil {
				return err
			}
		}
		return nil
	})
	return outs
}

// tensorPtrs are the device addresses of ts.
func tensorPtrs(ts []tensor.T) []DevicePtr {
	ps := make([]DevicePtr, len(ts))
	for i, t := range ts {
		ps[i] = DevicePtr(t.DevPtr())
	}
	return ps
}

// gemm enqueues out = a·mᵀ + bias (out += … with accumulate) through
// cuBLASLt, a [rows, m.in] in m's dtype, out [rows, m.out] float32.
func (o *ModelOps) gemm(a DevicePtr, rows int, m *Matrix, out DevicePtr, accumulate bool) error {
	return o.gemmTo(a, rows, m, out, F32, accumulate)
}

// gemmTo is gemm with out in outDT: float32, or (a matrix without a bias)
// the matrix's 16-bit GEMM dtype (gemmDType). A compact matrix is widened
// to bf16 a slice at a time (quantGemm); a is then bf16.
func (o *ModelOps) gemmTo(a DevicePtr, rows int, m *Matrix, out DevicePtr, outDT DType, accumulate bool) error {
	if outDT != F32 && m.bias != 0 {
		return fmt.Errorf("%dx%d·%dx%dᵀ: a bias is added in float32, not %v", rows, m.in, m.out, m.in, outDT)
	}
	if m.quant != nil {
		return o.quantGemm(m, a, rows, out, outDT, accumulate)
	}
	g := Gemm{M: rows, N: m.out, K: m.in, TransB: true, DType: m.dtype, OutDType: outDT}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	if err := o.lt.Matmul(o.stream, g, a, m.ptr, out, 1, beta); err != nil {
		return fmt.Errorf("%dx%d·%dx%dᵀ: %w", rows, m.in, m.out, m.in, err)
	}
	if m.bias != 0 {
		return o.k.AddRowF32(o.stream, out, m.bias, rows, m.out)
	}
	return nil
}

// gemmInput16 is the 16-bit dtype that float32 x is rounded to for mats
// when they all take the cuBLASLt path (more rows than the skinny kernel
// serves) with weights in that dtype: a producer of x (RMSNorm, the gated
// activation) then writes it in that dtype directly, rounded once as the
// separate conversion in linear would, so the result is the same.
func gemmInput16(rows int, mats ...*Matrix) (DType, bool) {
	if gemvRows(rows) || len(mats) == 0 {
		return 0, false
	}
	dt := gemmDType(mats[0])
	if dt != BF16 && dt != F16 {
		return 0, false
	}
	for _, m := range mats {
		if gemmDType(m) != dt || m.in != mats[0].in || m.quant != nil && rows <= quantMaxRows() {
			return 0, false
		}
	}
	return dt, true
}

// gemmDType is the dtype m enters a cuBLASLt GEMM in: its own, or bf16
// for a compact matrix, which is widened to bf16 for the GEMM (quantGemm).
// A compact matrix takes the GEMM only past quantMaxRows rows: up to
// there qgemv serves it, in float32, however many rows gemvRowLimit
// sends 16-bit matrices to cuBLASLt.
func gemmDType(m *Matrix) DType {
	if m.quant != nil {
		return BF16
	}
	return m.dtype
}

// normLinear16 is NormLinearGroup on the cuBLASLt path: the norm writes
// the GEMMs' 16-bit input directly.
func (o *ModelOps) normLinear16(op string, x tensor.T, v *Vector, eps float64, mats []*Matrix, dt DType) []tensor.T {
	outs := o.newOutputs(op, x, mats)
	o.do(op, func() error {
		rows := x.Rows()
		x16, err := o.norm16(x, v, eps, dt)
		if err != nil {
			return err
		}
		defer o.dev.Mem.Free(x16) // once the GEMMs that read it are enqueued (one stream)
		if fusesAdjacent(rows, mats) {
			tmp, err := o.gemmAdjacent(x16.Ptr, rows, mats, F32)
			if err != nil {
				return err
			}
			defer o.dev.Mem.Free(tmp) // once the split that reads it is enqueued
			ptrs, biases, widths := make([]DevicePtr, len(mats)), make([]DevicePtr, len(mats)), make([]int, len(mats))
			for i, m := range mats {
				ptrs[i], biases[i], widths[i] = DevicePtr(outs[i].DevPtr()), m.bias, m.out
			}
			return o.k.Split3F32(o.stream, tmp.Ptr, rows, ptrs, biases, widths)
		}
		for i, m := range mats {
			if err := o.gemm(x16.Ptr, rows, m, DevicePtr(outs[i].DevPtr()), false); err != nil {
				return err
			}
		}
		return nil
	})
	return outs
}

// norm16 is RMSNorm(x)·w in dt (BF16 or F16) in a new buffer, the
// input of the GEMMs after it; the caller frees it once they are enqueued.
// Device thread.
func (o *ModelOps) norm16(x tensor.T, v *Vector, eps float64, dt DType) (Buffer, error) {
	x16, err := o.dev.Mem.Alloc(x.Rows() * v.n * ElemSize(dt))
	if err != nil {
		return Buffer{}, err
	}
	if err := o.k.RMSNorm(o.stream, RMSNormParams{Out: x16.Ptr, X: DevicePtr(x.DevPtr()), Weight: v.ptr,
		NTokens: x.Rows(), Hidden: v.n, Eps: float32(eps), DType: F32, OutDType: dt}); err != nil {
		o.dev.Mem.Free(x16)
		return Buffer{}, err
	}
	return x16, nil
}

// fuseMaxRows is the most rows for which adjacent matrices run as one
// GEMM: a decode batch's products read the weights once, and one wide
// product streams them better than several narrow ones (k and v are a
// quarter of q's width at GQA 4); a prefill's products are compute-bound
// and gain nothing to pay the split's pass for.
const fuseMaxRows = 256

// fusesAdjacent reports whether mats run as one GEMM (gemmAdjacent).
func fusesAdjacent(rows int, mats []*Matrix) bool {
	return rows <= fuseMaxRows && len(mats) <= 3 && adjacent(mats)
}

// gemmAdjacent is the product of 16-bit a [rows, in] with adjacent mats
// (MatrixGroup) as one GEMM: a new buffer [rows, Σ out] in out (float32,
// or the matrices' dtype), without the biases.
func (o *ModelOps) gemmAdjacent(a DevicePtr, rows int, mats []*Matrix, out DType) (Buffer, error) {
	n := 0
	for _, m := range mats {
		n += m.out
	}
	tmp, err := o.dev.Mem.Alloc(rows * n * ElemSize(out))
	if err != nil {
		return Buffer{}, err
	}
	g := Gemm{M: rows, N: n, K: mats[0].in, TransB: true, DType: mats[0].dtype, OutDType: out}
	if err := o.lt.Matmul(o.stream, g, a, mats[0].ptr, tmp.Ptr, 1, 0); err != nil {
		o.dev.Mem.Free(tmp)
		return Buffer{}, fmt.Errorf("%dx%d·%dx%dᵀ: %w", rows, g.K, n, g.K, err)
	}
	return tmp, nil
}

// gemvGroup runs the skinny kernel (Kernels.Gemv) for mats[i] and the
// matrices after it in the group that can share the launch (same dtype and
// input width, up to three), returning the index of the last one served.
// staged: x is float32, rounded to the weights' type in the kernel.
func (o *ModelOps) gemvGroup(i int, mats []*Matrix, outs []tensor.T, x DevicePtr, staged bool, rows int, accumulate bool) (int, error) {
	m := mats[i]
	c := GemvCall{X: x, Staged: staged, M: rows, In: m.in, WDType: m.dtype, Accumulate: accumulate,
		Targets: []GemvTarget{m.gemvTarget(DevicePtr(outs[i].DevPtr()))}}
	for len(c.Targets) < gemvMaxGroup && i+1 < len(mats) && mats[i+1].dtype == m.dtype && mats[i+1].in == m.in {
		i++
		c.Targets = append(c.Targets, mats[i].gemvTarget(DevicePtr(outs[i].DevPtr())))
	}
	return i, o.k.Gemv(o.stream, c)
}

// RMSNorm returns x / rms(x) · w as a new tensor of x's shape. With
// w.Len() equal to the row width it normalises rows; with a smaller
// w.Len() that divides the width, each head of w.Len() values (q/k norm).
func (o *ModelOps) RMSNorm(x tensor.T, w device.Vector, eps float64) tensor.T {
	const op = "RMSNorm"
	v := asVector(op, w)
	must(op, checkActivation("x", x))
	heads, err := normHeads(x.Cols(), v.n)
	must(op, err)
	var out tensor.T
	o.do(op, func() (err error) {
		if out, err = o.newTensor(x.Shape); err != nil {
			return err
		}
		return o.k.RMSNorm(o.stream, RMSNormParams{
			Out: DevicePtr(out.DevPtr()), X: DevicePtr(x.DevPtr()), Weight: v.ptr,
			NTokens: x.Rows(), Hidden: v.n, Heads: heads, Eps: float32(eps), DType: F32,
		})
	})
	return out
}

// Rope rotates, in place, every whole head of r.HeadDim values in each row
// of x ([T, heads·HeadDim]) by positions ([T]). With fewer than HeadDim/2
// frequencies only the first 2·len(InvFreq) values of a head rotate
// (partial rotary). r.InvFreq is uploaded on first use and cached for this
// *Rope, so it must not change afterwards.
func (o *ModelOps) Rope(x tensor.T, positions []int32, r *device.Rope) {
	o.rope("Rope", x, tensor.T{}, positions, r)
}

// RopeQK rotates q and k as Rope does, in one launch.
func (o *ModelOps) RopeQK(q, k tensor.T, positions []int32, r *device.Rope) {
	o.rope("RopeQK", q, k, positions, r)
}

// rope rotates q, and k unless it is the zero tensor: float32, or both
// in one 16-bit dtype (NormLinearGroup16's q and k), which rope_<dt>
// rotates in float32 and rounds once.
func (o *ModelOps) rope(op string, q, k tensor.T, positions []int32, r *device.Rope) {
	must(op, checkActivationIn("q", q, F32, BF16, F16))
	qHeads, rot, err := ropeShape(r, q.Cols(), q.Rows(), len(positions))
	must(op, err)
	kHeads := 0
	if k.Shape != nil {
		must(op, checkActivationIn("k", k, q.DType))
		kHeads, _, err = ropeShape(r, k.Cols(), k.Rows(), len(positions))
		must(op, err)
		if qHeads+kHeads > maxGridYZ {
			must(op, fmt.Errorf("%d q and %d k heads per row, over %d", qHeads, kHeads, maxGridYZ))
		}
	}
	if qHeads+kHeads == 0 || len(positions) == 0 {
		return
	}
	o.do(op, func() error {
		freq, err := o.ropeFreq(r, rot)
		if err != nil {
			return err
		}
		dPos, err := o.uploadIndex(positions)
		if err != nil {
			return err
		}
		p := RopeParams{
			Q: DevicePtr(q.DevPtr()), Positions: dPos, InvFreq: freq,
			NTokens: len(positions), NQHeads: qHeads, HeadDim: r.HeadDim, RotDim: rot,
			QStride: q.Cols(), Interleaved: r.Interleaved, DType: q.DType,
		}
		if kHeads > 0 {
			p.K, p.NKVHeads, p.KStride = DevicePtr(k.DevPtr()), kHeads, k.Cols()
		}
		return o.k.Rope(o.stream, p)
	})
}

// ropeFreq is r's frequency table on the device, uploaded on first use.
func (o *ModelOps) ropeFreq(r *device.Rope, rot int) (DevicePtr, error) {
	o.mu.Lock()
	f, ok := o.ropes[r]
	o.mu.Unlock()
	if ok {
		if f.rot != rot {
			return 0, fmt.Errorf("rope rotates %d dims, %d when first used: InvFreq changed", rot, f.rot)
		}
		return f.ptr, nil
	}
	p, err := o.uploadOwned(r.InvFreq[:rot/2])
	if err != nil {
		return 0, err
	}
	o.mu.Lock()
	o.ropes[r] = ropeFreq{ptr: p, rot: rot}
	o.mu.Unlock()
	return p, nil
}

// SiLUMul sets gate = silu(gate)·up in place.  gate, up: [T, inter]
func (o *ModelOps) SiLUMul(gate, up tensor.T) { o.gated("SiLUMul", SiLU, gate, up) }

// GeLUTanhMul sets gate = gelu_tanh(gate)·up in place.  gate, up: [T, inter]
func (o *ModelOps) GeLUTanhMul(gate, up tensor.T) { o.gated("GeLUTanhMul", GeLUTanh, gate, up) }

func (o *ModelOps) gated(op string, act Activation, gate, up tensor.T) {
	must(op, checkSameShape("gate", gate, "up", up))
	o.do(op, func() error {
		return o.k.GatedAct(o.stream, act, DevicePtr(gate.DevPtr()), DevicePtr(gate.DevPtr()), DevicePtr(up.DevPtr()), gate.Rows(), gate.Cols(), 0, F32)
	})
}

// ClampedSwiGLU is device.ClampedSwiGLUOps (GPT-OSS's expert activation):
// gate = (clamp(up, ±limit) + 1)·g·sigmoid(alpha·g), g = min(gate, limit),
// in place.  gate, up: [T, width] float32
func (o *ModelOps) ClampedSwiGLU(gate, up tensor.T, alpha, limit float32) {
	const op = "ClampedSwiGLU"
	must(op, checkSameShape("gate", gate, "up", up))
	n := gate.NumElements()
	if n == 0 {
		return
	}
	o.do(op, func() error {
		return o.k.launchClampedSwiGLU(o.stream, flatConfig(n),
			clampedSwiGLUArgs{Gate: DevicePtr(gate.DevPtr()), Up: DevicePtr(up.DevPtr()), N: n, Alpha: alpha, Limit: limit})
	})
}

var _ device.ClampedSwiGLUOps = (*ModelOps)(nil)

// Add sets dst += src in place.  dst, src: the same shape
func (o *ModelOps) Add(dst, src tensor.T) {
	const op = "Add"
	must(op, checkSameShape("dst", dst, "src", src))
	o.do(op, func() error {
		return o.k.AddF32(o.stream, DevicePtr(dst.DevPtr()), DevicePtr(src.DevPtr()), dst.NumElements())
	})
}

// Scale multiplies x by s in place.  x: any shape
func (o *ModelOps) Scale(x tensor.T, s float32) {
	const op = "Scale"
	must(op, checkActivation("x", x))
	o.do(op, func() error { return o.k.ScaleF32(o.stream, DevicePtr(x.DevPtr()), x.NumElements(), s) })
}

// Softcap sets x = cap·tanh(x/cap) in place; cap > 0.  x: any shape
func (o *ModelOps) Softcap(x tensor.T, cap float32) {
	const op = "Softcap"
	must(op, checkActivation("x", x))
	if !(cap > 0) || math.IsInf(float64(cap), 0) {
		must(op, fmt.Errorf("cap %v must be positive and finite", cap))
	}
	o.do(op, func() error { return o.k.Softcap(o.stream, DevicePtr(x.DevPtr()), x.NumElements(), cap, F32) })
}

// GatherRows picks rows of x ([n, width]): [len(rows), width]. Every row
// must be in [0, n).
func (o *ModelOps) GatherRows(x tensor.T, rows []int32) tensor.T {
	const op = "GatherRows"
	must(op, checkActivation("x", x))
	must(op, checkRows(rows, x.Rows()))
	var out tensor.T
	o.do(op, func() (err error) {
		if out, err = o.newTensor([]int{len(rows), x.Cols()}); err != nil {
			return err
		}
		dRows, err := o.uploadIndex(rows)
		if err != nil {
			return err
		}
		return o.k.Embedding(o.stream, DevicePtr(out.DevPtr()), DevicePtr(x.DevPtr()), dRows, len(rows), x.Cols(), x.Rows(), F32, F32, 1)
	})
	return out
}

// ToHost waits for the stream and returns x's values as a host float32
// tensor of the same shape (x itself when it is already on the host). It
// works after EndForward until the next BeginForward.
func (o *ModelOps) ToHost(x tensor.T) tensor.T {
	const op = "ToHost"
	if !x.OnDevice() {
		return x
	}
	switch x.DType {
	case F32, BF16, F16:
	default:
		must(op, fmt.Errorf("cannot read a %v device tensor", x.DType))
	}
	n := x.NumElements()
	out := tensor.Host{Shape: slices.Clone(x.Shape), Data: make([]float32, n)}.T()
	if n == 0 {
		return out
	}
	o.do(op, func() error {
		if x.DType == F32 {
			if err := CopyDtoHAsync(o.dev, out.HostData(), DevicePtr(x.DevPtr()), o.stream); err != nil {
				return err
			}
			return o.dev.StreamSync(o.stream)
		}
		raw := make([]byte, 2*n)
		if err := CopyDtoHAsync(o.dev, raw, DevicePtr(x.DevPtr()), o.stream); err != nil {
			return err
		}
		if err := o.dev.StreamSync(o.stream); err != nil {
			return err
		}
		tensor.DecodeInto(x.DType, raw, out.HostData())
		return nil
	})
	return out
}

// asMatrix is m as this package's Matrix; anything else is a programming error.
func asMatrix(op string, m device.Matrix) *Matrix {
	cm, ok := m.(*Matrix)
	if !ok || cm == nil {
		must(op, fmt.Errorf("matrix %T was not prepared by a cuda.ModelOps", m))
	}
	return cm
}

func asVector(op string, v device.Vector) *Vector {
	cv, ok := v.(*Vector)
	if !ok || cv == nil {
		must(op, fmt.Errorf("vector %T was not prepared by a cuda.ModelOps", v))
	}
	return cv
}

// checkActivation accepts a float32 device tensor with at least one dimension.
func checkActivation(name string, x tensor.T) error { return checkActivationIn(name, x, F32) }

// checkActivationIn is checkActivation for a tensor in one of dts.
func checkActivationIn(name string, x tensor.T, dts ...DType) error {
	switch {
	case !x.OnDevice():
		return fmt.Errorf("%s %v is not a device tensor (ModelOps.Upload makes one)", name, x.Shape)
	case !slices.Contains(dts, x.DType) && len(dts) == 1:
		return fmt.Errorf("%s is %v; ModelOps activations are %v", name, x.DType, dts[0])
	case !slices.Contains(dts, x.DType):
		return fmt.Errorf("%s is %v; this op takes %v", name, x.DType, dts)
	case len(x.Shape) == 0:
		return fmt.Errorf("%s has no shape", name)
	}
	for _, d := range x.Shape {
		if d < 0 {
			return fmt.Errorf("%s has shape %v", name, x.Shape)
		}
	}
	return nil
}

func checkLinear(x tensor.T, m *Matrix) error {
	if err := checkActivation("x", x); err != nil {
		return err
	}
	if x.Cols() != m.in {
		return fmt.Errorf("x %v does not fit a [%d, %d] matrix", x.Shape, m.out, m.in)
	}
	return nil
}

// takes16 reports whether m's GEMM reads 16-bit x as it is: a plain
// matrix of x's dtype.
func takes16(x tensor.T, m *Matrix) bool {
	return (x.DType == BF16 || x.DType == F16) && x.DType == gemmDType(m) && m.fp8 == nil &&
		(m.quant == nil || x.Rows() > quantMaxRows())
}

// fp8Takes16 reports whether the FP8 matrix m quantises 16-bit x as it
// is (its FP8Scaled path: a prefill's rows).
func fp8Takes16(x tensor.T, m *Matrix) bool {
	return (x.DType == BF16 || x.DType == F16) && m.fp8 != nil && device.FP8PathOf(x.Rows(), m.fp8.shape) == device.FP8Scaled
}

// widen returns a float32 copy of a 16-bit activation, from the arena.
func (o *ModelOps) widen(op string, x tensor.T) tensor.T {
	var w tensor.T
	o.do(op, func() (err error) {
		if x.DType != BF16 && x.DType != F16 {
			return fmt.Errorf("x is %v; ModelOps activations are F32 (or 16-bit for a linear)", x.DType)
		}
		if w, err = o.newTensor(x.Shape); err != nil {
			return err
		}
		return o.k.Convert(o.stream, DevicePtr(w.DevPtr()), DevicePtr(x.DevPtr()), x.Len(), x.DType, F32)
	})
	return w
}

// checkLinearInput is checkLinear, also taking x already in a 16-bit
// matrix's dtype (an attention output in bf16 on its way to o_proj,
// attention.Layer.OutToLinear), which the GEMM reads as it is, or 16-bit x
// an FP8 matrix quantises as it is (fp8Takes16).
func checkLinearInput(x tensor.T, m *Matrix) error {
	if !takes16(x, m) && !fp8Takes16(x, m) {
		return checkLinear(x, m)
	}
	if !x.OnDevice() || len(x.Shape) == 0 || x.Cols() != m.in {
		return fmt.Errorf("x %v (%v) does not fit a [%d, %d] %v matrix", x.Shape, x.DType, m.out, m.in, m.dtype)
	}
	return nil
}

func checkSameShape(aName string, a tensor.T, bName string, b tensor.T) error {
	if err := checkActivation(aName, a); err != nil {
		return err
	}
	if err := checkActivation(bName, b); err != nil {
		return err
	}
	if !slices.Equal(a.Shape, b.Shape) {
		return fmt.Errorf("%s %v and %s %v differ in shape", aName, a.Shape, bName, b.Shape)
	}
	return nil
}

// withCols is shape with its last dimension set to cols.
func withCols(shape []int, cols int) []int {
	out := slices.Clone(shape)
	out[len(out)-1] = cols
	return out
}

// normHeads is how many norm groups of n values a row of width holds.
func normHeads(width, n int) (int, error) {
	if n <= 0 || width%n != 0 {
		return 0, fmt.Errorf("norm weight of %d values does not divide rows of %d", n, width)
	}
	heads := width / n
	if heads > maxGridYZ {
		return 0, fmt.Errorf("%d norm groups per row, over %d", heads, maxGridYZ)
	}
	return heads, nil
}

// ropeShape is the number of whole heads in a row of width (trailing
// values that make no whole head are left, as device/cpu does) and the
// rotary dims per head.
func ropeShape(r *device.Rope, width, rows, nPositions int) (heads, rot int, err error) {
	switch {
	case r == nil:
		return 0, 0, errors.New("nil rope")
	case r.HeadDim <= 0 || r.HeadDim%2 != 0:
		return 0, 0, fmt.Errorf("head dim %d must be positive and even", r.HeadDim)
	case len(r.InvFreq) == 0:
		return 0, 0, errors.New("rope has no frequencies")
	case nPositions != rows:
		return 0, 0, fmt.Errorf("%d positions for %d rows", nPositions, rows)
	}
	rot = min(r.HeadDim, 2*len(r.InvFreq))
	heads = width / r.HeadDim
	if heads > maxGridYZ {
		return 0, 0, fmt.Errorf("%d heads per row, over %d", heads, maxGridYZ)
	}
	return heads, rot, nil
}

// checkRows accepts row indices in [0, n).
func checkRows(rows []int32, n int) error {
	for i, r := range rows {
		if r < 0 || int(r) >= n {
			return fmt.Errorf("row %d is %d, outside [0, %d)", i, r, n)
		}
	}
	return nil
}
