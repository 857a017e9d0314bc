package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// TestFakeFP8PrefillOps: a prefill's rows through FP8 matrices on the
// emulated GPU (cuBLASLt without outer-vector scales, as on sm_90), against
// the definition of that path computed here in float64: x normalised and
// quantised per row (rmsnorm_f32_to_e4m3), the e4m3 product's raw sums
// rounded to bf16, then scaled by sx[t]·s[o] (fp8_scale_out_*), and for the
// MLP h = silu(g)·u quantised per row again (fp8_swiglu_quant) before the
// down projection adds to x. Only float32 summation order differs, which
// can tip a bf16 or e4m3 rounding: the bound is a part in 10³ of the
// largest value, where a wrong scale or operand moves values by tens of
// percent.
func TestFakeFP8PrefillOps(t *testing.T) {
	o := NewFakeModelOps(t)
	FakeNoRowScales(o)
	fp8PrefillOps(t, o, 1e-3, func(m *Matrix) []float32 {
		s, err := fakeOf(o).f32s(m.fp8.scale, m.out)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestGPUFP8PrefillOps is TestFakeFP8PrefillOps on the GPU, whose tensor
// cores sum e4m3 products with fewer bits than float32 (TestGPUFP8Linear):
// a part in 10² of the largest value.
func TestGPUFP8PrefillOps(t *testing.T) {
	dev, k, lt := needFP8(t)
	o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: BF16})
	defer o.Close()
	t.Logf("cuBLASLt row-scaled e4m3 GEMMs: %v", lt.RowScaled(Gemm{M: 20, N: 64, K: 96, TransB: true, DType: FP8E4M3, OutDType: F32}))
	fp8PrefillOps(t, o, 1e-2, func(m *Matrix) []float32 { return download(t, dev, m.fp8.scale, m.out, F32) })
}

// fp8PrefillOps checks o's FP8Scaled ops within tol of the largest value;
// scalesOf downloads a matrix's per-row scales.
func fp8PrefillOps(t *testing.T, o *ModelOps, tol float64, scalesOf func(*Matrix) []float32) {
	fakesMu.Lock()
	_, fake := fakes[o] // the emulation counts launches
	fakesMu.Unlock()
	rng := rand.New(rand.NewPCG(14, 14))
	const rows, hidden, inter, eps = 20, 64, 96, 1e-5
	mat := func(out, in int) (*Matrix, [][]float64) {
		w, err := tensor.QuantizeFP8Rows(tensor.FromFloat32("w", randn(rng, out*in, 0.2), out, in))
		if err != nil {
			t.Fatal(err)
		}
		if p := device.FP8PathOf(rows, w); p != device.FP8Scaled {
			t.Fatalf("path %d, want FP8Scaled", p)
		}
		dm, err := o.FP8Matrix(w, nil)
		if err != nil {
			t.Fatal(err)
		}
		q := make([][]float64, out) // Q·s by row
		row := make([]float32, in)
		for r := range out {
			w.WidenRow(r, row)
			q[r] = make([]float64, in)
			for i, v := range row {
				q[r][i] = float64(v)
			}
		}
		return dm.(*Matrix), q
	}
	// product is the path's y[t] for a quantised row (qx, sx): bf16 of the
	// raw sum Σ qx·Q (Q·s / s), times sx·s.
	product := func(w [][]float64, scales []float32, x []float32) []float64 {
		q := make([]byte, len(x))
		sx := tensor.QuantizeFP8Row(q, x)
		y := make([]float64, len(w))
		for o, wr := range w {
			var raw float64
			for i, v := range wr {
				raw += float64(tensor.FP8E4M3ToF32(q[i])) * v / float64(scales[o])
			}
			y[o] = float64(tensor.BF16ToF32(tensor.F32ToBF16(float32(raw)))) * float64(sx) * float64(scales[o])
		}
		return y
	}
	norm := randn(rng, hidden, 0.1)
	for i := range norm {
		norm[i] += 1
	}
	nv, err := o.Vector(norm)
	if err != nil {
		t.Fatal(err)
	}
	x := randn(rng, rows*hidden, 1)
	xn := make([]float32, rows*hidden)
	for r := range rows {
		var ss float32
		for _, v := range x[r*hidden : (r+1)*hidden] {
			ss += v * v
		}
		inv := 1 / float32(math.Sqrt(float64(ss/hidden+eps)))
		for i, v := range x[r*hidden : (r+1)*hidden] {
			xn[r*hidden+i] = v * inv * norm[i]
		}
	}
	check := func(what string, got []float32, want []float64) {
		t.Helper()
		top, worst := 0.0, 0.0
		for i, w := range want {
			top = max(top, math.Abs(w))
			worst = max(worst, math.Abs(float64(got[i])-w))
		}
		if worst > tol*top {
			t.Errorf("%s: off by up to %.3g (largest value %.3g)", what, worst, top)
		}
	}

	gm, gq := mat(inter, hidden)
	um, uq := mat(inter, hidden)
	dm, dq := mat(hidden, inter)
	o.BeginForward()
	xt := o.Upload(tensor.From(append([]float32(nil), x...), rows, hidden))
	o.GatedMLPAdd(xt, nv, eps, gm, um, dm)
	got := o.ToHost(xt).HostData()
	sg, su, sd := scalesOf(gm), scalesOf(um), scalesOf(dm)
	want := make([]float64, rows*hidden)
	h := make([]float32, inter)
	for r := range rows {
		g, u := product(gq, sg, xn[r*hidden:(r+1)*hidden]), product(uq, su, xn[r*hidden:(r+1)*hidden])
		for i := range h {
			gv := float32(g[i])
			h[i] = gv / (1 + float32(math.Exp(float64(-gv)))) * float32(u[i])
		}
		for i, v := range product(dq, sd, h) {
			want[r*hidden+i] = float64(x[r*hidden+i]) + v
		}
	}
	check("GatedMLPAdd", got, want)
	if fake {
		if n := fakeLaunches(o, "fp8_swiglu_quant"); n != 1 {
			t.Errorf("%d fp8_swiglu_quant launches, want 1", n)
		}
	}

	qm, qq := mat(48, hidden)
	km, kq := mat(32, hidden)
	outs := o.NormLinearGroup16(o.Upload(tensor.From(x, rows, hidden)), nv, eps, BF16, qm, km)
	for i, tc := range []struct {
		m *Matrix
		w [][]float64
	}{{qm, qq}, {km, kq}} {
		if outs[i].DType != BF16 {
			t.Fatalf("NormLinearGroup16 output %d is %v, want BF16", i, outs[i].DType)
		}
		want := make([]float64, 0, rows*tc.m.out)
		for r := range rows {
			for _, v := range product(tc.w, scalesOf(tc.m), xn[r*hidden:(r+1)*hidden]) {
				want = append(want, float64(tensor.BF16ToF32(tensor.F32ToBF16(float32(v)))))
			}
		}
		check("NormLinearGroup16", o.ToHost(outs[i]).HostData(), want)
	}

	// o_proj reading a bf16 attention output as it is
	om, oq := mat(hidden, 48)
	a := randn(rng, rows*48, 1)
	for i, v := range a {
		a[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
	}
	a32 := o.Upload(tensor.From(a, rows, 48))
	a16, err := o.newTensorOf([]int{rows, 48}, BF16)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.k.Convert(o.stream, DevicePtr(a16.DevPtr()), DevicePtr(a32.DevPtr()), rows*48, F32, BF16); err != nil {
		t.Fatal(err)
	}
	res := randn(rng, rows*hidden, 1)
	dst := o.Upload(tensor.From(append([]float32(nil), res...), rows, hidden))
	widens := 0
	if fake {
		widens = fakeLaunches(o, "convert_bf16_f32")
	}
	o.LinearAdd(dst, a16, om)
	if fake {
		if n := fakeLaunches(o, "convert_bf16_f32"); n != widens {
			t.Errorf("LinearAdd widened the bf16 input (%d conversions)", n-widens)
		}
	}
	want = want[:0]
	for r := range rows {
		for i, v := range product(oq, scalesOf(om), a[r*48:(r+1)*48]) {
			want = append(want, float64(res[r*hidden+i])+v)
		}
	}
	check("LinearAdd(bf16 x)", o.ToHost(dst).HostData(), want)
	o.EndForward()
}
