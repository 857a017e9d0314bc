package flash

import "math"

// The inner loops of the kernel, kept small and free of interface calls so
// that an assembly pass (AVX2/AVX-512, NEON) can replace them one by one.
// All of them work on contiguous float32 slices.

var negInf = float32(math.Inf(-1))

// dot is Σ x[i]·y[i] over len(x); y must be at least as long.
func dot(x, y []float32) float32 {
	n := len(x)
	y = y[:n]
	// Four independent sums hide the add latency; the scalar compiler
	// does not reassociate on its own.
	var s0, s1, s2, s3 float32
	i := 0
	for ; i <= n-4; i += 4 {
		xs, ys := x[i:i+4:i+4], y[i:i+4:i+4]
		s0 += xs[0] * ys[0]
		s1 += xs[1] * ys[1]
		s2 += xs[2] * ys[2]
		s3 += xs[3] * ys[3]
	}
	for ; i < n; i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot4 is the dot of x with each of y0..y3 (each at least len(x)): x is
// loaded once for four keys.
func dot4(x, y0, y1, y2, y3 []float32) (s0, s1, s2, s3 float32) {
	n := len(x)
	y0, y1, y2, y3 = y0[:n], y1[:n], y2[:n], y3[:n]
	for i, xv := range x {
		s0 += xv * y0[i]
		s1 += xv * y1[i]
		s2 += xv * y2[i]
		s3 += xv * y3[i]
	}
	return s0, s1, s2, s3
}

// dotRows is s[x] = dot(q, rows[x][off:]) for x in [0, len(s)): one query
// row against a tile of key rows.
func dotRows(s, q []float32, rows [][]float32, off int) {
	rows = rows[:len(s)]
	x := 0
	for ; x <= len(s)-4; x += 4 {
		s[x], s[x+1], s[x+2], s[x+3] = dot4(q, rows[x][off:], rows[x+1][off:], rows[x+2][off:], rows[x+3][off:])
	}
	for ; x < len(s); x++ {
		s[x] = dot(q, rows[x][off:])
	}
}

// axpy4 is y += a0·x0 + a1·x1 + a2·x2 + a3·x3 over len(y): four value rows
// folded into one accumulator row per pass, so y is loaded and stored a
// quarter as often as with four single axpys.
func axpy4(y []float32, a0, a1, a2, a3 float32, x0, x1, x2, x3 []float32) {
	n := len(y)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	for i := range y {
		y[i] += a0*x0[i] + a1*x1[i] + a2*x2[i] + a3*x3[i]
	}
}

// axpy is y += a·x over len(y).
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// accumulateRows is y += Σ_x p[x]·rows[x][off:off+len(y)]: one row of
// probabilities times a tile of value rows.
func accumulateRows(y, p []float32, rows [][]float32, off int) {
	rows = rows[:len(p)]
	x := 0
	for ; x <= len(p)-4; x += 4 {
		axpy4(y, p[x], p[x+1], p[x+2], p[x+3], rows[x][off:], rows[x+1][off:], rows[x+2][off:], rows[x+3][off:])
	}
	for ; x < len(p); x++ {
		if p[x] != 0 {
			axpy(y, p[x], rows[x][off:])
		}
	}
}

// scale is y *= a.
func scale(y []float32, a float32) {
	for i := range y {
		y[i] *= a
	}
}

// maxOf is the largest value of s (-Inf for an empty or all -Inf s).
func maxOf(s []float32) float32 {
	m := negInf
	for _, x := range s {
		m = max(m, x)
	}
	return m
}

// expSub replaces s[x] by exp(s[x]-m) (0 for -Inf) and returns their sum;
// m >= every s[x], so nothing overflows.
func expSub(s []float32, m float32) float32 {
	var sum float32
	for x, v := range s {
		e := exp(v - m)
		s[x] = e
		sum += e
	}
	return sum
}

// softcap replaces s[x] by c·tanh(s[x]/c).
func softcap(s []float32, c float32) {
	for x, v := range s {
		s[x] = c * float32(math.Tanh(float64(v/c)))
	}
}

// exp is e^x for x <= 0 in float32, to about 2 ulp: x = n·ln2 + r with
// |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n put in the exponent.
// math.Exp works in float64 and is several times slower; this is the
// shape a SIMD version takes.
func exp(x float32) float32 {
	if x < -87.3 { // e^x underflows float32 normals (also catches -Inf)
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375 // ln2 split so n·ln2hi is exact
		ln2lo = -2.12194440e-4
	)
	ni := int32(x*log2e - 0.5) // round to nearest for x <= 0
	n := float32(ni)
	r := x - n*ln2hi - n*ln2lo
	// Taylor coefficients 1/k! for e^r on [-ln2/2, ln2/2].
	p := float32(1.0 / 720)
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	return p * math.Float32frombits(uint32(ni+127)<<23)
}
