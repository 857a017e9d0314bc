package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// Every ModelOps method against a plain float32/float64 CPU computation on
// random data, with odd sizes. The references take the inputs as the GPU
// sees them (weights decoded from their stored dtype and rounded to the
// weight dtype; with bf16 weights, Linear's input rounded to bf16), so what
// is left is accumulation order.
//
// The suites run twice: TestGPUModelOps on the GPU (skipped without one)
// and TestFakeModelOps on fakeGPU, the host emulation in
// modelops_fake_test.go, which checks the plumbing (arguments, bounds,
// stream order, staging reuse, leaks) on every machine.

// opsEnv is where a suite runs.
type opsEnv struct {
	dev  *Device
	k    *Kernels
	lt   *BlasLt
	fake *fakeGPU // nil on a real GPU
}

var modelOpsSuites = []struct {
	name string
	run  func(*testing.T, opsEnv)
}{
	{"Linear", testModelOpsLinear},
	{"LinearGroup", testModelOpsLinearGroup},
	{"FusedLinear", testModelOpsFusedLinear},
	{"MatrixGroup", testModelOpsMatrixGroup},
	{"MatrixUpload", testModelOpsMatrixUpload},
	{"Embed", testModelOpsEmbed},
	{"RMSNorm", testModelOpsRMSNorm},
	{"Rope", testModelOpsRope},
	{"NormLinear16", testModelOpsNormLinear16},
	{"Elementwise", testModelOpsElementwise},
	{"GatherRowsToHost", testModelOpsGatherRowsToHost},
	{"Run", testModelOpsRun},
	{"MiniModel", testModelOpsMiniModel},
	{"ForwardLifecycle", testModelOpsForwardLifecycle},
}

func runModelOpsSuites(t *testing.T, env opsEnv) {
	for _, s := range modelOpsSuites {
		subtest(t, s.name, func(t *testing.T) { s.run(t, env) })
	}
}

func TestGPUModelOps(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	runModelOpsSuites(t, opsEnv{dev: dev, k: k, lt: lt})
}

func TestFakeModelOps(t *testing.T) {
	dev, k, lt, fake := openFakeDevice(t)
	runModelOpsSuites(t, opsEnv{dev: dev, k: k, lt: lt, fake: fake})
	// Every suite closed its ModelOps: nothing may be left but cached blocks.
	if err := dev.Mem.ReleaseCached(); err != nil {
		t.Error(err)
	}
	if st := dev.Mem.Stats(); st.InUse != 0 {
		t.Errorf("%d bytes still allocated", st.InUse)
	}
	fake.mu.Lock()
	blocks, pinned, err := len(fake.blocks), len(fake.pinned), fake.err
	fake.mu.Unlock()
	if blocks != 0 || pinned != 0 || err != nil {
		t.Errorf("after the suites: %d device blocks, %d pinned blocks, error %v", blocks, pinned, err)
	}
	if err := dev.Close(); err != nil {
		t.Error(err)
	}
}

// subtest is t.Run that turns a ModelOps panic into a test failure, so one
// failing op does not end the test binary.
func subtest(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		defer func() {
			if p := recover(); p != nil {
				if oe, ok := p.(*OpError); ok {
					t.Fatal(oe)
				}
				panic(p)
			}
		}()
		fn(t)
	})
}

// newOps makes a ModelOps on the device's stream, closed at the end of
// the test.
func (e opsEnv) newOps(t *testing.T, wdt DType) *ModelOps {
	t.Helper()
	return e.newOpsWith(t, ModelOpsOptions{WeightDType: wdt})
}

// newOpsWith is newOps with options.
func (e opsEnv) newOpsWith(t *testing.T, opts ModelOpsOptions) *ModelOps {
	t.Helper()
	o := NewModelOps(e.dev, e.k, e.lt, e.dev.Stream, opts)
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return o
}

