package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

// columnMajorReference computes what cuBLAS computes for the column-major
// parameters: D[m × n] = op(A)·op(B), each operand stored column-major
// with its leading dimension.
func columnMajorReference(c columnMajorGemm, a, b []float64) []float64 {
	at := func(i, l int) float64 { // op(A)[i, l], i < m, l < k
		if c.transA == cublasOpT {
			return a[i*c.lda+l] // stored [k × m]: element (l, i)
		}
		return a[l*c.lda+i]
	}
	bt := func(l, j int) float64 { // op(B)[l, j], l < k, j < n
		if c.transB == cublasOpT {
			return b[l*c.ldb+j]
		}
		return b[j*c.ldb+l]
	}
	d := make([]float64, c.ldd*c.n)
	for j := range c.n {
		for i := range c.m {
			var s float64
			for l := range c.k {
				s += at(i, l) * bt(l, j)
			}
			d[j*c.ldd+i] = s
		}
	}
	return d
}

// The row-major → column-major restatement must give the row-major product
// for every layout, including padded leading dimensions.
func TestGemmColumnMajorMapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range []Gemm{
		{M: 3, N: 5, K: 7, TransB: true},
		{M: 3, N: 5, K: 7},
		{M: 1, N: 8, K: 4, TransB: true},
		{M: 4, N: 6, K: 5, TransB: true, LDA: 9, LDB: 7, LDD: 11},
		{M: 4, N: 6, K: 5, LDA: 8, LDB: 10, LDD: 6},
	} {
		full := g.withDefaults()
		if err := g.validate(); err != nil {
			t.Fatal(err)
		}
		a := make([]float64, g.M*full.LDA)
		bRows := g.K
		if g.TransB {
			bRows = g.N
		}
		b := make([]float64, bRows*full.LDB)
		for i := range a {
			a[i] = rng.NormFloat64()
		}
		for i := range b {
			b[i] = rng.NormFloat64()
		}
		// Row-major reference: D[i, j] = Σ A[i, l]·op(B)[l, j].
		want := make([]float64, g.M*full.LDD)
		for i := range g.M {
			for j := range g.N {
				var s float64
				for l := range g.K {
					var bv float64
					if g.TransB {
						bv = b[j*full.LDB+l]
					} else {
						bv = b[l*full.LDB+j]
					}
					s += a[i*full.LDA+l] * bv
				}
				want[i*full.LDD+j] = s
			}
		}
		c := g.columnMajor()
		// cuBLAS's first operand is our B, its second our A.
		got := columnMajorReference(c, b, a)
		for i := range g.M {
			for j := range g.N {
				if d := math.Abs(got[i*full.LDD+j] - want[i*full.LDD+j]); d > 1e-12 {
					t.Fatalf("%+v: D[%d,%d] = %v, want %v", g, i, j, got[i*full.LDD+j], want[i*full.LDD+j])
				}
			}
		}
		// The stored shapes must fit the leading dimensions (what cuBLASLt checks).
		if c.lda < c.rowsA || c.ldb < c.rowsB || c.ldd < c.rowsD {
			t.Errorf("%+v: leading dimension below rows: %+v", g, c)
		}
	}
}

func TestGemmValidate(t *testing.T) {
	bad := []Gemm{
		{M: 0, N: 1, K: 1},
		{M: 1, N: 4, K: 4, LDA: 3},
		{M: 1, N: 4, K: 4, TransB: true, LDB: 3},
		{M: 1, N: 4, K: 2, LDB: 3},
		{M: 1, N: 4, K: 4, LDD: 2},
	}
	for _, g := range bad {
		if g.validate() == nil {
			t.Errorf("%+v accepted", g)
		}
	}
}
