package cpu

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/tensor"
)

// Sizes around the vector widths (8, 16) and their tails.
var vecSizes = []int{0, 1, 7, 8, 15, 16, 17, 31, 33, 64, 100, 1000}

func randVec(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

func near(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-87.3); x < 88.3; x += 0.0137 {
		want := math.Exp(float64(x))
		rel := math.Abs(float64(expf(x))-want) / want
		worst = math.Max(worst, rel)
	}
	if worst > 2.5e-7 {
		t.Errorf("expf relative error %.3g, want within 2 ulp", worst)
	}
	for _, tc := range []struct{ x, want float32 }{{0, 1}, {-100, 0}, {float32(math.Inf(-1)), 0}} {
		if got := expf(tc.x); got != tc.want {
			t.Errorf("expf(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if got := expf(200); got < 2e38 || math.IsInf(float64(got), 0) {
		t.Errorf("expf(200) = %v, want the clamp e^88.376", got)
	}
	if v := expf(float32(math.NaN())); v == v {
		t.Error("expf(NaN) is not NaN")
	}
}

// TestVectorOps checks each element-wise operation of every kernel set
// against float64 arithmetic, over lengths with and without tails.
func TestVectorOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	eachKernelSet(t, func(t *testing.T) {
		for _, n := range vecSizes {
			a, b := randVec(rng, n, 3), randVec(rng, n, 1)

			var dot, mag float64
			for i := range a {
				dot += float64(a[i]) * float64(b[i])
				mag += math.Abs(float64(a[i]) * float64(b[i]))
			}
			if got := Dot(a, b); math.Abs(float64(got)-dot) > 1e-6*mag {
				t.Errorf("Dot n=%d: %v, want %v", n, got, dot)
			}

			y := append([]float32(nil), b...)
			Axpy(y, 0.5, a)
			for i := range y {
				if want := float64(b[i]) + 0.5*float64(a[i]); !near(float64(y[i]), want, 1e-6) {
					t.Fatalf("Axpy n=%d [%d]: %v, want %v", n, i, y[i], want)
				}
			}

			sum := tensor.From(append([]float32(nil), a...), 1, n)
			Add(sum, tensor.From(b, 1, n))
			for i := range a {
				if sum.HostData()[i] != a[i]+b[i] {
					t.Fatalf("Add n=%d [%d]", n, i)
				}
			}

			e := make([]float32, n)
			Exp(e, a)
			for i := range a {
				if want := math.Exp(float64(a[i])); !near(float64(e[i]), want, 3e-7) {
					t.Fatalf("Exp n=%d (%v): %v, want %v", n, a[i], e[i], want)
				}
			}

			gate := tensor.From(append([]float32(nil), a...), 1, n)
			SiLUMul(gate, tensor.From(b, 1, n))
			for i := range a {
				g := float64(a[i])
				if want := g / (1 + math.Exp(-g)) * float64(b[i]); math.Abs(float64(gate.HostData()[i])-want) > 1e-6*(1+math.Abs(want)) {
					t.Fatalf("SiLUMul n=%d (%v, %v): %v, want %v", n, a[i], b[i], gate.HostData()[i], want)
				}
			}
			if n == 0 {
				continue
			}
			if got, want := Max(a), goMax(a); got != want {
				t.Errorf("Max n=%d: %v, want %v", n, got, want)
			}

			p := append([]float32(nil), a...)
			lse := Softmax(p)
			var z float64
			for _, v := range a {
				z += math.Exp(float64(v))
			}
			if !near(float64(lse), math.Log(z), 1e-6) {
				t.Errorf("Softmax n=%d: log-sum-exp %v, want %v", n, lse, math.Log(z))
			}
			for i, v := range a {
				if want := math.Exp(float64(v)) / z; math.Abs(float64(p[i])-want) > 1e-6 {
					t.Fatalf("Softmax n=%d [%d]: %v, want %v", n, i, p[i], want)
				}
			}

			x := tensor.From(a, 1, n)
			out := tensor.New(1, n)
			RMSNorm(out, x, b, 1e-5)
			var ss float64
			for _, v := range a {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(n)+1e-5)
			for i := range a {
				if want := float64(a[i]) * inv * float64(b[i]); !near(float64(out.HostData()[i]), want, 1e-6) {
					t.Fatalf("RMSNorm n=%d [%d]: %v, want %v", n, i, out.HostData()[i], want)
				}
			}
		}
		// Exp and SiLU at the edges of the range and beyond.
		edges := []float32{-1000, -88, -87.4, -87.3, -20, -1e-30, 0, 1e-30, 20, 88, 88.3, 88.4, 1000}
		e := make([]float32, len(edges))
		Exp(e, edges)
		for i, x := range edges {
			if e[i] != expf(x) && !near(float64(e[i]), float64(expf(x)), 3e-7) {
				t.Errorf("Exp(%v) = %v, Go expf %v", x, e[i], expf(x))
			}
		}
		softmaxInf := []float32{float32(math.Inf(-1)), 0, float32(math.Inf(-1)), 0}
		Softmax(softmaxInf)
		if softmaxInf[0] != 0 || softmaxInf[1] != 0.5 {
			t.Errorf("Softmax with -Inf: %v", softmaxInf)
		}
	})
}

func TestRopeTableReuse(t *testing.T) {
	inv := []float32{1, 0.1}
	r := NewRope(4, inv, false)
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	r.Apply(x, 4, []int32{0, 3})
	first := r.last
	y := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	r.Apply(y, 4, []int32{0, 3})
	if r.last != first {
		t.Error("the table of unchanged positions was rebuilt")
	}
	for i := range x {
		if x[i] != y[i] {
			t.Fatal("same positions rotated differently")
		}
	}
	// Position 3, pair (x0, x2) = (5, 7), angle 3·1.
	c, s := math.Cos(3), math.Sin(3)
	if !near(float64(x[4]), 5*c-7*s, 1e-6) || !near(float64(x[6]), 5*s+7*c, 1e-6) {
		t.Errorf("rotation of position 3: %v", x[4:])
	}
	r.Apply(y, 4, []int32{1, 2})
	if r.last == first {
		t.Error("new positions reused the old table")
	}
}

func TestWorkersFor(t *testing.T) {
	w := NewWorkers(3)
	defer w.Close()
	for _, tc := range []struct{ n, minChunk int }{{1, 1}, {2, 1}, {3, 1}, {100, 1}, {100, 7}, {1000, 300}} {
		hits := make([]atomic.Int32, tc.n)
		w.For(tc.n, tc.minChunk, func(lo, hi int) {
			if hi-lo < tc.minChunk && hi != tc.n {
				t.Errorf("n=%d: range [%d,%d) shorter than %d", tc.n, lo, hi, tc.minChunk)
			}
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		for i := range hits {
			if hits[i].Load() != 1 {
				t.Fatalf("n=%d: index %d ran %d times", tc.n, i, hits[i].Load())
			}
		}
	}
	// Nested and concurrent calls run serially instead of deadlocking.
	var total atomic.Int64
	done := make(chan struct{})
	go func() {
		for range 200 {
			w.For(10, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
		}
		close(done)
	}()
	for range 200 {
		w.For(10, 1, func(lo, hi int) {
			for range hi - lo {
				w.For(5, 1, func(lo2, hi2 int) { total.Add(int64(hi2 - lo2)) })
			}
		})
	}
	<-done
	if want := int64(200*10 + 200*10*5); total.Load() != want {
		t.Errorf("ran %d units, want %d", total.Load(), want)
	}
	var nilPool *Workers
	ran := 0
	nilPool.For(5, 1, func(lo, hi int) { ran += hi - lo })
	if ran != 5 || nilPool.N() != 1 {
		t.Errorf("nil pool ran %d of 5", ran)
	}
}

// TestWorkersWakeAfterPark lets the workers park, then checks that a job
// still reaches them (the spin-then-park hand-off).
func TestWorkersWakeAfterPark(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	for range 3 {
		for !w.parked[1].Load() {
			time.Sleep(time.Millisecond)
		}
		var seen atomic.Int32
		w.For(2, 1, func(lo, hi int) {
			seen.Add(int32(hi - lo))
		})
		if seen.Load() != 2 {
			t.Fatalf("ran %d of 2", seen.Load())
		}
	}
}

// TestWorkersSolo walks the absent-worker state machine (settle): jobs
// that no other worker helps with start a solo run after soloAfter, a
// helped job resets the count, a solo run lasts soloFor and runs every
// task exactly once on the caller, and probeJobs unhelped jobs after it
// start the next.
func TestWorkersSolo(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	now := time.Now()
	for range soloAfter - 1 {
		w.settle(4, 4, now)
	}
	w.settle(4, 3, now) // helped
	w.settle(1, 1, now) // one task: says nothing about the other workers
	if w.missed != 0 || !w.soloUntil.IsZero() {
		t.Fatalf("after a helped job: missed %d, solo until %v", w.missed, w.soloUntil)
	}
	for i := range soloAfter {
		if !w.soloUntil.IsZero() {
			t.Fatalf("solo after %d unhelped jobs", i)
		}
		w.settle(4, 4, now)
	}
	if want := now.Add(soloFor); !w.soloUntil.Equal(want) {
		t.Fatalf("solo until %v after %d unhelped jobs, want %v", w.soloUntil, soloAfter, want)
	}
	w.soloUntil = time.Now().Add(time.Hour) // every job below runs solo
	w.mu.Lock()
	for j := range 50 {
		hits := make([]atomic.Int32, 5)
		w.run(len(hits), func(worker, task int) {
			if worker != 0 {
				t.Errorf("solo job %d: task %d ran on worker %d", j, task, worker)
			}
			hits[task].Add(1)
		})
		for i := range hits {
			if hits[i].Load() != 1 {
				t.Fatalf("solo job %d: task %d ran %d times", j, i, hits[i].Load())
			}
		}
	}
	w.mu.Unlock()
	if w.missed != soloAfter-probeJobs {
		t.Fatalf("solo jobs moved the count of misses to %d", w.missed)
	}
	w.soloUntil = now // the solo run is over
	later := now.Add(time.Second)
	for range probeJobs - 1 {
		w.settle(4, 4, later)
	}
	if w.soloUntil.After(later) {
		t.Fatalf("solo again after %d probe jobs", probeJobs-1)
	}
	w.settle(4, 4, later)
	if want := later.Add(soloFor); !w.soloUntil.Equal(want) {
		t.Fatalf("solo until %v after %d unhelped probe jobs, want %v", w.soloUntil, probeJobs, want)
	}
}

// TestRopeKernels rotates rows of several heads with every kernel set,
// both layouts (halves and adjacent pairs), head sizes the assembly takes
// (16, 64, 128) and leaves to Go (12), and partial rotations (the first
// rot values of each head; rot 48 of 64 and 32 of 128 take the assembly,
// 20 of 64 Go), against the rotation in float64.
func TestRopeKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	eachKernelSet(t, func(t *testing.T) {
		for _, shape := range []struct{ hd, rot int }{{12, 12}, {16, 16}, {64, 64}, {128, 128}, {64, 48}, {128, 32}, {64, 20}} {
			hd, rot := shape.hd, shape.rot
			for _, interleaved := range []bool{false, true} {
				const heads = 3
				inv := make([]float32, rot/2)
				for i := range inv {
					inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(rot)))
				}
				r := NewRope(hd, inv, interleaved)
				positions := []int32{0, 5, 1000}
				width := heads*hd + 2 // a row longer than its heads: the rest stays
				x := randVec(rng, len(positions)*width, 1)
				orig := append([]float32(nil), x...)
				r.Apply(x, width, positions)
				for p, pos := range positions {
					rotated := map[int]bool{}
					for h := range heads {
						for i := range rot / 2 {
							a, b := h*hd+i, h*hd+i+rot/2
							if interleaved {
								a, b = h*hd+2*i, h*hd+2*i+1
							}
							a, b = p*width+a, p*width+b
							rotated[a], rotated[b] = true, true
							ang := float64(float32(pos) * inv[i]) // the table's float32 angle
							c, s := math.Cos(ang), math.Sin(ang)
							x0, x1 := float64(orig[a]), float64(orig[b])
							if !near(float64(x[a]), x0*c-x1*s, 1e-5) || !near(float64(x[b]), x0*s+x1*c, 1e-5) {
								t.Fatalf("hd=%d rot=%d interleaved=%v position %d head %d pair %d: (%v, %v), want (%v, %v)",
									hd, rot, interleaved, pos, h, i, x[a], x[b], x0*c-x1*s, x0*s+x1*c)
							}
						}
					}
					// The heads' unrotated tails and the values past the heads stay.
					for j := p * width; j < (p+1)*width; j++ {
						if !rotated[j] && x[j] != orig[j] {
							t.Fatalf("hd=%d rot=%d interleaved=%v: unrotated value %d changed", hd, rot, interleaved, j-p*width)
						}
					}
				}
			}
		}
	})
}