// testMatrix stores vals ([out, in]) as src, prepares it and returns the
// values the device holds, as float32.
func testMatrix(t *testing.T, o *ModelOps, vals []float32, src DType, out, in int, bias []float32) (device.Matrix, []float32) {
	t.Helper()
	w := storedWeight(t, vals, src, out, in)
	m, err := o.Matrix(w, bias)
	if err != nil {
		t.Fatal(err)
	}
	return m, roundAll(slices.Clone(w.Float32()), o.WeightDType())
}

func testVector(t *testing.T, o *ModelOps, vals []float32) device.Vector {
	t.Helper()
	v, err := o.Vector(vals)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// linearRef is x·Wᵀ + b in float64 with x rounded to the weight dtype.
//
//	x: [rows, in]   w: [out, in]   bias: [out] or nil
func linearRef(x, w, bias []float32, rows, in, out int, wdt DType) []float32 {
	xr := roundAll(x, wdt)
	y := make([]float32, rows*out)
	for r := range rows {
		for j := range out {
			var s float64
			for i := range in {
				s += float64(xr[r*in+i]) * float64(w[j*in+i])
			}
			if bias != nil {
				s += float64(bias[j])
			}
			y[r*out+j] = float32(s)
		}
	}
	return y
}

// linearTolerance: sums of in products of unit normals have magnitude √in;
// 16-bit inputs leave float32 accumulation, so both are float32-tight.
func linearTolerance(in int, wdt DType) (atol, rtol float64) {
	if wdt != F32 {
		return 1e-4 * math.Sqrt(float64(in)), 1e-4
	}
	return 2e-5 * math.Sqrt(float64(in)), 2e-5
}

func testModelOpsLinear(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(40, 40))
	cases := []struct {
		rows, in, out int
		bias          bool
	}{
		{1, 64, 7, false}, {5, 96, 33, true}, {17, 160, 100, false}, {64, 256, 300, true},
		{3, 37, 11, true}, {9, 100, 129, false}, {2, 172, 64, true}, // odd widths (no Q8_0)
	}
	for _, wdt := range []DType{F32, BF16, F16} {
		o := env.newOps(t, wdt)
		for _, src := range []DType{F32, F16, BF16, tensor.Q8_0} {
			for _, tc := range cases {
				if src == tensor.Q8_0 && tc.in%tensor.Q8_0BlockSize != 0 {
					continue
				}
				subtest(t, fmt.Sprintf("%v_weights/%v_stored/%dx%d->%d/bias=%v", wdt, src, tc.rows, tc.in, tc.out, tc.bias), func(t *testing.T) {
					o.BeginForward()
					defer o.EndForward()
					var bias []float32
					if tc.bias {
						bias = randn(rng, tc.out, 1)
					}
					m, w := testMatrix(t, o, randn(rng, tc.out*tc.in, 1), src, tc.out, tc.in, bias)
					if m.Out() != tc.out || m.In() != tc.in {
						t.Fatalf("matrix is [%d, %d]", m.Out(), m.In())
					}
					x := randn(rng, tc.rows*tc.in, 1)
					y := o.Linear(o.Upload(tensor.From(x, tc.rows, tc.in)), m)
					if !slices.Equal(y.Shape, []int{tc.rows, tc.out}) || y.DType != F32 {
						t.Fatalf("output %v %v", y.Shape, y.DType)
					}
					atol, rtol := linearTolerance(tc.in, wdt)
					compare(t, "y", o.ToHost(y).HostData(), linearRef(x, w, bias, tc.rows, tc.in, tc.out, wdt), atol, rtol)
				})
			}
		}
	}
}

