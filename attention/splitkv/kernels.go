package splitkv

import (
	"github.com/gosling-ai/gosling/device/cpu"
)

// The innermost loops, kept as small leaf functions over contiguous
// float32 slices so that an assembly pass (AVX2/AVX-512 with FMA) can
// replace them one by one; these portable versions stay as the fallback
// the tests run. Eight independent accumulators hide the add latency.

// dotRows is s[x] = Σ_d q[d]·rows[x][off+d]: one query row against a tile
// of key rows.
func dotRows(s, q []float32, rows [][]float32, off int) {
	cpu.DotRows(s, q, rows, off)
}

// pvTile is acc[d] += Σ_j p[j]·rows[j][off+d]: one query row's share of a
// key tile. It sums eight keys at a time with eight output values held in
// registers, so acc is loaded and stored once per eight keys rather than
// once per key. Eight and not the whole tile: pool rows are often a
// multiple of 4 KiB apart, so the same offset in many rows falls in one L1
// set, which holds about eight lines.
func pvTile(acc, p []float32, rows [][]float32, off int) {
	cpu.AccumulateRows(acc, p, rows, off)
}

// axpy is y += alpha·x; x has at least len(y) values.
func axpy(y []float32, alpha float32, x []float32) {
	cpu.Axpy(y, alpha, x)
}

// scaleInPlace is y *= s.
func scaleInPlace(y []float32, s float32) {
	for i := range y {
		y[i] *= s
	}
}

// scaleInto is dst = s·src; src has at least len(dst) values.
func scaleInto(dst, src []float32, s float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = s * src[i]
	}
}

// maxOf is the largest value (−Inf for an empty or fully masked slice).
func maxOf(x []float32) float32 {
	return cpu.Max(x)
}

// expSub replaces x[i] by exp(x[i] − m) (−Inf becomes 0) and returns the
// sum. m must be finite and >= every x[i].
func expSub(x []float32, m float32) float32 {
	return cpu.ExpSubSum(x, m)
}

// nonzeroSpan is [first, end): the smallest range holding every nonzero
// value of x (empty when there is none).
func nonzeroSpan(x []float32) (first, end int) {
	for end = len(x); end > 0 && x[end-1] == 0; end-- {
	}
	for first < end && x[first] == 0 {
		first++
	}
	return first, end
}
