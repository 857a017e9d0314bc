package flash

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The inner loops against plain float64 sums, at lengths that exercise
// every unrolled tail; an assembly version must pass the same test.
func TestOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	vec := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64())
		}
		return out
	}
	near := func(what string, got float32, want float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 1e-5*max(1, math.Abs(want)) {
			t.Fatalf("%s: got %g, want %g", what, got, want)
		}
	}
	for _, n := range []int{1, 3, 4, 7, 64, 129} {
		for _, keys := range []int{1, 3, 4, 9} {
			q := vec(n)
			rows := make([][]float32, keys)
			for x := range rows {
				rows[x] = vec(n + 5) // the head at offset 5 of a wider row
			}
			s := make([]float32, keys)
			dotRows(s, q, rows, 5)
			p := vec(keys)
			y, want := vec(n), make([]float64, n)
			for i := range y {
				want[i] = float64(y[i])
			}
			accumulateRows(y, p, rows, 5)
			for x := range rows {
				var d float64
				for i := range n {
					d += float64(q[i]) * float64(rows[x][5+i])
					want[i] += float64(p[x]) * float64(rows[x][5+i])
				}
				near("dotRows", s[x], d)
			}
			for i := range y {
				near("accumulateRows", y[i], want[i])
			}
		}
	}
}

func benchRows(n int) ([]float32, [][]float32, []float32) {
	rng := rand.New(rand.NewPCG(1, 1))
	q := make([]float32, n)
	rows := make([][]float32, tileKeys)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	for x := range rows {
		rows[x] = make([]float32, n)
		for i := range rows[x] {
			rows[x][i] = float32(rng.NormFloat64())
		}
	}
	return q, rows, make([]float32, tileKeys)
}

// BenchmarkDotRows is one query row against a tile of 128-wide keys.
func BenchmarkDotRows(b *testing.B) {
	q, rows, s := benchRows(128)
	for b.Loop() {
		dotRows(s, q, rows, 0)
	}
	b.ReportMetric(float64(2*128*tileKeys*b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkAccumulateRows is one probability row times a tile of values.
func BenchmarkAccumulateRows(b *testing.B) {
	y, rows, p := benchRows(128)
	for i := range p {
		p[i] = 1e-3
	}
	for b.Loop() {
		accumulateRows(y, p, rows, 0)
	}
	b.ReportMetric(float64(2*128*tileKeys*b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
