package cpu

import "math"

// The inner loops of attention, vectorised, with the signatures of the
// leaf functions of the CPU attention core (attention/cpuattn/kernels.go):
// q·K over a tile of key rows, P·V over a tile of value rows, and the
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

// DotRowsHeads is DotRows for heads query rows at once: for h < heads,
// q's row h (q[h·d:(h+1)·d], d = len(q)/heads) against the key rows at
// off + (h/group)·d, into s[h·sStride:][:len(rows)]. The kernels take one
// row at a time through every head: a row's heads lie side by side, so
// each key row is read front to back once for all its heads, as one
// sequential stream (a per-head pass would stride through memory, and
// several rows read side by side, as several streams, measured about half
// the bandwidth of one on Zen 4).
//
// warm is rows the caller reads next (nil: none): before key row x the
// kernels also prefetch warm[x]'s same bytes into L2, so that the next
// pass (the tile's value rows, or the next tile's key rows) finds them
// there instead of restarting the stream from memory.
func DotRowsHeads(s []float32, sStride int, q []float32, heads, group int, rows [][]float32, off int, warm [][]float32) {
	n := len(rows)
	if n == 0 || heads <= 0 {
		return
	}
	d := len(q) / heads
	_ = s[(heads-1)*sStride+n-1]
	vk := &kernels().vec
	if vk.dotRowsHeads != nil && group > 0 && heads%group == 0 && d%attnWidth == 0 && d > 0 && len(q) == heads*d &&
		sStride >= n && rowsLongEnough(rows, off, heads/group*d) && rowsLongEnough(warm, off, heads/group*d) {
		vk.dotRowsHeads(s, sStride, q, heads, group, rows, off, warm)
		return
	}
	for h := range heads {
		DotRows(s[h*sStride:h*sStride+n], q[h*d:(h+1)*d], rows, off+h/group*d)
	}
}

// AccumulateRowsHeads is AccumulateRows for heads output rows at once:
// for h < heads, y[h·yStride:][:d] += Σ_x p[h·pStride + x]·rows[x][off +
// (h/group)·d:][:d], d = len(y)/heads when yStride is d. One row at a
// time through every head, as DotRowsHeads, adding the rows in order, and
// warming warm's rows as it goes.
func AccumulateRowsHeads(y []float32, yStride int, p []float32, pStride, heads, group int, rows [][]float32, off int, warm [][]float32) {
	n := len(rows)
	if n == 0 || heads <= 0 {
		return
	}
	d := yStride
	_ = y[(heads-1)*yStride+d-1]
	_ = p[(heads-1)*pStride+n-1]
	vk := &kernels().vec
	if vk.accRowsHeads != nil && group > 0 && heads%group == 0 && d%attnWidth == 0 && d > 0 && len(y) == heads*d &&
		pStride >= n && rowsLongEnough(rows, off, heads/group*d) && rowsLongEnough(warm, off, heads/group*d) {
		vk.accRowsHeads(y, yStride, p, pStride, heads, group, rows, off, warm)
		return
	}
	for h := range heads {
		AccumulateRows(y[h*d:(h+1)*d], p[h*pStride:h*pStride+n], rows, off+h/group*d)
	}
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
