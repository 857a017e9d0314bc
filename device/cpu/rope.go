package cpu

import (
	"math"
	"slices"
	"sync"
)

// Rope applies rotary position embeddings to heads of width HeadDim. The
// first 2·len(InvFreq) values of each head rotate (all of it when InvFreq
// has HeadDim/2 entries); the rest pass through (partial rotary, Phi-4-mini).
type Rope struct {
	HeadDim     int
	Interleaved bool      // rotate adjacent pairs (x[2i], x[2i+1]) instead of halves (x[i], x[i+rot/2])
	InvFreq     []float32 // [rot/2], rot ≤ HeadDim

	// Every layer rotates q and k at the same positions, so the cos/sin
	// table of the last positions is kept: one table per forward instead
	// of one per call (2·layers calls, each needing T·rot/2 cos+sin).
	mu   sync.Mutex
	last *ropeTable
}

type ropeTable struct {
	positions  []int32
	cos, sin   []float32 // [T][rot/2]
	cos2, sin2 []float32 // Interleaved: [T][rot], each value twice, for the pairs kernel
}

// NewRope makes a rotation for heads of headDim values.
func NewRope(headDim int, invFreq []float32, interleaved bool) *Rope {
	return &Rope{HeadDim: headDim, Interleaved: interleaved, InvFreq: invFreq}
}

// rot is the number of rotated values at the start of each head.
func (r *Rope) rot() int { return min(r.HeadDim, 2*len(r.InvFreq)) &^ 1 }

func (r *Rope) table(positions []int32) *ropeTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.last; t != nil && slices.Equal(t.positions, positions) {
		return t
	}
	half := r.rot() / 2
	t := &ropeTable{positions: slices.Clone(positions), cos: make([]float32, len(positions)*half), sin: make([]float32, len(positions)*half)}
	for p, pos := range positions {
		for i, f := range r.InvFreq[:half] {
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
	hd, rot := r.HeadDim, r.rot()
	half := rot / 2
	heads := rowWidth / max(1, hd)
	if heads == 0 || half == 0 {
		return
	}
	vk := &kernels().vec
	pairs := r.Interleaved && vk.ropePairs != nil && rot%8 == 0
	halves := !r.Interleaved && vk.ropeHalves != nil && half%8 == 0
	for t := lo; t < hi; t++ {
		cos := tab.cos[t*half : (t+1)*half]
		sin := tab.sin[t*half : (t+1)*half]
		row := x[t*rowWidth : (t+1)*rowWidth]
		// The assembly kernels rotate n whole heads laid back to back; a
		// partial rotation gives them one head's rotated prefix at a time.
		seg, n := hd, heads
		if rot < hd {
			seg, n = rot, 1
		}
		for h := 0; h < heads; h += n {
			head := row[h*hd : h*hd+seg*n]
			switch {
			case pairs:
				vk.ropePairs(head, tab.cos2[t*rot:(t+1)*rot], tab.sin2[t*rot:(t+1)*rot], rot, n)
			case halves:
				vk.ropeHalves(head, cos, sin, half, n)
			default:
				for g := range n {
					ropeHead(head[g*hd:g*hd+rot], cos, sin, r.Interleaved)
				}
			}
		}
	}
}

// ropeHead rotates one head's rotated prefix (len(head) = 2·len(cos)).
func ropeHead(head, cos, sin []float32, interleaved bool) {
	half := len(cos)
	for i := range half {
		a, b := i, i+half
		if interleaved {
			a, b = 2*i, 2*i+1
		}
		x0, x1 := head[a], head[b]
		head[a] = x0*cos[i] - x1*sin[i]
		head[b] = x0*sin[i] + x1*cos[i]
	}
}
