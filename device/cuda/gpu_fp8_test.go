package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/tensor"
)

// The FP8 kernels (kernels/fp8.cu) and ModelOps' FP8 matrices against the
// CPU's reference path (device/cpu with FP8 on), which defines what each
// device.FP8Path computes. Skipped without a GPU of compute capability
// 8.9 or later.

func needFP8(t *testing.T) (*Device, *Kernels, *BlasLt) {
	t.Helper()
	dev, k := needKernels(t)
	_, lt := needLt(t)
	if dev.Info.Arch() < fp8MinArch {
		t.Skipf("%s has no FP8 (compute capability %d.%d)", dev.Info.Name, dev.Info.Major, dev.Info.Minor)
	}
	return dev, k, lt
}

// randomScaledFP8 is a random [out, in] weight quantised in br×bc blocks.
func randomScaledFP8(t *testing.T, rng *rand.Rand, out, in, br, bc int) tensor.ScaledFP8 {
	w, err := tensor.QuantizeFP8Blocks(tensor.FromFloat32("w", randn(rng, out*in, 1), out, in), br, bc)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestGPUFP8QuantRows: fp8_quant_rows writes the bits tensor.QuantizeFP8Row
// does (quants and scales), zero rows and saturating values included, on
// its register path (rows of a multiple of 8) and its loop.
func TestGPUFP8QuantRows(t *testing.T) {
	for _, in := range []int{4112, 4106} {
		t.Run(fmt.Sprint(in), func(t *testing.T) { testFP8QuantRows(t, in) })
	}
}

func testFP8QuantRows(t *testing.T, in int) {
	dev, k, _ := needFP8(t)
	rng := rand.New(rand.NewPCG(89, 89))
	const rows = 7
	x := randn(rng, rows*in, 3)
	clear(x[2*in : 3*in]) // an all-zero row
	x[5*in+7] = 1e30      // a row with one huge value: the rest round to zero or subnormals
	dx := upload(t, dev, x, F32)
	dq, ds := alloc(t, dev, rows*in), alloc(t, dev, 4*rows)
	if err := k.QuantFP8Rows(dev.Stream, dq, ds, dx, F32, rows, in); err != nil {
		t.Fatal(err)
	}
	sync0(t, dev)
	q := make([]byte, rows*in)
	if err := CopyDtoH(dev, q, dq); err != nil {
		t.Fatal(err)
	}
	s := download(t, dev, ds, rows, F32)
	want := make([]byte, in)
	for r := range rows {
		ws := tensor.QuantizeFP8Row(want, x[r*in:(r+1)*in])
		if math.Float32bits(s[r]) != math.Float32bits(ws) {
			t.Errorf("row %d: scale %g, want %g", r, s[r], ws)
		}
		for i := range in {
			if q[r*in+i] != want[i] {
				t.Fatalf("row %d col %d: quant %#x, want %#x (x %g)", r, i, q[r*in+i], want[i], x[r*in+i])
			}
		}
	}
}

// TestGPUFP8Widen: fp8_widen_bf16 gives tensor.ScaledFP8.Widen(BF16) bit
// for bit, for blocks that do not divide the shape.
func TestGPUFP8Widen(t *testing.T) {
	dev, k, lt := needFP8(t)
	o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: BF16})
	defer o.Close()
	rng := rand.New(rand.NewPCG(90, 90))
	for _, b := range [][2]int{{128, 128}, {1, 272}, {200, 272}, {48, 80}} {
		w := randomScaledFP8(t, rng, 200, 272, b[0], b[1])
		dm, err := o.FP8Matrix(w, nil)
		if err != nil {
			t.Fatal(err)
		}
		wb := alloc(t, dev, 2*w.Out()*w.In())
		if err := k.WidenFP8(dev.Stream, wb, dm.(*Matrix)); err != nil {
			t.Fatal(err)
		}
		sync0(t, dev)
		got := download(t, dev, wb, w.Out()*w.In(), BF16)
		for i, v := range w.Widen(tensor.BF16).Float32() {
			if math.Float32bits(got[i]) != math.Float32bits(v) {
				t.Fatalf("blocks %v: element %d = %g, want %g", b, i, got[i], v)
			}
		}
	}
}

