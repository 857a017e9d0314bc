package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// gemmRef is the row-major float64 reference for g on dense or strided data.
func gemmRef(g Gemm, a, b, d0 []float32, alpha, beta float32) []float32 {
	g = g.withDefaults()
	out := append([]float32(nil), d0...)
	for i := range g.M {
		for j := range g.N {
			var s float64
			for l := range g.K {
				var bv float32
				if g.TransB {
					bv = b[j*g.LDB+l]
				} else {
					bv = b[l*g.LDB+j]
				}
				s += float64(a[i*g.LDA+l]) * float64(bv)
			}
			v := float64(alpha)*s + float64(beta)*float64(d0[i*g.LDD+j])
			out[i*g.LDD+j] = round(float32(v), g.OutDType)
		}
	}
	return out
}

func bRows(g Gemm) int {
	if g.TransB {
		return g.N
	}
	return g.K
}

func TestGPULtMatmul(t *testing.T) {
	dev, lt := needLt(t)
	rng := rand.New(rand.NewPCG(20, 20))
	cases := []struct {
		g           Gemm
		alpha, beta float32
	}{
		{Gemm{M: 1, N: 256, K: 512, TransB: true, DType: F32, OutDType: F32}, 1, 0},
		{Gemm{M: 33, N: 200, K: 96, TransB: true, DType: F32, OutDType: F32}, 1, 0},
		{Gemm{M: 16, N: 64, K: 128, DType: F32, OutDType: F32}, 0.5, 1},
		{Gemm{M: 7, N: 1024, K: 512, TransB: true, DType: BF16, OutDType: BF16}, 1, 0},
		{Gemm{M: 64, N: 512, K: 256, TransB: true, DType: BF16, OutDType: F32}, 1, 0}, // f32 logits from bf16
		{Gemm{M: 32, N: 128, K: 256, DType: BF16, OutDType: BF16}, 1, 1},              // residual accumulate
		{Gemm{M: 16, N: 256, K: 128, TransB: true, DType: F16, OutDType: F16}, 1, 0},
		{Gemm{M: 8, N: 128, K: 64, TransB: true, DType: BF16, OutDType: BF16, LDA: 96, LDB: 72, LDD: 136}, 1, 0},
	}
	for _, tc := range cases {
		g := tc.g
		t.Run(fmt.Sprintf("%v->%v_%dx%dx%d_T%v_beta%v_ld%d", g.DType, g.OutDType, g.M, g.N, g.K, g.TransB, tc.beta, g.LDA), func(t *testing.T) {
			full := g.withDefaults()
			a := roundAll(randn(rng, g.M*full.LDA, 1), g.DType)
			b := roundAll(randn(rng, bRows(g)*full.LDB, 1), g.DType)
			d0 := roundAll(randn(rng, g.M*full.LDD, 1), g.OutDType)
			dD := upload(t, dev, d0, g.OutDType)
			if err := lt.Matmul(dev.Stream, g, upload(t, dev, a, g.DType), upload(t, dev, b, g.DType), dD, tc.alpha, tc.beta); err != nil {
				t.Fatal(err)
			}
			want := gemmRef(g, a, b, d0, tc.alpha, tc.beta)
			got := download(t, dev, dD, len(want), g.OutDType)
			// Sums of K products of unit normals have magnitude √K.
			scale := math.Sqrt(float64(g.K))
			atol, rtol := 1e-5*scale, 1e-5
			if g.OutDType != F32 {
				atol, rtol = tolerance(g.OutDType)
				atol *= scale
			}
			compare(t, "D", got, want, atol, rtol)
		})
	}
}

