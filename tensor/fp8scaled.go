package tensor

import (
	"fmt"
	"math"
	"runtime"
)

// ScaledFP8 is a linear layer's weight [out, in] in e4m3 with float32
// scales over blocks of BlockRows×BlockCols values:
//
//	W[o, i] = e4m3(Q[o, i]) · Scales[(o/BlockRows)·ceil(in/BlockCols) + i/BlockCols]
//
// One scale per tensor is a block of [out, in], one per output channel a
// block of [1, in]; DeepSeek-V3 and Qwen3-FP8 ship [128, 128] blocks.
type ScaledFP8 struct {
	Q                    Weight // FP8E4M3 [out, in]
	Scales               []float32
	BlockRows, BlockCols int
}

// Out and In are the weight's shape.
func (s ScaledFP8) Out() int { return s.Q.Rows() }
func (s ScaledFP8) In() int  { return s.Q.Cols() }

// ScaleCols is the number of scale blocks along a row.
func (s ScaledFP8) ScaleCols() int { return (s.In() + s.BlockCols - 1) / s.BlockCols }

// PerRow reports whether every row has one scale (one per tensor or per
// output channel): what a product scaled after the sum can apply.
func (s ScaledFP8) PerRow() bool { return s.BlockCols >= s.In() }

// Scale is the scale of element (o, i).
func (s ScaledFP8) Scale(o, i int) float32 {
	return s.Scales[(o/s.BlockRows)*s.ScaleCols()+i/s.BlockCols]
}

// RowScales expands a PerRow weight's scales to one per output row.
func (s ScaledFP8) RowScales() []float32 {
	out := make([]float32, s.Out())
	for o := range out {
		out[o] = s.Scale(o, 0)
	}
	return out
}

// Validate checks the dtype, shape and number of scales.
func (s ScaledFP8) Validate() error {
	q := s.Q
	switch {
	case q.DType != FP8E4M3 || len(q.Shape) != 2:
		return fmt.Errorf("fp8 weight %s: want a 2-D FP8_E4M3 tensor, have %v %v", q.Name, q.DType, q.Shape)
	case s.BlockRows <= 0 || s.BlockCols <= 0:
		return fmt.Errorf("fp8 weight %s: scale blocks of %dx%d", q.Name, s.BlockRows, s.BlockCols)
	}
	if err := q.Validate(); err != nil {
		return err
	}
	if want := (s.Out() + s.BlockRows - 1) / s.BlockRows * s.ScaleCols(); len(s.Scales) != want {
		return fmt.Errorf("fp8 weight %s: %d scales; [%d, %d] in %dx%d blocks needs %d", q.Name, len(s.Scales), s.Out(), s.In(), s.BlockRows, s.BlockCols, want)
	}
	return nil
}

// Widen returns the weight's values Q·scale (a float32 product) stored as
// dt (F32, BF16 or F16, rounded to nearest even).
func (s ScaledFP8) Widen(dt DType) Weight {
	rows, cols := s.Out(), s.In()
	rowBytes, _ := dt.RowBytes(cols)
	out := Weight{Name: s.Q.Name, DType: dt, Shape: []int{rows, cols}, Data: make([]byte, rows*rowBytes)}
	parallelRows(rows, cols, func(lo, hi int) {
		row := make([]float32, cols)
		for r := lo; r < hi; r++ {
			s.WidenRow(r, row)
			EncodeInto(dt, row, out.Data[r*rowBytes:(r+1)*rowBytes])
		}
	})
	return out
}

// WidenRow sets dst (In values) to row o of the weight as float32.
func (s ScaledFP8) WidenRow(o int, dst []float32) {
	cols := s.In()
	q := s.Q.Data[o*cols : (o+1)*cols]
	for c := 0; c < cols; c += s.BlockCols {
		end := min(c+s.BlockCols, cols)
		DecodeFP8E4M3(dst[c:end], q[c:end], s.Scale(o, c))
	}
}

// QuantizeFP8Rows quantises w ([out, in], any dtype) to e4m3 with one
// scale per output row (QuantizeFP8Blocks with blocks of [1, in]).
func QuantizeFP8Rows(w Weight) (ScaledFP8, error) {
	return QuantizeFP8Blocks(w, 1, w.Cols())
}

// QuantizeFP8Blocks quantises w ([out, in], any dtype; a synthetic weight
// is generated) to e4m3 with one scale per br×bc block, as QuantizeFP8Row
// does each row: scale = max|block|/448, Q = e4m3(w·(1/scale)).
func QuantizeFP8Blocks(w Weight, br, bc int) (ScaledFP8, error) {
	if len(w.Shape) != 2 || br <= 0 || bc <= 0 {
		return ScaledFP8{}, fmt.Errorf("quantize %s to fp8: want a 2-D weight in positive blocks, have shape %v in %dx%d", w.Name, w.Shape, br, bc)
	}
	if err := w.Validate(); err != nil {
		return ScaledFP8{}, err
	}
	rows, cols := w.Rows(), w.Cols()
	s := ScaledFP8{
		Q:         Weight{Name: w.Name, DType: FP8E4M3, Shape: []int{rows, cols}, Data: make([]byte, rows*cols)},
		BlockRows: br, BlockCols: bc,
	}
	gr, gc := (rows+br-1)/br, s.ScaleCols()
	s.Scales = make([]float32, gr*gc)
	parallelRows(gr, br*cols, func(lo, hi int) {
		vals := make([]float32, br*cols)
		for g := lo; g < hi; g++ {
			r0, r1 := g*br, min((g+1)*br, rows)
			for r := r0; r < r1; r++ {
				w.DecodeRow(r, vals[(r-r0)*cols:(r-r0+1)*cols])
			}
			for b := range gc {
				c0, c1 := b*bc, min((b+1)*bc, cols)
				var amax float32
				for r := range r1 - r0 {
					for _, v := range vals[r*cols+c0 : r*cols+c1] {
						amax = max(amax, float32(math.Abs(float64(v))))
					}
				}
				scale := amax / FP8E4M3Max
				s.Scales[g*gc+b] = scale
				for r := r0; r < r1; r++ {
					q := s.Q.Data[r*cols+c0 : r*cols+c1]
					if scale == 0 || amax != amax {
						clear(q)
						continue
					}
					EncodeFP8E4M3(q, vals[(r-r0)*cols+c0:(r-r0)*cols+c1], 1/scale)
				}
			}
		}
	})
	return s, nil
}

// QuantizeFP8Row writes x as e4m3 into q with one scale, which it
// returns: scale = max|x|/448, q = e4m3(x·(1/scale)), both float32
// operations rounded to nearest even, saturating at ±448; an all-zero x
// has scale 0 and zero quants. This is the per-token activation
// quantisation of an FP8 linear layer and its per-channel weight
// quantisation; the GPU's quantise kernel computes the same bits.
func QuantizeFP8Row(q []byte, x []float32) float32 {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	scale := amax / FP8E4M3Max
	if scale == 0 || amax != amax {
		clear(q[:len(x)])
		return scale
	}
	EncodeFP8E4M3(q, x, 1/scale)
	return scale
}

// parallelRows runs fn over [0, rows) split across the cores when the
// matrix is large enough to be worth it.
func parallelRows(rows, cols int, fn func(lo, hi int)) {
	splitRun(rows, min(runtime.GOMAXPROCS(0), max(1, rows*cols/(1<<18))), fn)
}
