package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/internal/cputime"
	"github.com/gosling-ai/gosling/internal/hugemem"
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
	buf := hugemem.Aligned(512 << 20)
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
	const microBurst = 16
	rng := rand.New(rand.NewPCG(1, 1))
	const k = 768
	for _, ks := range append([]*kernelSet{goKernels}, asmSets...) {
		for _, dtype := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K, tensor.IQ4_XS, tensor.AWQ4_G128} {
			p, _ := packWeight(randWeight(rng, dtype, panelWidth, k), weightBytes)
			kind := kindOf(dtype)
			for _, mr := range []int{1, 4, ks.mrMax[kind]} {
				if mr > ks.mrMax[kind] || (ks == goKernels && mr > 1) {
					continue
				}
				x := randInput(rng, mr, k)
				c := make([]float32, mr*panelWidth)
				var fn func()
				switch kind {
				case kindQK:
					super := qkFormats[p.qk].super
					kernel := ks.qk[p.qk][mr]
					if kernel == nil {
						kernel = goKernels.qk[p.qk][mr]
					}
					a := make([]byte, qkTileBytes(super, mr, k))
					packQKTile(a, x.HostData(), k, 0, mr, k, super)
					fn = func() { kernel(ptr(a), p.panel(0), k/super, ptr(c), 4*panelWidth) }
				case kindI4:
					kernel := ks.i4[p.qk][mr]
					if kernel == nil {
						kernel = goKernels.i4[p.qk][mr]
					}
					a := make([]float32, mr*k)
					packFloatTile(a, x.HostData(), k, 0, mr, k)
					fn = func() { kernel(ptr(a), p.panel(0), k, ptr(c), 4*panelWidth) }
				case kindQ8:
					a := make([]byte, q8TileBytes(mr, k))
					packQ8Tile(a, x.HostData(), k, 0, mr, k)
					fn = func() { ks.q8[mr](ptr(a), p.panel(0), k/32, ptr(c), 4*panelWidth) }
				default:
					a := make([]float32, mr*k)
					packFloatTile(a, x.HostData(), k, 0, mr, k)
					fn = func() { ks.float[kind][mr](ptr(a), p.panel(0), k, ptr(c), 4*panelWidth) }
				}
				b.Run(fmt.Sprintf("%s/%v/mr=%d", ks.name, dtype, mr), func(b *testing.B) {
					// An op is a burst of microBurst calls; the fastest
					// burst (best-GB/s) is the kernel's own speed even
					// where other processes take the core now and then.
					best := time.Duration(math.MaxInt64)
					for b.Loop() {
						t0 := time.Now()
						for range microBurst {
							fn()
						}
						best = min(best, time.Since(t0))
					}
					sec := b.Elapsed().Seconds()
					calls := float64(b.N * microBurst)
					b.ReportMetric(float64(p.stride)*calls/sec/1e9, "GB/s")
					b.ReportMetric(float64(p.stride)*microBurst/best.Seconds()/1e9, "best-GB/s")
					b.ReportMetric(2*float64(panelWidth*k*mr)*calls/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// stepModel is the linear layers of a stories110M-shaped model (12 layers
// of q, k, v, o at 768×768 and gate, up, down at 768×2048, a 32000×768
// output layer), each packed separately as a model holds them: 438 MB of
// F32 weights, far beyond the caches.
type stepModel struct {
	layers [12]struct{ q, k, v, o, gate, up, down *Linear }
	head   *Linear
}

func newStepModel(rng *rand.Rand, dtype tensor.DType) *stepModel {
	const dim, hidden, vocab = 768, 2048, 32000
	sq, up, down := randWeight(rng, dtype, dim, dim), randWeight(rng, dtype, hidden, dim), randWeight(rng, dtype, dim, hidden)
	m := &stepModel{head: NewLinear(randWeight(rng, dtype, vocab, dim), nil)}
	for i := range m.layers {
		l := &m.layers[i]
		l.q, l.k, l.v, l.o = NewLinear(sq, nil), NewLinear(sq, nil), NewLinear(sq, nil), NewLinear(sq, nil)
		l.gate, l.up, l.down = NewLinear(up, nil), NewLinear(up, nil), NewLinear(down, nil)
	}
	return m
}

// step runs every linear of one decode step for the rows of x ([m, 768]);
// the activations between layers are the inputs again (only the matrix
// products are timed).
func (s *stepModel) step(w *Workers, x, h tensor.T) {
	for i := range s.layers {
		l := &s.layers[i]
		ForwardGroup(w, x, l.q, l.k, l.v)
		l.o.Forward(w, x)
		ForwardGroup(w, x, l.gate, l.up)
		l.down.Forward(w, h)
	}
	s.head.Forward(w, x)
}

// linears lists every linear layer in the order step reads them.
func (s *stepModel) linears() []*Linear {
	var ls []*Linear
	for i := range s.layers {
		l := &s.layers[i]
		ls = append(ls, l.q, l.k, l.v, l.o, l.gate, l.up, l.down)
	}
	return append(ls, s.head)
}

func (s *stepModel) bytes() int64 { return linearBytes(s.linears()...) }

// linearBytes is what one pass over the layers' weights reads.
func linearBytes(ls ...*Linear) int64 {
	var n int64
	for _, l := range ls {
		n += l.Bytes()
	}
	return n
}

// BenchmarkDecodeStep times the matrix products of one decode step of a
// stories110M-shaped model at batch 1, 8 and 32: weight read bandwidth,
// and tokens per second of the products alone (the model adds attention
// and the element-wise ops); the serial runs also report CPU time, which
// other processes on a busy machine disturb less than the wall time.
func BenchmarkDecodeStep(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 3))
	pool := NewWorkers(benchThreads)
	defer pool.Close()
	for _, dtype := range []tensor.DType{tensor.F32, tensor.BF16, tensor.Q8_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
		// Built on first use, so that a -bench filter builds only its own.
		model := sync.OnceValue(func() *stepModel { return newStepModel(rand.New(rand.NewPCG(1, uint64(dtype))), dtype) })
		for _, m := range []int{1, 8, 32} {
			x, h := randInput(rng, m, 768), randInput(rng, m, 2048)
			for _, serial := range []bool{false, true} {
				name := fmt.Sprintf("%v/m=%d", dtype, m)
				w := pool
				if serial {
					name, w = name+"/serial", nil
				}
				b.Run(name, func(b *testing.B) {
					s := model()
					cpu0 := cputime.Process()
					// The fastest step (best-tok/s) is the one least
					// disturbed where other processes share the cores.
					best := time.Duration(math.MaxInt64)
					for b.Loop() {
						t0 := time.Now()
						s.step(w, x, h)
						best = min(best, time.Since(t0))
					}
					sec := b.Elapsed().Seconds()
					b.ReportMetric(float64(s.bytes())*float64(b.N)/sec/1e9, "GB/s")
					b.ReportMetric(float64(m*b.N)/sec, "tok/s")
					b.ReportMetric(float64(m)/best.Seconds(), "best-tok/s")
					// The pool's idle workers spin, so CPU time means
					// something only serially.
					if serial {
						b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
					}
				})
			}
		}
	}
}

// BenchmarkDecodeStepAgainstStream alternates, pair by pair, a plain read
// of as many bytes as the step model's weights (StreamRead, the roofline
// probe's loop) with the products of one batch-1 decode step, so both meet
// the same state of a shared machine, whose read bandwidth can change
// within seconds. A third pass reads the weights' own memory the plain
// way, linear by linear, as the step visits it. It reports the medians of
// the stream's and the step's GB/s, and of each pair's ratios to the
// stream: how close the products come to the read limit measured beside
// them, and how much of the gap is the weights' memory itself (its pages,
// its cut into one job per linear) rather than the kernels.
func BenchmarkDecodeStepAgainstStream(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 3))
	pool := NewWorkers(benchThreads)
	defer pool.Close()
	for _, dtype := range []tensor.DType{tensor.F32, tensor.Q8_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
		x, h := randInput(rng, 1, 768), randInput(rng, 1, 2048)
		b.Run(fmt.Sprintf("%v/m=1", dtype), func(b *testing.B) {
			s := newStepModel(rand.New(rand.NewPCG(1, uint64(dtype))), dtype)
			buf := hugemem.Aligned(int(s.bytes()) &^ 255)
			for i := range buf {
				buf[i] = byte(i) & 0x3f
			}
			var weights [][]byte
			for _, l := range s.linears() {
				weights = append(weights, l.packed.data[:len(l.packed.data)&^255])
			}
			var stream, step, ofStream, plainOfStream []float64
			for b.Loop() {
				t0 := time.Now()
				StreamRead(pool, buf)
				t1 := time.Now()
				s.step(pool, x, h)
				t2 := time.Now()
				for _, w := range weights {
					StreamRead(pool, w)
				}
				t3 := time.Now()
				sg := float64(len(buf)) / t1.Sub(t0).Seconds() / 1e9
				pg := float64(s.bytes()) / t2.Sub(t1).Seconds() / 1e9
				wg := float64(s.bytes()) / t3.Sub(t2).Seconds() / 1e9
				stream, step = append(stream, sg), append(step, pg)
				ofStream, plainOfStream = append(ofStream, pg/sg), append(plainOfStream, wg/sg)
			}
			b.ReportMetric(median(stream), "stream-GB/s")
			b.ReportMetric(median(step), "step-GB/s")
			b.ReportMetric(100*median(ofStream), "%-of-stream")
			b.ReportMetric(100*median(plainOfStream), "%-plain-of-stream")
		})
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// BenchmarkPackFloatTile packs a batch-32 decode's activations (three
// tiles of 11, 11 and 10 tokens) as one matrix product does: GB/s of
// activations packed, in cache.
func BenchmarkPackFloatTile(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 5))
	prev := active.Load()
	defer active.Store(prev)
	for _, ks := range append([]*kernelSet{goKernels}, asmSets...) {
		active.Store(ks)
		for _, k := range []int{768, 2048} {
			x := randInput(rng, 32, k)
			dst := make([]float32, 32*k)
			b.Run(fmt.Sprintf("%s/k=%d", ks.name, k), func(b *testing.B) {
				for b.Loop() {
					for _, t := range tiles(32, maxMRZ, func(mr int) int { return mr * k }) {
						packFloatTile(dst[t.off:], x.HostData(), k, t.t0, t.mr, k)
					}
				}
				b.ReportMetric(float64(32*k*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkPackQ8Tile quantises the activations of a Q8 product as gemm
// does: one token (batch-1 decode, done serially before the weights
// stream) and 32 in tiles of six; GB/s of float32 activations, in cache.
func BenchmarkPackQ8Tile(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 6))
	prev := active.Load()
	defer active.Store(prev)
	for _, ks := range append([]*kernelSet{goKernels}, asmSets...) {
		active.Store(ks)
		for _, m := range []int{1, 32} {
			const k = 768
			x := randInput(rng, m, k)
			dst := make([]byte, q8TileBytes(m, k))
			b.Run(fmt.Sprintf("%s/m=%d", ks.name, m), func(b *testing.B) {
				for b.Loop() {
					for _, t := range tiles(m, maxMRQ8Z, func(mr int) int { return q8TileBytes(mr, k) }) {
						packQ8Tile(dst[t.off:], x.HostData(), k, t.t0, t.mr, k)
					}
				}
				b.ReportMetric(float64(m*k*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkPackQKTile quantises a decode's and a batch-32 decode's
// activations into QK tiles of super-blocks of 256 (tiles of at most
// the kernel set's height), as one K-quant product does.
func BenchmarkPackQKTile(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 7))
	prev := active.Load()
	defer active.Store(prev)
	for _, ks := range append([]*kernelSet{goKernels}, asmSets...) {
		active.Store(ks)
		for _, m := range []int{1, 32} {
			const k, super = 768, 256
			x := randInput(rng, m, k)
			dst := make([]byte, qkTileBytes(super, m, k))
			b.Run(fmt.Sprintf("%s/m=%d", ks.name, m), func(b *testing.B) {
				for b.Loop() {
					for _, t := range tiles(m, ks.mrMax[kindQK], func(mr int) int { return qkTileBytes(super, mr, k) }) {
						packQKTile(dst[t.off:], x.HostData(), k, t.t0, t.mr, k, super)
					}
				}
				b.ReportMetric(float64(m*k*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// awqLayer is the linear layers of one llama-3.2-1b decoder layer (q
// 2048×2048, k and v 512×2048, o 2048×2048, gate and up 8192×2048, down
// 2048×8192) from one AWQ (groups of 128) weight set, served compactly
// or, as before the I4 panels, widened to float32.
type awqLayer struct{ q, k, v, o, gate, up, down *Linear }

func newAWQLayers(rng *rand.Rand, copies int, widen bool) []awqLayer {
	const dim, kv, hidden = 2048, 512, 8192
	w := func(n, k int) tensor.Weight {
		q := randWeight(rng, tensor.AWQ4_G128, n, k)
		if widen {
			return tensor.Lazily(q, tensor.F32)
		}
		return q
	}
	sq, skv, so, sup, sdown := w(dim, dim), w(kv, dim), w(dim, dim), w(hidden, dim), w(dim, hidden)
	ls := make([]awqLayer, copies)
	for i := range ls {
		ls[i] = awqLayer{NewLinear(sq, nil), NewLinear(skv, nil), NewLinear(skv, nil), NewLinear(so, nil), NewLinear(sup, nil), NewLinear(sup, nil), NewLinear(sdown, nil)}
	}
	return ls
}

func (l *awqLayer) step(w *Workers, x, h tensor.T) {
	ForwardGroup(w, x, l.q, l.k, l.v)
	l.o.Forward(w, x)
	ForwardGroup(w, x, l.gate, l.up)
	l.down.Forward(w, h)
}

func (l *awqLayer) bytes() int64 { return linearBytes(l.q, l.k, l.v, l.o, l.gate, l.up, l.down) }

// BenchmarkAWQLayer times the products of a llama-3.2-1b-shaped AWQ
// decoder layer (copies of it beyond the last-level cache, visited in
// turn) served compactly (I4 panels over float32 activations) and
// widened to float32, each pass paired with a plain read
// of as many bytes (StreamRead, the roofline probe) so both meet the same
// state of a shared machine. It reports the medians of the stream's and
// the layer's GB/s of the weights as served, the layer's share of the
// stream, the layer's GB/s counted in the checkpoint's AWQ bytes
// (qweight, qzeros, scales), tokens per second of one layer, and the
// weights' memory after load (MB per layer).
func BenchmarkAWQLayer(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 24))
	pool := NewWorkers(benchThreads)
	defer pool.Close()
	const params = 2*2048*2048 + 2*512*2048 + 3*8192*2048
	const awqBytes = params/2 + params/128*(2+1) // 4-bit quants; f16 scale and 4-bit zero per group
	for _, widen := range []bool{false, true} {
		name, copies := "compact", 6
		if widen {
			name, copies = "widened-f32", 2
		}
		layers := sync.OnceValue(func() []awqLayer { return newAWQLayers(rand.New(rand.NewPCG(1, 25)), copies, widen) })
		for _, m := range []int{1, 8, 32} {
			x, h := randInput(rng, m, 2048), randInput(rng, m, 8192)
			b.Run(fmt.Sprintf("%s/m=%d", name, m), func(b *testing.B) {
				ls := layers()
				size := ls[0].bytes()
				buf := hugemem.Aligned(int(size) &^ 255)
				for i := range buf {
					buf[i] = byte(i) & 0x3f
				}
				var stream, step, ofStream, tok []float64
				i := 0
				for b.Loop() {
					t0 := time.Now()
					StreamRead(pool, buf)
					t1 := time.Now()
					ls[i%copies].step(pool, x, h)
					t2 := time.Now()
					i++
					sg := float64(len(buf)) / t1.Sub(t0).Seconds() / 1e9
					pg := float64(size) / t2.Sub(t1).Seconds() / 1e9
					stream, step, ofStream = append(stream, sg), append(step, pg), append(ofStream, pg/sg)
					tok = append(tok, float64(m)/t2.Sub(t1).Seconds())
				}
				b.ReportMetric(median(stream), "stream-GB/s")
				b.ReportMetric(median(step), "GB/s")
				b.ReportMetric(100*median(ofStream), "%-of-stream")
				b.ReportMetric(median(step)*awqBytes/float64(size), "awq-GB/s")
				b.ReportMetric(median(tok), "tok/s")
				b.ReportMetric(float64(size)/1e6, "load-MB")
			})
		}
	}
}

// BenchmarkQKLinearCached times one token's product with a Q4_K and a
// Q6_K linear small enough to stay in L2 (768×768, 330-500 KB packed) on
// one worker: the kernels and gemm's per-call and per-panel work
// without memory's share. best-ns is the least disturbed call.
func BenchmarkQKLinearCached(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 9))
	for _, dtype := range []tensor.DType{tensor.Q4_K, tensor.Q6_K} {
		l := NewLinear(randWeight(rng, dtype, 768, 768), nil)
		x := randInput(rng, 1, 768)
		pool := NewWorkers(1)
		b.Run(fmt.Sprintf("%v", dtype), func(b *testing.B) {
			best := time.Duration(math.MaxInt64)
			for b.Loop() {
				t0 := time.Now()
				l.Forward(pool, x)
				best = min(best, time.Since(t0))
			}
			b.ReportMetric(float64(best.Nanoseconds()), "best-ns")
		})
		pool.Close()
	}
}
