package flash

import (
	"math"

	"github.com/gosling-ai/gosling/device/cpu"
)

// The inner loops of the kernel, kept small and free of interface calls so
// that an assembly pass (AVX2/AVX-512, NEON) can replace them one by one.
// All of them work on contiguous float32 slices.

var negInf = float32(math.Inf(-1))

// dot is Σ x[i]·y[i] over len(x); y must be at least as long.
func dot(x, y []float32) float32 { return cpu.Dot(x, y[:len(x)]) }

// dotRows is s[x] = dot(q, rows[x][off:]) for x in [0, len(s)): one query
// row against a tile of key rows.
func dotRows(s, q []float32, rows [][]float32, off int) {
	cpu.DotRows(s, q, rows, off)
}

// axpy is y += a·x over len(y).
func axpy(y []float32, a float32, x []float32) { cpu.Axpy(y, a, x[:len(y)]) }

// accumulateRows is y += Σ_x p[x]·rows[x][off:off+len(y)]: one row of
// probabilities times a tile of value rows.
func accumulateRows(y, p []float32, rows [][]float32, off int) {
	cpu.AccumulateRows(y, p, rows, off)
}

// scale is y *= a.
func scale(y []float32, a float32) {
	for i := range y {
		y[i] *= a
	}
}

// maxOf is the largest value of s (-Inf for an empty or all -Inf s).
func maxOf(s []float32) float32 {
	return cpu.Max(s)
}

// expSub replaces s[x] by exp(s[x]-m) (0 for -Inf) and returns their sum;
// m >= every s[x], so nothing overflows.
func expSub(s []float32, m float32) float32 {
	return cpu.ExpSubSum(s, m)
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
