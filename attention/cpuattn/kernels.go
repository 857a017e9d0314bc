package cpuattn

import (
	"github.com/gosling-ai/gosling/device/cpu"
)

// The innermost loops: leaf functions over contiguous float32 slices that
// hand the tiles to device/cpu's assembly head kernels (their portable Go
// versions run under GOSLING_NOASM=1 and where the assembly does not fit).

// dotRowsHeads is s[h·sStride + x] = Σ_d q[h·Dk + d]·rows[x][off +
// (h/group)·Dk + d]: the query rows of a token's heads, side by side in q,
// against a tile of key rows, each key row read once for all its heads.
//
// With perHead the heads go one at a time (cpu.DotRows): an item of
// several tokens is bound by arithmetic on a tile that sits in L1, and
// the per-head kernel keeps the query row in registers across four key
// rows; the all-heads kernel reads each row once as one stream, which is
// what a one-token item, bound by memory, needs.
func dotRowsHeads(s []float32, sStride int, q []float32, heads, group int, rows [][]float32, off int, warm [][]float32, perHead bool) {
	if !perHead {
		cpu.DotRowsHeads(s, sStride, q, heads, group, rows, off, warm)
		return
	}
	d := len(q) / heads
	for h := range heads {
		cpu.DotRows(s[h*sStride:][:len(rows)], q[h*d:(h+1)*d], rows, off+h/group*d)
	}
}

// pvTileHeads is acc[h·dv + d] += Σ_x p[h·pStride + x]·rows[x][off +
// (h/group)·dv + d]: a token's heads' shares of a value tile, each V row
// read once for all its heads. Four keys at a time: pool rows are often a
// multiple of 4 KiB apart, so the same offset in many rows falls in one L1
// set, which holds about eight lines.
// With perHead the heads go one at a time (cpu.AccumulateRows), which
// loads and stores an output row once per four value rows (see
// dotRowsHeads).
func pvTileHeads(acc []float32, dv int, p []float32, pStride, heads, group int, rows [][]float32, off int, warm [][]float32, perHead bool) {
	if !perHead {
		cpu.AccumulateRowsHeads(acc, dv, p, pStride, heads, group, rows, off, warm)
		return
	}
	for h := range heads {
		cpu.AccumulateRows(acc[h*dv:(h+1)*dv], p[h*pStride:][:len(rows)], rows, off+h/group*dv)
	}
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
