package cpu

import "math"

// Rope applies rotary position embeddings to heads of width HeadDim.
type Rope struct {
	HeadDim     int
	Interleaved bool      // rotate adjacent pairs (x[2i], x[2i+1]) instead of halves (x[i], x[i+d/2])
	InvFreq     []float32 // [HeadDim/2]
}

// NewRope makes a rotation for heads of headDim values.
func NewRope(headDim int, invFreq []float32, interleaved bool) *Rope {
	return &Rope{HeadDim: headDim, Interleaved: interleaved, InvFreq: invFreq}
}

// Apply rotates every head of every row of x in place.
//
//	x: [T, heads*HeadDim] with rows of rowWidth, positions: [T]
func (r *Rope) Apply(x []float32, rowWidth int, positions []int32) {
	half := r.HeadDim / 2
	cos := make([]float32, half)
	sin := make([]float32, half)
	for t, pos := range positions {
		for i, f := range r.InvFreq {
			angle := float32(pos) * f
			cos[i] = float32(math.Cos(float64(angle)))
			sin[i] = float32(math.Sin(float64(angle)))
		}
		row := x[t*rowWidth : (t+1)*rowWidth]
		for h := 0; h+r.HeadDim <= rowWidth; h += r.HeadDim {
			head := row[h : h+r.HeadDim]
			for i := range half {
				a, b := i, i+half
				if r.Interleaved {
					a, b = 2*i, 2*i+1
				}
				x0, x1 := head[a], head[b]
				head[a] = x0*cos[i] - x1*sin[i]
				head[b] = x0*sin[i] + x1*cos[i]
			}
		}
	}
}