// LinearGroup equals separate Linears (the same GEMM plans on the same
// inputs; allowed a float32 ulp in case a plan is not bitwise
// reproducible), keeps leading dimensions, and handles zero rows.
func testModelOpsLinearGroup(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(41, 41))
	const in = 96
	outs := []int{96, 32, 32, 7}
	for _, wdt := range []DType{F32, BF16, F16} {
		subtest(t, wdt.String(), func(t *testing.T) {
			o := env.newOps(t, wdt)
			o.BeginForward()
			ms := make([]device.Matrix, len(outs))
			ws := make([][]float32, len(outs))
			for i, n := range outs {
				var bias []float32
				if i%2 == 0 {
					bias = randn(rng, n, 1)
				}
				ms[i], ws[i] = testMatrix(t, o, randn(rng, n*in, 1), BF16, n, in, bias)
			}
			x := o.Upload(tensor.From(randn(rng, 2*3*in, 1), 2, 3, in)) // [2, 3, in]: 6 rows
			group := o.LinearGroup(x, ms...)
			if len(group) != len(ms) {
				t.Fatalf("%d outputs", len(group))
			}
			for i, m := range ms {
				if want := []int{2, 3, outs[i]}; !slices.Equal(group[i].Shape, want) {
					t.Errorf("output %d shape %v, want %v", i, group[i].Shape, want)
				}
				compare(t, fmt.Sprintf("group[%d]", i), o.ToHost(group[i]).HostData(), o.ToHost(o.Linear(x, m)).HostData(), 0, 1e-6)
			}
			empty := o.LinearGroup(o.Upload(tensor.New(0, in)), ms[0], ms[1])
			for i, e := range empty {
				if !slices.Equal(e.Shape, []int{0, outs[i]}) || !e.OnDevice() || len(o.ToHost(e).HostData()) != 0 {
					t.Errorf("zero-row output %d: %+v", i, e)
				}
			}
			if got := o.LinearGroup(x); len(got) != 0 {
				t.Errorf("LinearGroup of no matrices: %d outputs", len(got))
			}
			o.EndForward()
		})
	}
}

