package cpu

import (
	"math"
	"slices"
	"sync"
)

// Rope applies rotary position embeddings to heads of width HeadDim.
type Rope struct {
	HeadDim     int
	Interleaved bool      // rotate adjacent pairs (x[2i], x[2i+1]) instead of halves (x[i], x[i+d/2])
	InvFreq     []float32 // [HeadDim/2]

	// Every layer rotates q and k at the same positions, so the cos/sin
	// table of the last positions is kept: one table per forward instead
	// of one per call (2·layers calls, each needing T·HeadDim/2 cos+sin).
	mu   sync.Mutex
	last *ropeTable
}

type ropeTable struct {
	positions  []int32
	cos, sin   []float32 // [T][HeadDim/2]
	cos2, sin2 []float32 // Interleaved: [T][HeadDim], each value twice, for the pairs kernel
}

// NewRope makes a rotation for heads of headDim values.
func NewRope(headDim int, invFreq []float32, interleaved bool) *Rope {
	return &Rope{HeadDim: headDim, Interleaved: interleaved, InvFreq: invFreq}
}

func (r *Rope) table(positions []int32) *ropeTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.last; t != nil && slices.Equal(t.positions, positions) {
		return t
	}
	half := r.HeadDim / 2
	t := &ropeTable{positions: slices.Clone(positions), cos: make([]float32, len(positions)*half), sin: make([]float32, len(positions)*half)}
	for p, pos := range positions {
		for i, f := range r.InvFreq[:min(half, len(r.InvFreq))] {
			angle := float32(pos) * f
			t.cos[p*half+i] = float32(math.Cos(float64(angle)))
			t.sin[p*half+i] = float32(math.Sin(float64(angle)))
		}
	}
	if r.Interleaved {
		t.cos2, t.sin2 = make([]float32, 2*len(t.cos)), make([]float32, 2*len(t.sin))
		for i := range t.cos {
			t.cos2[2*i], t.cos2[2*i+1] = t.cos[i], t.cos[i]
			t.sin2[2*i], t.sin2[2*i+1] = t.sin[i], t.sin[i]
		}
	}
	r.last = t
	return t
}

// Apply rotates every head of every row of x in place.
//
//	x: [T, heads*HeadDim] with rows of rowWidth, positions: [T]
func (r *Rope) Apply(x []float32, rowWidth int, positions []int32) {
	r.applyRows(x, rowWidth, r.table(positions), 0, len(positions))
}

// applyRows rotates rows [lo, hi) of x with tab, the table of all its
// positions (so that several workers share one table).
func (r *Rope) applyRows(x []float32, rowWidth int, tab *ropeTable, lo, hi int) {
	half, hd := r.HeadDim/2, r.HeadDim
	heads := rowWidth / max(1, hd)
	if heads == 0 {
		return
	}
	vk := &kernels().vec
	for t := lo; t < hi; t++ {
		cos := tab.cos[t*half : (t+1)*half]
		sin := tab.sin[t*half : (t+1)*half]
		row := x[t*rowWidth : (t+1)*rowWidth]
		switch {
		case r.Interleaved && vk.ropePairs != nil && hd%8 == 0:
			vk.ropePairs(row, tab.cos2[t*hd:(t+1)*hd], tab.sin2[t*hd:(t+1)*hd], hd, heads)
			continue
		case !r.Interleaved && vk.ropeHalves != nil && half%8 == 0:
			vk.ropeHalves(row, cos, sin, half, heads)
			continue
		}
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
