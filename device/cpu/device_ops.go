package cpu

import (
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/internal/hugemem"
	"github.com/gosling-ai/gosling/tensor"
)

// Ops implements device.Ops on the host with this package's kernels.
type Ops struct {
	Workers *Workers
	// FP8 serves FP8 weights on the reference path of device.FP8Path
	// (fp8.go; --quantization fp8); off, loaders widen them.
	FP8   bool
	ropes sync.Map // *device.Rope → *Rope (its position tables)
	arena arena    // the activations of the current forward (Embed, Linear, LinearGroup, RMSNorm, GatherRows)
	// weights holds the packed weights of this Ops' matrices outside the
	// Go heap, until Close.
	weights hugemem.Arena
	// experts is the grouped experts' scratch (experts.go).
	experts []float32
}

var _ device.Ops = (*Ops)(nil)

// NewOps runs a model's kernels on w.
func NewOps(w *Workers) *Ops { return &Ops{Workers: w} }

func (o *Ops) Name() string { return "cpu" }

// matrix packs its weight on first use as a linear layer: a table that
// only serves embedding lookups is read in place (often from the memory
// map) and never copied.
type matrix struct {
	ops  *Ops
	w    tensor.Weight
	bias []float32
	once sync.Once
	lin  *Linear
	fp8  *fp8Matrix // nil unless made by FP8Matrix
}

func (m *matrix) Out() int { return m.w.Rows() }
func (m *matrix) In() int  { return m.w.Cols() }

func (m *matrix) linear() *Linear {
	m.once.Do(func() { m.lin = newLinear(m.w, m.bias, m.ops.weightBytes) })
	return m.lin
}

// Linear returns the packed layer behind a Matrix made by Ops.Matrix.
func (o *Ops) LinearOf(m device.Matrix) *Linear { return m.(*matrix).linear() }

type vector []float32

func (v vector) Len() int { return len(v) }

func (o *Ops) Matrix(w tensor.Weight, bias []float32) (device.Matrix, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if len(w.Shape) != 2 {
		return nil, fmt.Errorf("tensor %s: a matrix needs 2 dimensions, has shape %v", w.Name, w.Shape)
	}
	if bias != nil && len(bias) != w.Rows() {
		return nil, fmt.Errorf("tensor %s: bias of %d values for %d rows", w.Name, len(bias), w.Rows())
	}
	return &matrix{ops: o, w: w, bias: bias}, nil
}

// weightBytes is packed-weight memory: small matrices take the heap's
// (weightBytes), the rest the Ops' arena outside it.
func (o *Ops) weightBytes(n int) []byte {
	if n < arenaMin {
		return weightBytes(n)
	}
	return o.weights.Alloc(n)
}

// Close unmaps the packed weights of every matrix this Ops made; none may
// be used after (a model built on it is closed with it).
func (o *Ops) Close() error { return o.weights.Free() }

// WeightBytes is the memory the packed weights outside the heap take.
func (o *Ops) WeightBytes() int64 { return o.weights.Bytes() }

func (o *Ops) Vector(v []float32) (device.Vector, error) { return vector(v), nil }

// BeginForward recycles the previous forward's activations (see arena).
func (o *Ops) BeginForward() { o.arena.begin() }
func (o *Ops) EndForward()   { o.arena.end() }

// Embed decodes rows of the table; an id outside it gives a zero row
// (the model checks ids before).
func (o *Ops) Embed(table device.Matrix, ids []int32) tensor.T {
	m := table.(*matrix)
	out := o.arena.new(len(ids), m.In())
	for t, id := range ids {
		if id >= 0 && int(id) < m.Out() {
			m.w.DecodeRow(int(id), out.Row(t))
		} else {
			clear(out.Row(t))
		}
	}
	return out
}

func (o *Ops) Linear(x tensor.T, m device.Matrix) tensor.T {
	return o.LinearGroup(x, m)[0]
}

// LinearGroup packs the input once for all matrices.
func (o *Ops) LinearGroup(x tensor.T, ms ...device.Matrix) []tensor.T {
	ls := make([]*Linear, len(ms))
	for i, m := range ms {
		if m.(*matrix).fp8 != nil {
			return o.fp8Group(x, ms)
		}
		ls[i] = m.(*matrix).linear()
	}
	return forwardGroup(o.Workers, x, &o.arena, ls)
}

func (o *Ops) RMSNorm(x tensor.T, w device.Vector, eps float64) tensor.T {
	weight := w.(vector)
	out := o.arena.new(x.Shape...)
	rmsNormRows(out.HostData(), x.HostData(), weight, eps) // rows of one norm each
	return out
}

func (o *Ops) Rope(x tensor.T, positions []int32, r *device.Rope) {
	o.rope(r).Apply(x.HostData(), x.Cols(), positions)
}

// rope is r's kernel, with its cached position tables.
func (o *Ops) rope(r *device.Rope) *Rope {
	cached, ok := o.ropes.Load(r)
	if !ok {
		cached, _ = o.ropes.LoadOrStore(r, NewRope(r.HeadDim, r.InvFreq, r.Interleaved))
	}
	return cached.(*Rope)
}

// SiLUMul splits a batch of many tokens over the workers by rows.
func (o *Ops) SiLUMul(gate, up tensor.T) {
	cols := gate.Cols()
	o.Workers.For(gate.Rows(), max(1, actMinValues/max(cols, 1)), func(lo, hi int) {
		siluMul(gate.HostData()[lo*cols:hi*cols], up.HostData()[lo*cols:hi*cols])
	})
}

// ClampedSwiGLU splits the rows over the workers like SiLUMul.
func (o *Ops) ClampedSwiGLU(gate, up tensor.T, alpha, limit float32) {
	cols := gate.Cols()
	o.Workers.For(gate.Rows(), max(1, actMinValues/max(cols, 1)), func(lo, hi int) {
		ClampedSwiGLU(gate.HostData()[lo*cols:hi*cols], up.HostData()[lo*cols:hi*cols], alpha, limit)
	})
}

var _ device.ClampedSwiGLUOps = (*Ops)(nil)

// actMinValues is the fewest values of an element-wise activation worth a
// worker (about 10 µs of exponentials).
const actMinValues = 16 << 10

func (o *Ops) GeLUTanhMul(gate, up tensor.T) { GeLUTanhMul(gate, up) }
func (o *Ops) Add(dst, src tensor.T)         { Add(dst, src) }
func (o *Ops) Scale(x tensor.T, s float32)   { Scale(x.HostData(), s) }
func (o *Ops) Softcap(x tensor.T, c float32) { Softcap(x.HostData(), c) }

func (o *Ops) GatherRows(x tensor.T, rows []int32) tensor.T {
	out := o.arena.new(len(rows), x.Cols())
	for i, r := range rows {
		copy(out.Row(i), x.Row(int(r)))
	}
	return out
}

func (o *Ops) ToHost(x tensor.T) tensor.T { return x }

func (o *Ops) Adopt(tensor.T) {}

// NewActivation is an uninitialised tensor in the forward's recycled
// memory (heap memory outside a forward), valid until the next
// BeginForward: where the CPU attention backends write their layer
// outputs (attention.Options.Output).
func (o *Ops) NewActivation(shape ...int) tensor.T { return o.arena.new(shape...) }