// The fused ops (NormLinearGroup, LinearAdd, GatedMLPAdd) equal their
// parts run one by one on the same device, for decode batches that take
// the staged skinny kernel, batches past its shared memory or row limit,
// and prefill-sized ones (cuBLASLt with beta = 1); staged x of 3·3072
// float32 or 7·3072 bf16 values is the most that fits. With bf16 weights the
// staged x is rounded once either way, but the norm's sum of squares runs
// in another order, so a value may round to the neighbouring bf16.
func testModelOpsFusedLinear(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(51, 51))
	for _, wdt := range []DType{F32, BF16, F16} {
		o := env.newOps(t, wdt)
		for _, tc := range []struct{ rows, in int }{{1, 256}, {3, 256}, {8, 256}, {3, 3072}, {4, 3072}, {7, 3072}, {8, 3072}, {9, 256}, {20, 256}} {
			subtest(t, fmt.Sprintf("%v/%dx%d", wdt, tc.rows, tc.in), func(t *testing.T) {
				o.BeginForward()
				defer o.EndForward()
				const outQ, outK = 48, 16
				atol, rtol := linearTolerance(tc.in, wdt)
				if wdt != F32 {
					atol, rtol = 2e-2, 1e-3
				}
				x := randn(rng, tc.rows*tc.in, 1)
				norm := testVector(t, o, randn(rng, tc.in, 0.5))
				q, _ := testMatrix(t, o, randn(rng, outQ*tc.in, 1), F32, outQ, tc.in, randn(rng, outQ, 1))
				k, _ := testMatrix(t, o, randn(rng, outK*tc.in, 1), F32, outK, tc.in, nil)
				dx := o.Upload(tensor.From(x, tc.rows, tc.in))
				fused := o.NormLinearGroup(dx, norm, 1e-5, q, k)
				parts := o.LinearGroup(o.RMSNorm(dx, norm, 1e-5), q, k)
				for i := range parts {
					if !slices.Equal(fused[i].Shape, parts[i].Shape) {
						t.Fatalf("NormLinearGroup output %d: %v, want %v", i, fused[i].Shape, parts[i].Shape)
					}
					compare(t, fmt.Sprintf("NormLinearGroup[%d]", i), o.ToHost(fused[i]).HostData(), o.ToHost(parts[i]).HostData(), atol, rtol)
				}
				compare(t, "x unchanged", o.ToHost(dx).HostData(), x, 0, 0)

				// LinearAdd: [rows, in] · [outQ, in]ᵀ added to a residual.
				resid := randn(rng, tc.rows*outQ, 1)
				dst := o.Upload(tensor.From(resid, tc.rows, outQ))
				o.LinearAdd(dst, dx, q)
				want := o.ToHost(o.Linear(dx, q)).HostData()
				for i := range want {
					want[i] += resid[i]
				}
				compare(t, "LinearAdd", o.ToHost(dst).HostData(), want, atol, rtol)
				// LinearInto (device.OverwriteOps) writes what LinearAdd adds.
				into := o.Upload(tensor.From(randn(rng, tc.rows*outQ, 1), tc.rows, outQ))
				o.LinearInto(into, dx, q)
				compare(t, "LinearInto", o.ToHost(into).HostData(), o.ToHost(o.Linear(dx, q)).HostData(), atol, rtol)

				// GatedMLPAdd: gate, up [inter, in], down [in, inter], on x.
				const inter = 40
				gate, _ := testMatrix(t, o, randn(rng, inter*tc.in, 1), F32, inter, tc.in, randn(rng, inter, 1))
				up, _ := testMatrix(t, o, randn(rng, inter*tc.in, 1), F32, inter, tc.in, nil)
				down, _ := testMatrix(t, o, randn(rng, tc.in*inter, 0.1), F32, tc.in, inter, randn(rng, tc.in, 1))
				fx := o.Upload(tensor.From(x, tc.rows, tc.in))
				o.GatedMLPAdd(fx, norm, 1e-5, gate, up, down)
				ix := o.Upload(tensor.From(x, tc.rows, tc.in))
				o.GatedMLPInto(ix, norm, 1e-5, gate, up, down)
				gu := o.NormLinearGroup(dx, norm, 1e-5, gate, up)
				o.SiLUMul(gu[0], gu[1])
				compare(t, "GatedMLPInto", o.ToHost(ix).HostData(), o.ToHost(o.Linear(gu[0], down)).HostData(), atol, rtol)
				o.LinearAdd(dx, gu[0], down)
				compare(t, "GatedMLPAdd", o.ToHost(fx).HostData(), o.ToHost(dx).HostData(), atol, rtol)
			})
		}
	}
}

