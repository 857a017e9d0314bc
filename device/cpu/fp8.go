package cpu

import (
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// The CPU's FP8 reference path (Ops.FP8, --quantization fp8): e4m3
// weights and, per device.FP8Path, rounded or quantised activations, as a
// GPU computes them, with float32 GEMMs over the values they stand for.
// It is there to measure what FP8 serving does to a model's outputs, not
// to be fast.

// fp8Matrix is what a matrix made by FP8Matrix adds to its float32
// weights W·s (matrix.w).
type fp8Matrix struct {
	shape tensor.ScaledFP8 // the weight's shape and scale blocks (no data)
	once  sync.Once
	bf16  *Linear // bf16(W·s), for device.FP8Widened, made on first use
}

// FP8Weights reports whether FP8Matrix serves: when o.FP8 asks for the
// reference path. Without it the loaders widen FP8 checkpoints.
func (o *Ops) FP8Weights() bool { return o.FP8 }

var _ device.FP8Ops = (*Ops)(nil)

// FP8Matrix prepares w: its values W·s as float32 (the weight every other
// op reads), and the path each batch takes through it.
func (o *Ops) FP8Matrix(w tensor.ScaledFP8, bias []float32) (device.Matrix, error) {
	if !o.FP8 {
		return nil, fmt.Errorf("tensor %s: FP8 weights are served by the CPU only on its reference path (--quantization fp8)", w.Q.Name)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	// W·s is read row by row as it is packed (or embedded), not kept whole.
	m, err := o.Matrix(tensor.Weight{Name: w.Q.Name, DType: tensor.F32, Shape: []int{w.Out(), w.In()}, Lazy: w.WidenRow}, bias)
	if err != nil {
		return nil, err
	}
	shape := w
	shape.Q.Data, shape.Scales = nil, nil
	m.(*matrix).fp8 = &fp8Matrix{shape: shape}
	return m, nil
}

// fp8Linear is the layer the path of rows rows through m multiplies by.
func (m *matrix) fp8Linear(path device.FP8Path) *Linear {
	if path != device.FP8Widened {
		return m.linear()
	}
	f := m.fp8
	f.once.Do(func() {
		f.bf16 = newLinear(tensor.Lazily(m.w, tensor.BF16), m.bias, m.ops.weightBytes)
	})
	return f.bf16
}

// fp8Input is x as a path reads it: rounded to bf16 (FP8Skinny,
// FP8Widened), or each row quantised to e4m3 with its own scale and
// multiplied back (FP8Scaled).
func (o *Ops) fp8Input(x tensor.T, path device.FP8Path) tensor.T {
	out := o.arena.new(x.Shape...)
	cols := x.Cols()
	o.Workers.For(x.Rows(), 1, func(lo, hi int) {
		q := make([]byte, cols)
		for r := lo; r < hi; r++ {
			src, dst := x.Row(r), out.Row(r)
			if path == device.FP8Scaled {
				tensor.DecodeFP8E4M3(dst, q, tensor.QuantizeFP8Row(q, src))
				continue
			}
			for i, v := range src {
				dst[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
			}
		}
	})
	return out
}

// fp8Group is LinearGroup where some matrix is FP8: each matrix reads x
// as its path says (each form of x made once).
func (o *Ops) fp8Group(x tensor.T, ms []device.Matrix) []tensor.T {
	const plain = device.FP8Path(-1)
	inputs := map[device.FP8Path]tensor.T{plain: x}
	outs := make([]tensor.T, len(ms))
	for i, dm := range ms {
		m := dm.(*matrix)
		path := plain
		if m.fp8 != nil {
			path = device.FP8PathOf(x.Rows(), m.fp8.shape)
		}
		in, ok := inputs[path]
		if !ok {
			in = o.fp8Input(x, path)
			inputs[path] = in
		}
		l := m.linear()
		if path != plain {
			l = m.fp8Linear(path)
		}
		outs[i] = forwardGroup(o.Workers, in, &o.arena, []*Linear{l})[0]
	}
	return outs
}