// Autotuned plans must compute the same products.
func TestGPULtMatmulAutotune(t *testing.T) {
	dev, _ := needLt(t)
	lt, err := NewBlasLt(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Close()
	lt.Autotune = true
	rng := rand.New(rand.NewPCG(22, 22))
	for _, g := range []Gemm{
		{M: 1, N: 2048, K: 1024, TransB: true, DType: BF16, OutDType: BF16},
		{M: 16, N: 512, K: 256, TransB: true, DType: BF16, OutDType: F32},
		{M: 3, N: 256, K: 128, TransB: true, DType: F32, OutDType: F32},
	} {
		a := roundAll(randn(rng, g.M*g.K, 1), g.DType)
		w := roundAll(randn(rng, g.N*g.K, 1), g.DType)
		dD := alloc(t, dev, g.M*g.N*ElemSize(g.OutDType))
		if err := lt.Matmul(dev.Stream, g, upload(t, dev, a, g.DType), upload(t, dev, w, g.DType), dD, 1, 0); err != nil {
			t.Fatal(err)
		}
		want := gemmRef(g, a, w, make([]float32, g.M*g.N), 1, 0)
		scale := math.Sqrt(float64(g.K))
		atol, rtol := 1e-5*scale, 1e-5
		if g.OutDType != F32 {
			atol, rtol = tolerance(g.OutDType)
			atol *= scale
		}
		compare(t, fmt.Sprintf("tuned %+v", g), download(t, dev, dD, g.M*g.N, g.OutDType), want, atol, rtol)
	}
}

func TestGPUGemmStridedBatched(t *testing.T) {
	dev, blas := needBlas(t)
	rng := rand.New(rand.NewPCG(21, 21))
	for _, tc := range []struct {
		g     Gemm
		batch int
	}{
		{Gemm{M: 16, N: 32, K: 64, TransB: true, DType: F32, OutDType: F32}, 8},  // scores = Q·Kᵀ per head
		{Gemm{M: 16, N: 64, K: 32, DType: F32, OutDType: F32}, 8},                // out = P·V per head
		{Gemm{M: 16, N: 32, K: 64, TransB: true, DType: BF16, OutDType: F32}, 4}, // bf16 in, f32 scores
		{Gemm{M: 5, N: 48, K: 64, TransB: true, DType: BF16, OutDType: BF16, LDA: 80}, 3},
	} {
		g := tc.g
		t.Run(fmt.Sprintf("%v->%v_%dx%dx%d_T%v_x%d", g.DType, g.OutDType, g.M, g.N, g.K, g.TransB, tc.batch), func(t *testing.T) {
			full := g.withDefaults()
			sa, sb, sd := g.M*full.LDA+16, bRows(g)*full.LDB, g.M*full.LDD // padded stride for A
			a := roundAll(randn(rng, tc.batch*sa, 1), g.DType)
			b := roundAll(randn(rng, tc.batch*sb, 1), g.DType)
			d0 := make([]float32, tc.batch*sd)
			dD := upload(t, dev, d0, g.OutDType)
			bg := BatchedGemm{Gemm: g, Batch: tc.batch, StrideA: int64(sa), StrideB: int64(sb), StrideD: int64(sd)}
			if err := blas.GemmStridedBatched(dev.Stream, bg, upload(t, dev, a, g.DType), upload(t, dev, b, g.DType), dD, 1, 0); err != nil {
				t.Fatal(err)
			}
			got := download(t, dev, dD, len(d0), g.OutDType)
			var want []float32
			for i := range tc.batch {
				want = append(want, gemmRef(g, a[i*sa:], b[i*sb:], d0[i*sd:(i+1)*sd], 1, 0)...)
			}
			scale := math.Sqrt(float64(g.K))
			atol, rtol := 1e-5*scale, 1e-5
			if g.OutDType != F32 {
				atol, rtol = tolerance(g.OutDType)
				atol *= scale
			}
			compare(t, "D", got, want, atol, rtol)
		})
	}
}

// BenchmarkGPULtMatmul reports TFLOP/s from CUDA events (the GPU's time,
// not the launch loop's) and the weight bytes read per second, which is
// what bounds decode's skinny products. The tuned/ runs use Autotune.
func BenchmarkGPULtMatmul(b *testing.B) {
	dev, lt := needLt(b)
	tuned := tunedLt(b, dev)
	shapes := []Gemm{
		{M: 8192, N: 8192, K: 8192, TransB: true, DType: BF16, OutDType: BF16},
		{M: 4096, N: 4096, K: 4096, TransB: true, DType: BF16, OutDType: BF16},
		{M: 1, N: 4096, K: 4096, TransB: true, DType: BF16, OutDType: BF16},     // decode, batch 1
		{M: 1, N: 28672, K: 4096, TransB: true, DType: BF16, OutDType: BF16},    // decode gate_up, batch 1
		{M: 16, N: 6144, K: 4096, TransB: true, DType: BF16, OutDType: BF16},    // decode qkv, batch 16
		{M: 64, N: 14336, K: 4096, TransB: true, DType: BF16, OutDType: BF16},   // decode MLP, batch 64
		{M: 2048, N: 14336, K: 4096, TransB: true, DType: BF16, OutDType: BF16}, // prefill MLP
		{M: 4096, N: 4096, K: 4096, TransB: true, DType: F32, OutDType: F32},
	}
	for _, g := range shapes {
		b.Run(fmt.Sprintf("%v_%dx%dx%d", g.DType, g.M, g.N, g.K), func(b *testing.B) { benchMatmul(b, dev, lt, g) })
	}
	for _, g := range shapes[2:6] {
		b.Run(fmt.Sprintf("tuned/%v_%dx%dx%d", g.DType, g.M, g.N, g.K), func(b *testing.B) { benchMatmul(b, dev, tuned, g) })
	}
}

func benchMatmul(b *testing.B, dev *Device, lt *BlasLt, g Gemm) {
	es := ElemSize(g.DType)
	a := alloc(b, dev, g.M*g.K*es)
	w := alloc(b, dev, g.N*g.K*es)
	d := alloc(b, dev, g.M*g.N*ElemSize(g.OutDType))
	// Finite non-zero data (0x3c bytes: 1.15 in bf16): zeros run faster.
	for _, buf := range []struct {
		p     DevicePtr
		bytes int
	}{{a, g.M * g.K * es}, {w, g.N * g.K * es}} {
		if err := dev.MemsetAsync(buf.p, 0x3c, buf.bytes, dev.Stream); err != nil {
			b.Fatal(err)
		}
	}
	ws := make([]DevicePtr, 20) // the same weights 20 times a graph
	for i := range ws {
		ws[i] = w
	}
	per := timeMatmuls(b, dev, lt, g, a, ws, d)
	b.ReportMetric(g.FLOPs()/per/1e12, "TFLOP/s")
	b.ReportMetric(float64(g.N*g.K*es)/per/1e9, "weightGB/s")
	b.ReportMetric(per*1e6, "gpu-µs/op")
}

// timeMatmuls is the GPU's seconds per product of g, a [M, K] by each of
// ws in turn into d, from CUDA events around replays of a captured graph
// of the len(ws) products: a skinny product runs in a few microseconds,
// less than the host needs to issue it, so timing eager launches would
// measure the host. b.N products are timed, rounded up to whole graphs.
func timeMatmuls(b *testing.B, dev *Device, lt *BlasLt, g Gemm, a DevicePtr, ws []DevicePtr, d DevicePtr) float64 {
	if err := lt.Matmul(dev.Stream, g, a, ws[0], d, 1, 0); err != nil { // plans (and tunes) outside the capture
		b.Fatal(err)
	}
	graph, err := dev.Capture(dev.Stream, func() error {
		for _, w := range ws {
			if err := lt.Matmul(dev.Stream, g, a, w, d, 1, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	defer graph.Destroy()
	start, _ := dev.NewEvent(true)
	end, _ := dev.NewEvent(true)
	defer dev.DestroyEvent(start)
	defer dev.DestroyEvent(end)
	if err := graph.Launch(dev.Stream); err != nil {
		b.Fatal(err)
	}
	sync0(b, dev)
	launches := (b.N + len(ws) - 1) / len(ws)
	b.ResetTimer()
	dev.Record(start, dev.Stream)
	for range launches {
		if err := graph.Launch(dev.Stream); err != nil {
			b.Fatal(err)
		}
	}
	dev.Record(end, dev.Stream)
	dev.EventSync(end)
	b.StopTimer()
	el, _ := dev.Elapsed(start, end)
	return el.Seconds() / float64(launches*len(ws))
}

// BenchmarkGPUCopyDtoD measures device memory bandwidth (bytes read plus
// written), the HBM roofline that decode is held to.
func BenchmarkGPUCopyDtoD(b *testing.B) {
	dev := needDevice(b)
	gbs, err := dev.CopyBandwidth(1<<30, max(b.N, 3))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(gbs, "GB/s")
}

// BenchmarkGPULaunch is the host cost of one small kernel launch: from any
// goroutine (a hop to the device thread each time) and inside Do (direct).
func BenchmarkGPULaunch(b *testing.B) {
	dev, k := needKernels(b)
	x := alloc(b, dev, 4)
	b.Run("from-goroutine", func(b *testing.B) {
		for range b.N {
			if err := k.Softcap(dev.Stream, x, 1, 30, F32); err != nil {
				b.Fatal(err)
			}
		}
		sync0(b, dev)
	})
	b.Run("inside-Do", func(b *testing.B) {
		err := dev.Do(func() error {
			for range b.N {
				if err := k.Softcap(dev.Stream, x, 1, 30, F32); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		sync0(b, dev)
	})
}

// BenchmarkGPUMiniMLP compares eager launches with one graph replay for a
// four-operation decode-sized step.
func BenchmarkGPUMiniMLP(b *testing.B) {
	dev, k := needKernels(b)
	_, lt := needLt(b)
	m := newMiniMLP(b, dev, k, lt, 1, 4096, 4096)
	if err := m.enqueue(dev.Stream); err != nil {
		b.Fatal(err)
	}
	g, err := dev.Capture(dev.Stream, func() error { return m.enqueue(dev.Stream) })
	if err != nil {
		b.Fatal(err)
	}
	defer g.Destroy()
	b.Run("eager", func(b *testing.B) {
		dev.Do(func() error {
			for range b.N {
				m.enqueue(dev.Stream)
			}
			return nil
		})
		sync0(b, dev)
	})
	b.Run("graph", func(b *testing.B) {
		for range b.N {
			g.Launch(dev.Stream)
		}
		sync0(b, dev)
	})
}

// BenchmarkGPUGemv is the skinny-linear kernel's weight-read bandwidth on
// the shapes of a Llama-3.1-8B decode step (bf16, one row), for several
// resident blocks per SM, with x in bf16 (direct) or float32 staged as is
// (round) or through the RMSNorm prologue (norm), and gate/up with the
// SiLU epilogue (swiglu); compare with BenchmarkGPUCopyDtoD.
func BenchmarkGPUGemv(b *testing.B) {
	dev, k := needKernels(b)
	// Then the shapes of one rank at TP=2: q/k/v, o, gate/up, down.
	for _, sh := range []struct{ out, in int }{{28672, 4096}, {6144, 4096}, {4096, 4096}, {4096, 14336}, {128256, 4096},
		{3072, 4096}, {4096, 2048}, {14336, 4096}, {4096, 7168}} {
		w := alloc(b, dev, 2*sh.out*sh.in)
		x := alloc(b, dev, 4*sh.in)
		norm := alloc(b, dev, 4*sh.in)
		y := alloc(b, dev, 4*sh.out)
		variants := []string{"direct", "round", "norm"}
		if sh.out == 28672 || sh.out == 14336 { // gate and up of half the rows each
			variants = append(variants, "swiglu")
		}
		for _, variant := range variants {
			for _, perSM := range []int{2, 4, 8} {
				b.Run(fmt.Sprintf("%dx%d/%s/blocks%d", sh.out, sh.in, variant, perSM), func(b *testing.B) {
					k.gemvBlocksPerSM = perSM
					defer func() { k.gemvBlocksPerSM = 0 }()
					start, _ := dev.NewEvent(true)
					end, _ := dev.NewEvent(true)
					defer dev.DestroyEvent(start)
					defer dev.DestroyEvent(end)
					c := GemvCall{X: x, M: 1, In: sh.in, WDType: BF16, Targets: []GemvTarget{{Y: y, W: w, Out: sh.out}}}
					switch variant {
					case "round":
						c.Staged = true
					case "norm":
						c.Staged, c.Stage, c.Norm, c.Eps = true, GemvRMSNorm, norm, 1e-5
					}
					half := sh.out / 2
					sw := GemvSwiGLUCall{X: x, Norm: norm, Eps: 1e-5, M: 1, In: sh.in, WDType: BF16, H: y,
						Gate: GemvTarget{W: w, Out: half}, Up: GemvTarget{W: w + DevicePtr(2*half*sh.in), Out: half}}
					run := func() {
						var err error
						if variant == "swiglu" {
							err = k.GemvSwiGLU(dev.Stream, sw)
						} else {
							err = k.Gemv(dev.Stream, c)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					run()
					sync0(b, dev)
					// Launched one at a time, a kernel shorter than the
					// host's launch is timed at the launch's pace; a graph
					// of graphRuns launches times the kernels back to back,
					// as a decode step's graph runs them.
					const graphRuns = 20
					g, err := dev.Capture(dev.Stream, func() error {
						for range graphRuns {
							run()
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
					defer g.Destroy()
					if err := g.Launch(dev.Stream); err != nil {
						b.Fatal(err)
					}
					sync0(b, dev)
					b.ResetTimer()
					dev.Record(start, dev.Stream)
					for range b.N {
						g.Launch(dev.Stream)
					}
					dev.Record(end, dev.Stream)
					dev.EventSync(end)
					el, _ := dev.Elapsed(start, end)
					b.ReportMetric(2*float64(sh.out*sh.in)*float64(b.N*graphRuns)/el.Seconds()/1e9, "GB/s")
					b.ReportMetric(el.Seconds()*1e6/float64(b.N*graphRuns), "µs/kernel")
				})
			}
		}
	}
}

// tunedLt is a second cuBLASLt handle on dev that times the heuristic's
// candidates for each new shape (Autotune), closed when b ends.
func tunedLt(b *testing.B, dev *Device) *BlasLt {
	tuned, err := NewBlasLt(dev)
	if err != nil {
		b.Fatal(err)
	}
	tuned.Autotune = true
	b.Cleanup(func() { tuned.Close() })
	return tuned
}

// llama8BProducts are a llama-3.1-8b layer's products: [out, in] weights.
var llama8BProducts = []struct {
	name    string
	out, in int
}{{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gateup", 28672, 4096}, {"down", 4096, 14336}}

// BenchmarkGPUSkinnyLt is cuBLASLt (tuned) on a decode step's products
// of llama-3.1-8b at m = 1..128 rows, each product reading a different
// copy of the weights (over 256 MiB in all, five times the H100's L2), as
// a step reads each weight once from HBM: weightGB/s is then the share of
// the read bandwidth the product reaches at each batch size.
func BenchmarkGPUSkinnyLt(b *testing.B) {
	dev, _ := needLt(b)
	tuned := tunedLt(b, dev)
	for _, sh := range llama8BProducts {
		wBytes := 2 * sh.out * sh.in
		copies := max(2, (256<<20+wBytes-1)/wBytes)
		ws := make([]DevicePtr, copies)
		for i := range ws {
			ws[i] = alloc(b, dev, wBytes)
			if err := dev.MemsetAsync(ws[i], 0x3c, wBytes, dev.Stream); err != nil {
				b.Fatal(err)
			}
		}
		for _, m := range []int{1, 2, 4, 8, 16, 32, 64, 128} {
			b.Run(fmt.Sprintf("%s/m%d", sh.name, m), func(b *testing.B) {
				g := Gemm{M: m, N: sh.out, K: sh.in, TransB: true, DType: BF16, OutDType: BF16}
				a := alloc(b, dev, 2*m*sh.in)
				d := alloc(b, dev, 2*m*sh.out)
				if err := dev.MemsetAsync(a, 0x3c, 2*m*sh.in, dev.Stream); err != nil {
					b.Fatal(err)
				}
				per := timeMatmuls(b, dev, tuned, g, a, ws, d)
				b.ReportMetric(float64(wBytes)/per/1e9, "weightGB/s")
				b.ReportMetric(per*1e6, "gpu-µs/op")
			})
		}
	}
}

// BenchmarkGPUPrefillLt is cuBLASLt on a 2,048-token prefill's products
// of llama-3.1-8b, the heuristic's first choice (what the engine runs)
// against the fastest of its candidates (Autotune).
func BenchmarkGPUPrefillLt(b *testing.B) {
	dev, lt := needLt(b)
	tuned := tunedLt(b, dev)
	for _, sh := range llama8BProducts {
		g := Gemm{M: 2048, N: sh.out, K: sh.in, TransB: true, DType: BF16, OutDType: BF16}
		b.Run(sh.name+"/heuristic", func(b *testing.B) { benchMatmul(b, dev, lt, g) })
		b.Run(sh.name+"/tuned", func(b *testing.B) { benchMatmul(b, dev, tuned, g) })
	}
}

// BenchmarkGPUPrefillFP8 is a 2,048-token prefill's products of
// llama-3.1-8b through cuBLASLt in bf16 and in e4m3 (scalar scales), each
// into float32 (what the model's residual stream takes) and into bf16:
// the e4m3 GEMM's own rate, apart from the passes that scale its output.
func BenchmarkGPUPrefillFP8(b *testing.B) {
	dev, lt := needLt(b)
	for _, sh := range llama8BProducts {
		for _, c := range []struct{ in, out DType }{{BF16, F32}, {BF16, BF16}, {FP8E4M3, F32}, {FP8E4M3, BF16}} {
			g := Gemm{M: 2048, N: sh.out, K: sh.in, TransB: true, DType: c.in, OutDType: c.out}
			b.Run(fmt.Sprintf("%s/%v_to_%v", sh.name, c.in, c.out), func(b *testing.B) { benchMatmul(b, dev, lt, g) })
		}
	}
}