// testModelOpsMatrixGroup: matrices placed together by MatrixGroup are
// adjacent, and NormLinearGroup and GatedMLPAdd over them (one GEMM and a
// split, up to fuseMaxRows rows) agree with the same matrices made one by
// one (a GEMM each).
func testModelOpsMatrixGroup(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(52, 52))
	const in, outQ, outK, inter = 256, 64, 16, 48
	for _, wdt := range []DType{BF16, F16} {
		o := env.newOps(t, wdt)
		weights := func(outs ...int) []tensor.Weight {
			ws := make([]tensor.Weight, len(outs))
			for i, n := range outs {
				ws[i] = storedWeight(t, randn(rng, n*in, 1), F32, n, in)
			}
			return ws
		}
		qkv, gu := weights(outQ, outK, outK), weights(inter, inter)
		qkvBias := [][]float32{randn(rng, outQ, 1), nil, randn(rng, outK, 1)}
		grouped, err := o.MatrixGroup(qkv, qkvBias)
		if err != nil {
			t.Fatal(err)
		}
		groupedGU, err := o.MatrixGroup(gu, nil)
		if err != nil {
			t.Fatal(err)
		}
		var single, singleGU []device.Matrix
		for i, w := range qkv {
			m, err := o.Matrix(w, qkvBias[i])
			if err != nil {
				t.Fatal(err)
			}
			single = append(single, m)
		}
		for _, w := range gu {
			m, err := o.Matrix(w, nil)
			if err != nil {
				t.Fatal(err)
			}
			singleGU = append(singleGU, m)
		}
		mats := func(ms []device.Matrix) []*Matrix {
			out := make([]*Matrix, len(ms))
			for i, m := range ms {
				out[i] = m.(*Matrix)
			}
			return out
		}
		if !adjacent(mats(grouped)) || !adjacent(mats(groupedGU)) || adjacent(mats(single)) {
			t.Fatalf("adjacent: grouped %v, gate/up %v, one by one %v", adjacent(mats(grouped)), adjacent(mats(groupedGU)), adjacent(mats(single)))
		}
		down, _ := testMatrix(t, o, randn(rng, in*inter, 0.1), F32, in, inter, nil)
		norm := testVector(t, o, randn(rng, in, 0.5))
		for _, rows := range []int{1, 9, 64, fuseMaxRows, fuseMaxRows + 1} {
			subtest(t, fmt.Sprintf("%v/%d", wdt, rows), func(t *testing.T) {
				o.BeginForward()
				defer o.EndForward()
				x := randn(rng, rows*in, 1)
				dx := o.Upload(tensor.From(x, rows, in))
				got, want := o.NormLinearGroup(dx, norm, 1e-5, grouped...), o.NormLinearGroup(dx, norm, 1e-5, single...)
				for i := range want {
					compare(t, fmt.Sprintf("NormLinearGroup[%d]", i), o.ToHost(got[i]).HostData(), o.ToHost(want[i]).HostData(), 2e-2, 1e-3)
				}
				a, b := o.Upload(tensor.From(x, rows, in)), o.Upload(tensor.From(x, rows, in))
				o.GatedMLPAdd(a, norm, 1e-5, groupedGU[0], groupedGU[1], down)
				o.GatedMLPAdd(b, norm, 1e-5, singleGU[0], singleGU[1], down)
				compare(t, "GatedMLPAdd", o.ToHost(a).HostData(), o.ToHost(b).HostData(), 2e-2, 1e-3)
			})
		}
	}
}

// Matrix uploads chunk by chunk; the device holds exactly the decoded,
// rounded values, past a chunk boundary too.
func testModelOpsMatrixUpload(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(42, 42))
	for _, tc := range []struct {
		wdt, src DType
		out, in  int
	}{
		{BF16, F16, 2100, 4096},   // 2048 rows a chunk: 2 chunks
		{F32, F32, 1100, 4096},    // direct, 1024 rows a chunk
		{BF16, BF16, 3, 40},       // direct, one chunk
		{F32, tensor.Q8_0, 7, 64}, // dequantised
	} {
		subtest(t, fmt.Sprintf("%v_from_%v_%dx%d", tc.wdt, tc.src, tc.out, tc.in), func(t *testing.T) {
			o := env.newOps(t, tc.wdt)
			before := o.WeightBytes()
			bias := randn(rng, tc.out, 1)
			m, want := testMatrix(t, o, randn(rng, tc.out*tc.in, 1), tc.src, tc.out, tc.in, bias)
			cm := m.(*Matrix)
			if cm.DType() != tc.wdt || cm.Ptr() == 0 || cm.Bias() == 0 {
				t.Fatalf("matrix %+v", cm)
			}
			if got, want := o.WeightBytes()-before, int64(tc.out*tc.in*ElemSize(tc.wdt)+4*tc.out); got != want {
				t.Errorf("weights take %d bytes, want %d", got, want)
			}
			compare(t, "weight", download(t, o.Device(), cm.Ptr(), len(want), tc.wdt), want, 0, 0)
			compare(t, "bias", download(t, o.Device(), cm.Bias(), tc.out, F32), bias, 0, 0)
		})
	}
	o := env.newOps(t, BF16)
	w := tensor.FromFloat32("w", make([]float32, 12), 3, 4)
	if _, err := o.Matrix(w, make([]float32, 4)); err == nil || !strings.Contains(err.Error(), "bias of 4 values for 3 outputs") {
		t.Errorf("wrong bias length: %v", err)
	}
	if _, err := o.Matrix(tensor.FromFloat32("v", make([]float32, 4), 4), nil); err == nil {
		t.Error("a 1-D weight was accepted")
	}
	if _, err := o.Vector(nil); err == nil {
		t.Error("an empty vector was accepted")
	}
	if o.WeightBytes() != 0 {
		t.Errorf("failed uploads hold %d bytes", o.WeightBytes())
	}
}

