package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// BenchmarkLinear times one linear layer at stories110M's MLP shape over
// many copies of the weights (more than the last-level cache), so decode
// (m = 1) reads from memory as it does in a model. It reports the weight
// bandwidth and the arithmetic rate.
func BenchmarkLinear(b *testing.B) {
	const n, k, copies = 2048, 768, 48 // 48 × 6 MiB of F32 weights
	rng := rand.New(rand.NewPCG(1, 1))
	pool := NewWorkers(benchThreads)
	defer pool.Close()
	for _, dtype := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0} {
		w := randWeight(rng, dtype, n, k)
		ls := make([]*Linear, copies)
		for i := range ls {
			ls[i] = NewLinear(w, nil)
		}
		for _, m := range []int{1, 8, 32, 512} {
			x := randInput(rng, m, k)
			b.Run(fmt.Sprintf("%v/m=%d", dtype, m), func(b *testing.B) {
				i := 0
				for b.Loop() {
					ls[i%copies].Forward(pool, x)
					i++
				}
				sec := b.Elapsed().Seconds()
				b.ReportMetric(float64(ls[0].Bytes())*float64(b.N)/sec/1e9, "GB/s")
				b.ReportMetric(2*float64(n*k*m)*float64(b.N)/sec/1e9, "GFLOP/s")
			})
		}
	}
}

// benchThreads sizes the benchmarks' pools (0: one per core).
var benchThreads = 0

func BenchmarkStreamRead(b *testing.B) {
	buf := alignedBytes(512 << 20)
	for i := range buf {
		buf[i] = byte(i) & 0x3f // untouched pages would all read the one zero page
	}
	pool := NewWorkers(benchThreads)
	defer pool.Close()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		StreamRead(pool, buf)
	}
}

// BenchmarkMicroKernel runs one micro-kernel on one panel in cache: the
// kernel's own speed, without memory.
func BenchmarkMicroKernel(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	const k = 768
	for _, ks := range append([]*kernelSet{goKernels}, asmSets...) {
		for _, dtype := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0} {
			p, _ := packWeight(randWeight(rng, dtype, panelWidth, k))
			kind := kindOf(dtype)
			for _, mr := range []int{1, 4, ks.mrMax[kind]} {
				if mr > ks.mrMax[kind] || (ks == goKernels && mr > 1) {
					continue
				}
				x := randInput(rng, mr, k)
				c := make([]float32, mr*panelWidth)
				var fn func()
				if kind == kindQ8 {
					a := make([]byte, q8TileBytes(mr, k))
					packQ8Tile(a, x.Data, k, 0, mr, k)
					fn = func() { ks.q8[mr](ptr(a), p.panel(0), k/32, ptr(c), 4*panelWidth) }
				} else {
					a := make([]float32, mr*k)
					packFloatTile(a, x.Data, k, 0, mr, k)
					fn = func() { ks.float[kind][mr](ptr(a), p.panel(0), k, ptr(c), 4*panelWidth) }
				}
				b.Run(fmt.Sprintf("%s/%v/mr=%d", ks.name, dtype, mr), func(b *testing.B) {
					for b.Loop() {
						fn()
					}
					sec := b.Elapsed().Seconds()
					b.ReportMetric(float64(p.stride)*float64(b.N)/sec/1e9, "GB/s")
					b.ReportMetric(2*float64(panelWidth*k*mr)*float64(b.N)/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}
