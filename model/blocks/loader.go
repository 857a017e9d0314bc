// Package blocks holds the parts architectures share: a weight loader that
// keeps the first error, the SwiGLU MLP and the mixture-of-experts block
// (router, grouped experts, optional shared expert).
package blocks

import (
	"fmt"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/internal/par"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// Loader fetches tensors and prepares them on the device, keeping the
// first error so that a constructor reads as a list of weights: after an
// error every call returns a zero value and Err says what went wrong.
type Loader struct {
	WS  model.WeightSource
	Ops device.Ops
	Err error
}

// Fail records err unless an earlier error is already recorded.
func (l *Loader) Fail(err error) {
	if l.Err == nil {
		l.Err = err
	}
}

// Get fetches a tensor, checking its shape.
func (l *Loader) Get(name string, shape ...int) tensor.Weight {
	if l.Err != nil {
		return tensor.Weight{}
	}
	w, err := model.Expect(l.WS, name, shape...)
	l.Err = err
	return w
}

// Floats fetches a 1-D tensor of n values as float32.
func (l *Loader) Floats(name string, n int) []float32 {
	w := l.Get(name, n)
	if l.Err != nil {
		return nil
	}
	return w.Float32()
}

// Vec prepares a 1-D weight of n values.
func (l *Loader) Vec(name string, n int) device.Vector {
	return l.VecOf(l.Floats(name, n))
}

// VecOf prepares values computed from weights (Gemma's 1 + w).
func (l *Loader) VecOf(values []float32) device.Vector {
	if l.Err != nil {
		return nil
	}
	v, err := l.Ops.Vector(values)
	l.Err = err
	return v
}

// Matrix prepares w [out, in] with an optional bias [out].
func (l *Loader) Matrix(w tensor.Weight, bias []float32) device.Matrix {
	if l.Err != nil {
		return nil
	}
	m, err := l.Ops.Matrix(w, bias)
	if err != nil {
		l.Err = fmt.Errorf("prepare %s: %w", w.Name, err)
	}
	return m
}

// Weight prepares the tensor name [out, in] without a bias.
func (l *Loader) Weight(name string, out, in int) device.Matrix {
	if m, ok := l.fp8(name, out, in, nil); ok {
		return m
	}
	return l.Matrix(l.Get(name, out, in), nil)
}

// fp8 prepares the linear layer name [out, in] in e4m3 when the device
// multiplies e4m3 weights (device.FP8Ops) and the weights are served so
// (model.FP8Source: an fp8 checkpoint, --quantization fp8); ok is false
// when either is not, and the weight loads as stored.
func (l *Loader) fp8(name string, out, in int, bias []float32) (m device.Matrix, ok bool) {
	fo, ok := l.Ops.(device.FP8Ops)
	if l.Err != nil || !ok || !fo.FP8Weights() || !model.FP8Linear(name) {
		return nil, false
	}
	fs, ok := l.WS.(model.FP8Source)
	if !ok {
		return nil, false
	}
	w, ok, err := fs.TensorFP8(name)
	switch {
	case err != nil:
		l.Fail(err)
		return nil, true
	case !ok:
		return nil, false
	case w.Out() != out || w.In() != in:
		l.Fail(fmt.Errorf("tensor %s has shape [%d, %d], want [%d, %d]", name, w.Out(), w.In(), out, in))
		return nil, true
	}
	if m, err = fo.FP8Matrix(w, bias); err != nil {
		l.Fail(fmt.Errorf("prepare %s: %w", name, err))
	}
	return m, true
}

// Linear prepares prefix.weight [out, in] and prefix.bias [out] when the
// checkpoint has one (or when bias says it must).
func (l *Loader) Linear(prefix string, out, in int, bias bool) device.Matrix {
	var b []float32
	if bias || l.WS.Has(prefix+".bias") {
		b = l.Floats(prefix+".bias", out)
	}
	if m, ok := l.fp8(prefix+".weight", out, in, b); ok {
		return m
	}
	return l.Matrix(l.Get(prefix+".weight", out, in), b)
}

// LinearGroup prepares linear layers that share an input (q, k and v),
// each as Linear would, placed together when the device can
// (device.MatrixGrouper) so that they may run as one product; in e4m3
// where they are served so (fp8Group), each a matrix of its own.
func (l *Loader) LinearGroup(prefixes []string, outs []int, in int, bias bool) []device.Matrix {
	names := make([]string, len(prefixes))
	bs := make([][]float32, len(prefixes))
	for i, p := range prefixes {
		names[i] = p + ".weight"
		if bias || l.WS.Has(p+".bias") {
			bs[i] = l.Floats(p+".bias", outs[i])
		}
	}
	if ms, ok := l.fp8Group(names, outs, in, bs); ok {
		return ms
	}
	ws := make([]tensor.Weight, len(prefixes))
	for i, name := range names {
		ws[i] = l.Get(name, outs[i], in)
	}
	return l.MatrixGroup(ws, bs)
}

// fp8Group prepares the weights names [outs[i], in] with biases bs (nil
// entries: none) as fp8 does, when the first of them is served in e4m3
// (any other that is not loads as stored); ok is false when the first is
// not, and the group is the caller's.
func (l *Loader) fp8Group(names []string, outs []int, in int, bs [][]float32) (ms []device.Matrix, ok bool) {
	m, ok := l.fp8(names[0], outs[0], in, bs[0])
	if !ok {
		return nil, false
	}
	ms = append(ms, m)
	for i := 1; i < len(names); i++ {
		m, ok := l.fp8(names[i], outs[i], in, bs[i])
		if !ok {
			m = l.Matrix(l.Get(names[i], outs[i], in), bs[i])
		}
		ms = append(ms, m)
	}
	return ms, true
}

// MatrixGroup prepares ws with biases (nil entries: none) as Matrix does,
// through device.MatrixGrouper when the device has it.
func (l *Loader) MatrixGroup(ws []tensor.Weight, biases [][]float32) []device.Matrix {
	ms := make([]device.Matrix, len(ws))
	if l.Err != nil {
		return ms
	}
	if g, ok := l.Ops.(device.MatrixGrouper); ok {
		got, err := g.MatrixGroup(ws, biases)
		if err != nil {
			l.Err = fmt.Errorf("prepare %s…: %w", ws[0].Name, err)
			return ms
		}
		return got
	}
	for i, w := range ws {
		ms[i] = l.Matrix(w, biases[i])
	}
	return ms
}

// MLP prepares a SwiGLU MLP whose three projections are prefix + the
// names (gate, up, down; e.g. gate_proj, up_proj, down_proj), without
// biases.
func (l *Loader) MLP(prefix string, names [3]string, hidden, inter int) *MLP {
	gu, ok := l.fp8Group([]string{prefix + names[0] + ".weight", prefix + names[1] + ".weight"}, []int{inter, inter}, hidden, make([][]float32, 2))
	if !ok {
		gu = l.MatrixGroup([]tensor.Weight{l.Get(prefix+names[0]+".weight", inter, hidden), l.Get(prefix+names[1]+".weight", inter, hidden)},
			make([][]float32, 2))
	}
	return &MLP{Gate: gu[0], Up: gu[1], Down: l.Weight(prefix+names[2]+".weight", hidden, inter)}
}

// materialize makes a synthetic (dummy) weight's bytes, whose parts are
// about to be picked; false after an error.
func (l *Loader) materialize(w tensor.Weight) (tensor.Weight, bool) {
	if l.Err != nil {
		return tensor.Weight{}, false
	}
	w, err := w.Materialize()
	l.Err = err
	return w, err == nil
}

// Rows picks, from w's rows in blocks blocks of equal size, rows
// [start, start+n) of each block, in the stored dtype: the nope or rope
// rows of every head of a query projection. One block is a view of w's
// bytes.
func (l *Loader) Rows(w tensor.Weight, blocks, start, n int) tensor.Weight {
	w, ok := l.materialize(w)
	if !ok {
		return tensor.Weight{}
	}
	rowBytes, err := w.DType.RowBytes(w.Cols())
	if err != nil {
		l.Err = fmt.Errorf("tensor %s: %w", w.Name, err)
		return tensor.Weight{}
	}
	per := w.Rows() / blocks
	name := fmt.Sprintf("%s[rows %d:%d of each %d]", w.Name, start, start+n, per)
	out := tensor.Weight{Name: name, DType: w.DType, Shape: []int{blocks * n, w.Cols()}}
	if blocks == 1 {
		out.Data = w.Data[start*rowBytes : (start+n)*rowBytes]
		return out
	}
	out.Data = make([]byte, 0, blocks*n*rowBytes)
	for b := range blocks {
		first := b*per + start
		out.Data = append(out.Data, w.Data[first*rowBytes:(first+n)*rowBytes]...)
	}
	return out
}

// Expert returns matrix index of a stack w [n, rows, cols] as a [rows,
// cols] weight: a view of its bytes, in any dtype (each matrix is whole
// rows).
func (l *Loader) Expert(w tensor.Weight, index int) tensor.Weight {
	w, ok := l.materialize(w)
	if !ok {
		return tensor.Weight{}
	}
	per := len(w.Data) / w.Shape[0]
	name := fmt.Sprintf("%s[%d]", w.Name, index)
	return tensor.Weight{Name: name, DType: w.DType, Shape: []int{w.Shape[1], w.Shape[2]}, Data: w.Data[index*per : (index+1)*per]}
}

// ProjNames are the usual MLP projection names (Llama, Qwen, DeepSeek).
var ProjNames = [3]string{"gate_proj", "up_proj", "down_proj"}

// Floats2 fetches a 2-D tensor [rows, cols] as float32 (per-expert biases).
func (l *Loader) Floats2(name string, rows, cols int) []float32 {
	w := l.Get(name, rows, cols)
	if l.Err != nil {
		return nil
	}
	return w.Float32()
}

// Transpose returns, from a stack w [n, in, cols] of x·W matrices, for
// each phase f < step and each matrix x, matrix x's columns f, f+step, ...
// as an [out, in] weight in w's dtype (a byte-level gather; 16- and 32-bit
// dtypes only): GPT-OSS's fused experts, whose gate and up columns
// interleave (step 2). w is materialized once, and the matrices are
// transposed in parallel, in square tiles so that both the reads and the
// writes stay in cache.
func (l *Loader) Transpose(w tensor.Weight, step int) [][]tensor.Weight {
	w, ok := l.materialize(w)
	if !ok {
		return nil
	}
	n, in, cols := w.Shape[0], w.Shape[1], w.Shape[2]
	size, err := w.DType.RowBytes(1)
	if err != nil || size < 2 || step < 1 || cols%step != 0 {
		l.Err = fmt.Errorf("tensor %s: %v weights of %d columns cannot be transposed at load in %d phases", w.Name, w.DType, cols, step)
		return nil
	}
	out := cols / step
	ws := make([][]tensor.Weight, step)
	for f := range step {
		ws[f] = make([]tensor.Weight, n)
		for x := range n {
			ws[f][x] = tensor.Weight{Name: fmt.Sprintf("%s[%d][:, %d::%d]ᵀ", w.Name, x, f, step), DType: w.DType,
				Shape: []int{out, in}, Data: make([]byte, out*in*size)}
		}
	}
	par.For(step*n, 1, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			f, x := j/n, j%n
			transposeTiles(ws[f][x].Data, w.Data[x*in*cols*size:(x+1)*in*cols*size], in, cols, out, f, step, size)
		}
	})
	return ws
}

// transposeTiles sets dst[o][i] = src[i][first+o·step] for elements of
// size bytes, dst [out, in], src [in, cols], a 64×64 tile at a time.
func transposeTiles(dst, src []byte, in, cols, out, first, step, size int) {
	const tile = 64
	for o0 := 0; o0 < out; o0 += tile {
		o1 := min(o0+tile, out)
		for i0 := 0; i0 < in; i0 += tile {
			i1 := min(i0+tile, in)
			for o := o0; o < o1; o++ {
				c := first + o*step
				d := dst[(o*in+i0)*size : (o*in+i1)*size]
				switch size {
				case 2:
					for i := i0; i < i1; i++ {
						s, t := (i*cols+c)*2, (i-i0)*2
						d[t], d[t+1] = src[s], src[s+1]
					}
				default:
					for i := i0; i < i1; i++ {
						s := (i*cols + c) * size
						copy(d[(i-i0)*size:(i-i0+1)*size], src[s:s+size])
					}
				}
			}
		}
	}
}