func testModelOpsEmbed(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(43, 43))
	const vocab, hidden = 1000, 96
	for _, wdt := range []DType{F32, BF16, F16} {
		for _, src := range []DType{F32, BF16, tensor.Q8_0} {
			subtest(t, fmt.Sprintf("%v_from_%v", wdt, src), func(t *testing.T) {
				o := env.newOps(t, wdt)
				o.BeginForward()
				table, rows := testMatrix(t, o, randn(rng, vocab*hidden, 1), src, vocab, hidden, nil)
				check := func(ids []int32) {
					t.Helper()
					got := o.Embed(table, ids)
					if !slices.Equal(got.Shape, []int{len(ids), hidden}) {
						t.Fatalf("shape %v", got.Shape)
					}
					want := make([]float32, len(ids)*hidden)
					for i, id := range ids {
						if id >= 0 && id < vocab { // else a zero row
							copy(want[i*hidden:], rows[int(id)*hidden:(int(id)+1)*hidden])
						}
					}
					compare(t, fmt.Sprintf("embed %d ids", len(ids)), o.ToHost(got).HostData(), want, 0, 0)
				}
				check([]int32{5, 999, 0, 5, 42, -1, 1000})
				check(nil)
				// More ids than the first staging chunk holds (16K int32).
				many := make([]int32, 70001)
				for i := range many {
					many[i] = int32(rng.IntN(vocab))
				}
				check(many)
				o.EndForward()
				o.BeginForward() // a forward on the other staging half
				check(many[:3000])
				o.BeginForward() // back on the grown half, merged into one chunk
				check(many)
				o.EndForward()
			})
		}
	}
}

func testModelOpsRMSNorm(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(44, 44))
	o := env.newOps(t, F32)
	for _, tc := range []struct {
		rows, width, wlen int
		eps               float64
	}{
		{7, 1000, 1000, 1e-6}, // rows
		{1, 64, 64, 1e-5},
		{3, 4096, 4096, 1e-6},
		{5, 3 * 72, 72, 1e-6},    // per head
		{4, 16 * 128, 128, 1e-6}, // q norm of 16 heads
		{0, 64, 64, 1e-6},        // no tokens
	} {
		subtest(t, fmt.Sprintf("%dx%d_w%d", tc.rows, tc.width, tc.wlen), func(t *testing.T) {
			o.BeginForward()
			defer o.EndForward()
			x := randn(rng, tc.rows*tc.width, 2)
			w := randn(rng, tc.wlen, 0.5)
			dx := o.Upload(tensor.From(x, tc.rows, tc.width))
			y := o.RMSNorm(dx, testVector(t, o, w), tc.eps)
			if !slices.Equal(y.Shape, dx.Shape) || y.DevPtr() == dx.DevPtr() {
				t.Fatalf("output %v at %#x (input at %#x)", y.Shape, y.DevPtr(), dx.DevPtr())
			}
			compare(t, "y", o.ToHost(y).HostData(), rmsnormRef(x, w, float32(tc.eps), 0, F32), 2e-5, 2e-5)
			compare(t, "x unchanged", o.ToHost(dx).HostData(), x, 0, 0)
		})
	}
}

