package cpu

import "math"

// The inner loops of attention, vectorised, with the signatures of the
// scalar loops of the flash and splitkv backends (attention/flash/ops.go,
// attention/splitkv/kernels.go), so each can be swapped for these one by
// one: q·K over a tile of key rows, P·V over a tile of value rows, and the
// softmax pieces (Max, ExpSubSum).

// attnWidth is the head-width multiple the assembly handles (8 lanes);
// other widths take the Go loops.
const attnWidth = 8

// rowsLongEnough checks, once per call, what the assembly cannot.
func rowsLongEnough(rows [][]float32, off, d int) bool {
	for _, r := range rows {
		if len(r) < off+d {
			return false
		}
	}
	return off >= 0
}

// DotRows sets s[x] = Σ_d q[d]·rows[x][off+d] for x in [0, len(s)): one
// query row against a tile of key rows, four rows per pass over q.
func DotRows(s, q []float32, rows [][]float32, off int) {
	rows = rows[:len(s)]
	vk := &kernels().vec
	if len(q)%attnWidth == 0 && len(q) > 0 && len(s) > 0 && vk.width > 1 && rowsLongEnough(rows, off, len(q)) {
		vk.dotRows(s, q, rows, off)
		return
	}
	goDotRows(s, q, rows, off)
}

// AccumulateRows adds Σ_x p[x]·rows[x][off:off+len(y)] to y: one row of
// probabilities times a tile of value rows, y loaded and stored once per
// four rows. Rows past the last multiple of four whose p is 0 (masked)
// are skipped.
func AccumulateRows(y, p []float32, rows [][]float32, off int) {
	rows = rows[:len(p)]
	vk := &kernels().vec
	if len(y)%attnWidth == 0 && len(y) > 0 && len(p) > 0 && vk.width > 1 && rowsLongEnough(rows, off, len(y)) {
		vk.accRows(y, p, rows, off)
		return
	}
	goAccRows(y, p, rows, off)
}

// ExpSubSum replaces x[i] by e^(x[i]-m) (0 for -Inf) and returns their
// sum; m >= every x[i] keeps it finite.
func ExpSubSum(x []float32, m float32) float32 {
	if math.IsInf(float64(m), -1) {
		clear(x)
		return 0
	}
	n, vk := split(len(x))
	var sum float32
	if n > 0 {
		sum = vk.expSubSum(x[:n], m)
	}
	return sum + goExpSubSum(x[n:], m)
}
