package splitkv

import "math"

// The innermost loops, kept as small leaf functions over contiguous
// float32 slices so that an assembly pass (AVX2/AVX-512 with FMA) can
// replace them one by one; these portable versions stay as the fallback
// the tests run. Eight independent accumulators hide the add latency.

// dot is Σ a[i]·b[i]; b has at least len(a) values.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x, y := a[i:i+8:i+8], b[i:i+8:i+8]
		s0 += x[0] * y[0]
		s1 += x[1] * y[1]
		s2 += x[2] * y[2]
		s3 += x[3] * y[3]
		s4 += x[4] * y[4]
		s5 += x[5] * y[5]
		s6 += x[6] * y[6]
		s7 += x[7] * y[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

// pvTile is acc[d] += Σ_j p[j]·rows[j][off+d]: one query row's share of a
// key tile. It sums eight keys at a time with eight output values held in
// registers, so acc is loaded and stored once per eight keys rather than
// once per key. Eight and not the whole tile: pool rows are often a
// multiple of 4 KiB apart, so the same offset in many rows falls in one L1
// set, which holds about eight lines.
func pvTile(acc, p []float32, rows [][]float32, off int) {
	rows = rows[:len(p)]
	n := len(acc)
	for j0 := 0; j0 < len(rows); j0 += 8 {
		sub, ps := rows[j0:min(j0+8, len(rows))], p[j0:min(j0+8, len(rows))]
		d := 0
		for ; d+8 <= n; d += 8 {
			a := acc[d : d+8 : d+8]
			s0, s1, s2, s3, s4, s5, s6, s7 := a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
			at := off + d
			for j, row := range sub {
				pj, x := ps[j], row[at:at+8:at+8]
				s0 += pj * x[0]
				s1 += pj * x[1]
				s2 += pj * x[2]
				s3 += pj * x[3]
				s4 += pj * x[4]
				s5 += pj * x[5]
				s6 += pj * x[6]
				s7 += pj * x[7]
			}
			a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = s0, s1, s2, s3, s4, s5, s6, s7
		}
		for ; d < n; d++ {
			s := acc[d]
			for j, row := range sub {
				s += ps[j] * row[off+d]
			}
			acc[d] = s
		}
	}
}

// axpy is y += alpha·x; x has at least len(y) values.
func axpy(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	for len(y) >= 8 {
		y[0] += alpha * x[0]
		y[1] += alpha * x[1]
		y[2] += alpha * x[2]
		y[3] += alpha * x[3]
		y[4] += alpha * x[4]
		y[5] += alpha * x[5]
		y[6] += alpha * x[6]
		y[7] += alpha * x[7]
		x, y = x[8:], y[8:]
	}
	for i := range y {
		y[i] += alpha * x[i]
	}
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
	m := negInf
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// expSub replaces x[i] by exp(x[i] − m) (−Inf becomes 0) and returns the
// sum. m must be finite and >= every x[i].
func expSub(x []float32, m float32) float32 {
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += e
	}
	return sum
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