func testModelOpsRope(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(45, 45))
	o := env.newOps(t, F32)
	const rows = 9
	pos := make([]int32, rows)
	for i := range pos {
		pos[i] = int32(rng.IntN(200000))
	}
	pos[0], pos[1] = 0, 1
	for _, headDim := range []int{64, 128} {
		for _, interleaved := range []bool{false, true} {
			for _, rot := range []int{headDim, headDim / 2} {
				subtest(t, fmt.Sprintf("hd%d/interleaved=%v/rot%d", headDim, interleaved, rot), func(t *testing.T) {
					o.BeginForward()
					defer o.EndForward()
					r := &device.Rope{HeadDim: headDim, InvFreq: ropeInvFreq(rot, 10000), Interleaved: interleaved}
					const heads = 3
					width := heads*headDim + 10 // trailing values outside a whole head stay
					q := randn(rng, rows*width, 1)
					k := randn(rng, rows*(headDim), 1) // one kv head
					dq := o.Upload(tensor.From(q, rows, width))
					dk := o.Upload(tensor.From(k, rows, headDim))
					_, before := o.Held()
					o.Rope(dq, pos, r)
					o.Rope(dk, slices.Clone(pos), r) // same positions: uploaded once
					if _, after := o.Held(); after-before != 4*rows {
						t.Errorf("positions took %d arena bytes, want %d", after-before, 4*rows)
					}
					ropeRef(q, width, heads, headDim, rot, pos, r.InvFreq, interleaved, 1, F32)
					ropeRef(k, headDim, 1, headDim, rot, pos, r.InvFreq, interleaved, 1, F32)
					compare(t, "q", o.ToHost(dq).HostData(), q, 2e-5, 2e-5)
					compare(t, "k", o.ToHost(dk).HostData(), k, 2e-5, 2e-5)
					// RopeQK: both in one launch, rotating the rotated values again.
					o.RopeQK(dq, dk, pos, r)
					ropeRef(q, width, heads, headDim, rot, pos, r.InvFreq, interleaved, 1, F32)
					ropeRef(k, headDim, 1, headDim, rot, pos, r.InvFreq, interleaved, 1, F32)
					compare(t, "RopeQK q", o.ToHost(dq).HostData(), q, 4e-5, 4e-5)
					compare(t, "RopeQK k", o.ToHost(dk).HostData(), k, 4e-5, 4e-5)
					o.mu.Lock()
					_, cached := o.ropes[r]
					o.mu.Unlock()
					if !cached {
						t.Error("inv_freq not cached for the rope")
					}
				})
			}
		}
	}
	o.mu.Lock()
	n := len(o.ropes)
	o.mu.Unlock()
	if n != 8 {
		t.Errorf("%d cached frequency tables, want 8 (one per *Rope)", n)
	}
}

