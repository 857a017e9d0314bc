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

// DotRowsHeadsBF16 is DotRowsHeads over rows of bfloat16 (little-endian,
// two bytes a value; off counts values): the rows are read in place and
// widened in registers, with no float32 copy of the tile. Widening is
// exact and the sums go in the order DotRowsHeads takes for the same
// arguments, so the scores are bit for bit those of the rows decoded to
// float32 first. It warms no following rows (DotRowsHeads's warm): on
// stories110M decode at 512 and 2,048 tokens warming measured no faster.
func DotRowsHeadsBF16(s []float32, sStride int, q []float32, heads, group int, rows [][]byte, off int) {
	n := len(rows)
	if n == 0 || heads <= 0 {
		return
	}
	d := len(q) / heads
	_ = s[(heads-1)*sStride+n-1]
	vk := &kernels().vec
	if vk.dotRowsHeadsBF16 != nil && group > 0 && heads%group == 0 && d%attnWidth == 0 && d > 0 && len(q) == heads*d &&
		sStride >= n && bf16RowsLongEnough(rows, off, heads/group*d) {
		vk.dotRowsHeadsBF16(s, sStride, q, heads, group, rows, off)
		return
	}
	// DotRowsHeads's fallback is DotRows per head, whose Go loop (goDot)
	// these mirror; its assembly takes widths that are a multiple of 8,
	// which the kernel above covers.
	for h := range heads {
		qh := q[h*d : (h+1)*d]
		koff := off + h/group*d
		for x, r := range rows {
			s[h*sStride+x] = goDotBF16(qh, r[2*koff:2*(koff+d)])
		}
	}
}

// AccumulateRowsHeadsBF16 is AccumulateRowsHeads over rows of bfloat16,
// read in place as DotRowsHeadsBF16, its sums bit for bit those of the
// rows decoded to float32 first.
func AccumulateRowsHeadsBF16(y []float32, yStride int, p []float32, pStride, heads, group int, rows [][]byte, off int) {
	n := len(rows)
	if n == 0 || heads <= 0 {
		return
	}
	d := yStride
	_ = y[(heads-1)*yStride+d-1]
	_ = p[(heads-1)*pStride+n-1]
	vk := &kernels().vec
	if vk.accRowsHeadsBF16 != nil && group > 0 && heads%group == 0 && d%attnWidth == 0 && d > 0 && len(y) == heads*d &&
		pStride >= n && bf16RowsLongEnough(rows, off, heads/group*d) {
		vk.accRowsHeadsBF16(y, yStride, p, pStride, heads, group, rows, off)
		return
	}
	for h := range heads {
		goAccRowsBF16(y[h*d:(h+1)*d], p[h*pStride:h*pStride+n], rows, off+h/group*d)
	}
}

// bf16RowsLongEnough is rowsLongEnough for rows of two bytes a value.
func bf16RowsLongEnough(rows [][]byte, off, d int) bool {
	for _, r := range rows {
		if len(r) < 2*(off+d) {
			return false
		}
	}
	return off >= 0
}

// bf16At is the i-th bfloat16 value of r, widened (exactly) to float32.
func bf16At(r []byte, i int) float32 {
	return math.Float32frombits(uint32(r[2*i])<<16 | uint32(r[2*i+1])<<24)
}

// goDotBF16 is goDot with b's values in bfloat16 (len(b) = 2·len(a)),
// summed in goDot's order.
func goDotBF16(a []float32, b []byte) float32 {
	b = b[:2*len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * bf16At(b, i)
		s1 += a[i+1] * bf16At(b, i+1)
		s2 += a[i+2] * bf16At(b, i+2)
		s3 += a[i+3] * bf16At(b, i+3)
	}
	for ; i < len(a); i++ {
		s0 += a[i] * bf16At(b, i)
	}
	return (s0 + s1) + (s2 + s3)
}

// goAccRowsBF16 is goAccRows over rows of bfloat16, in its order.
func goAccRowsBF16(y, p []float32, rows [][]byte, off int) {
	w := len(y)
	x := 0
	for ; x+4 <= len(p); x += 4 {
		r0, r1, r2, r3 := rows[x][2*off:2*(off+w)], rows[x+1][2*off:2*(off+w)], rows[x+2][2*off:2*(off+w)], rows[x+3][2*off:2*(off+w)]
		p0, p1, p2, p3 := p[x], p[x+1], p[x+2], p[x+3]
		for i := range y {
			y[i] += p0*bf16At(r0, i) + p1*bf16At(r1, i) + p2*bf16At(r2, i) + p3*bf16At(r3, i)
		}
	}
	for ; x < len(p); x++ {
		if a := p[x]; a != 0 {
			r := rows[x][2*off : 2*(off+w)]
			for i := range y {
				y[i] += a * bf16At(r, i)
			}
		}
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