// TestGPUFP8Linear: Linear and LinearAdd over FP8 matrices, on every path
// and scale layout, against the CPU reference path. The activations each
// path reads are the reference's bit for bit (bf16 rounding, per-token
// e4m3), so what is left is float32 summation order.
func TestGPUFP8Linear(t *testing.T) {
	dev, k, lt := needFP8(t)
	o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: BF16})
	defer o.Close()
	ref := cpu.NewOps(cpu.NewWorkers(0))
	ref.FP8 = true
	rng := rand.New(rand.NewPCG(91, 91))
	t.Logf("cuBLASLt row-scaled e4m3 GEMMs (the FP8Scaled path's scales in its epilogue): %v",
		lt.RowScaled(Gemm{M: 200, N: 1536, K: 2048, TransB: true, DType: FP8E4M3, OutDType: F32}))
	for _, tc := range []struct {
		rows, out, in, br, bc int
		bias                  bool
		path                  device.FP8Path
	}{
		{1, 512, 4096, 1, 4096, false, device.FP8Skinny},
		{3, 1040, 2064, 1, 2064, true, device.FP8Skinny},
		{8, 4096, 4096, 128, 128, false, device.FP8Skinny}, // x not staged (64 KiB in bf16)
		{6, 4096, 4096, 1, 4096, true, device.FP8Skinny},
		{7, 4096, 4096, 1, 4096, true, device.FP8Scaled},
		{1, 1024, 1024, 1024, 1024, true, device.FP8Skinny},
		{4, 640, 1152, 128, 128, false, device.FP8Skinny},
		{1, 1000, 1024, 1, 1024, true, device.FP8Skinny}, // a last tile of 8 rows
		{2, 96, 256, 32, 32, false, device.FP8Skinny},    // blocks narrower than a tile round: the CUDA-core path
		{3, 200, 2112, 8, 128, true, device.FP8Skinny},   // 8-row blocks on tensor cores, a last partial round
		{9, 512, 1024, 1, 1024, true, device.FP8Scaled},
		{200, 1536, 2048, 1, 2048, false, device.FP8Scaled},
		{64, 1024, 1024, 1024, 1024, true, device.FP8Scaled},
		{40, 640, 1152, 128, 128, true, device.FP8Widened},
		{5, 96, 100, 1, 100, false, device.FP8Widened},
	} {
		name := fmt.Sprintf("%dx%d->%d/blocks%dx%d/bias=%v", tc.rows, tc.in, tc.out, tc.br, tc.bc, tc.bias)
		subtest(t, name, func(t *testing.T) {
			w := randomScaledFP8(t, rng, tc.out, tc.in, tc.br, tc.bc)
			if p := device.FP8PathOf(tc.rows, w); p != tc.path {
				t.Fatalf("path %d, want %d", p, tc.path)
			}
			var bias []float32
			if tc.bias {
				bias = randn(rng, tc.out, 1)
			}
			gm, err := o.FP8Matrix(w, bias)
			if err != nil {
				t.Fatal(err)
			}
			cm, err := ref.FP8Matrix(w, bias)
			if err != nil {
				t.Fatal(err)
			}
			x := randn(rng, tc.rows*tc.in, 1)
			xt := tensor.From(x, tc.rows, tc.in)
			want := ref.Linear(xt, cm).HostData()
			o.BeginForward()
			defer o.EndForward()
			y := o.Linear(o.Upload(xt), gm)
			// x and W of unit normals: sums of in products have magnitude √in.
			atol, rtol := 1e-4*math.Sqrt(float64(tc.in)), 1e-4
			if tc.path == device.FP8Scaled {
				// The tensor cores accumulate e4m3 products with about 14
				// mantissa bits (as DeepSeek-V3's report measured on
				// Hopper), not float32's 24: errors of about 1e-3
				// relative (largest 0.038 at in 2048 on an H100); and
				// without outer-vector scales the raw sums are rounded
				// to bf16 before scaling, a part in 2⁹.
				atol, rtol = 1e-3*math.Sqrt(float64(tc.in)), 4e-3
			}
			compare(t, "Linear", o.ToHost(y).HostData(), want, atol, rtol)
			res := randn(rng, tc.rows*tc.out, 1)
			dst := o.Upload(tensor.From(res, tc.rows, tc.out))
			o.LinearAdd(dst, o.Upload(xt), gm)
			for i := range res {
				res[i] += want[i]
			}
			compare(t, "LinearAdd", o.ToHost(dst).HostData(), res, atol, rtol)
		})
	}
}