func testModelOpsElementwise(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(46, 46))
	o := env.newOps(t, F32)
	silu := func(g float64) float64 { return g / (1 + math.Exp(-g)) }
	gelu := func(g float64) float64 { return 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))) }
	for _, shape := range [][]int{{5, 1000}, {3, 333}, {1, 7}, {2, 3, 41}, {0, 8}} {
		n := 1
		for _, d := range shape {
			n *= d
		}
		subtest(t, fmt.Sprint(shape), func(t *testing.T) {
			o.BeginForward()
			defer o.EndForward()
			gate, up := randn(rng, n, 3), randn(rng, n, 1)
			for name, act := range map[string]func(float64) float64{"silu": silu, "gelu_tanh": gelu} {
				dg, du := o.Upload(tensor.From(slices.Clone(gate), shape...)), o.Upload(tensor.From(up, shape...))
				if name == "silu" {
					o.SiLUMul(dg, du)
				} else {
					o.GeLUTanhMul(dg, du)
				}
				want := make([]float32, n)
				for i := range want {
					want[i] = float32(act(float64(gate[i])) * float64(up[i]))
				}
				compare(t, name, o.ToHost(dg).HostData(), want, 1e-6, 2e-5)
				compare(t, name+" up unchanged", o.ToHost(du).HostData(), up, 0, 0)
			}

			a, b := randn(rng, n, 1), randn(rng, n, 1)
			da := o.Upload(tensor.From(slices.Clone(a), shape...))
			o.Add(da, o.Upload(tensor.From(b, shape...)))
			sum := make([]float32, n)
			for i := range sum {
				sum[i] = a[i] + b[i]
			}
			compare(t, "add", o.ToHost(da).HostData(), sum, 0, 0)

			o.Scale(da, -0.37)
			for i := range sum {
				sum[i] *= -0.37
			}
			compare(t, "scale", o.ToHost(da).HostData(), sum, 0, 0)

			x := randn(rng, n, 40)
			dx := o.Upload(tensor.From(slices.Clone(x), shape...))
			const capv = 30
			o.Softcap(dx, capv)
			for i, v := range x {
				x[i] = float32(capv * math.Tanh(float64(v)/capv))
			}
			compare(t, "softcap", o.ToHost(dx).HostData(), x, 2e-5, 2e-5)
		})
	}
}

func testModelOpsGatherRowsToHost(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(47, 47))
	o := env.newOps(t, F32)
	o.BeginForward()
	const n, width = 11, 77
	x := randn(rng, n*width, 1)
	dx := o.Upload(tensor.From(x, n, width))
	for _, rows := range [][]int32{{10}, {10, 0, 3, 3}, {}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}} {
		got := o.GatherRows(dx, rows)
		if !slices.Equal(got.Shape, []int{len(rows), width}) {
			t.Fatalf("shape %v", got.Shape)
		}
		want := make([]float32, 0, len(rows)*width)
		for _, r := range rows {
			want = append(want, x[int(r)*width:(int(r)+1)*width]...)
		}
		compare(t, fmt.Sprint("rows ", rows), o.ToHost(got).HostData(), want, 0, 0)
	}
	// A bigger upload than the staging fast path (1 MiB) round-trips too.
	big := randn(rng, 300000, 1)
	compare(t, "big upload", o.ToHost(o.Upload(tensor.From(big, 3, 100000))).HostData(), big, 0, 0)
	// 16-bit device tensors (an attention output in bf16) read back decoded.
	vals := randn(rng, 999, 1)
	for _, dt := range []DType{BF16, F16} {
		h := o.ToHost(tensor.Device{Shape: []int{9, 111}, Ptr: uintptr(upload(t, o.Device(), vals, dt)), DType: dt}.T())
		if !slices.Equal(h.Shape, []int{9, 111}) || h.OnDevice() {
			t.Fatalf("host tensor %v", h.Shape)
		}
		compare(t, dt.String(), h.HostData(), roundAll(vals, dt), 0, 0)
	}
	o.EndForward()
}

// Run executes on the device thread and turns an *OpError into an error.
func testModelOpsRun(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	m, _ := testMatrix(t, o, make([]float32, 4*8), F32, 4, 8, nil)
	var y tensor.T
	err := o.Run(func() error {
		o.BeginForward()
		y = o.Linear(o.Upload(tensor.New(2, 8)), m)
		o.EndForward()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.ToHost(y); !slices.Equal(got.Shape, []int{2, 4}) {
		t.Errorf("shape %v", got.Shape)
	}
	err = o.Run(func() error {
		o.Linear(o.Upload(tensor.New(2, 5)), m)
		return nil
	})
	var oe *OpError
	if !errors.As(err, &oe) || oe.Op != "Linear" {
		t.Errorf("Run = %v, want the Linear *OpError", err)
	}
	sentinel := errors.New("model error")
	if err := o.Run(func() error { return sentinel }); err != sentinel {
		t.Errorf("Run = %v, want the function's error", err)
	}
}
