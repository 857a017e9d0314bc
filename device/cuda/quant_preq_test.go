package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// qgemvPreqSuite: on o's device, for every compact format, the integer
// kernels give the same bits whether each block quantises x itself
// (QGemvCall.XQ 0, up to GemvMaxRows rows) or reads qquant_x's rows,
// copied into shared memory or read in place, with the RMSNorm fused
// and without, for a q/k/v-like group of three matrices (a pair of rows
// straddling two of them) and for gate and up with the SwiGLU epilogue;
// qquant_x's rows without the norm are the Go statement's bytes
// (qiBytes of qiStage); every m of rows rows of x. The values themselves
// are checked against the CPU reference by quantOpsSuite.
func qgemvPreqSuite(t *testing.T, o *ModelOps, in int, rowsList []int) {
	defer func(v bool, p int) { qgemvIntKernels, qgemvPreq = v, p }(qgemvIntKernels, qgemvPreq)
	qgemvIntKernels = true
	dev, k, s := o.dev, o.k, o.stream
	rng := rand.New(rand.NewPCG(24, 10))
	maxRows := slices.Max(rowsList)
	outs := []int{72, 40, 33}
	const inter = 48
	buf := func(bytes int) DevicePtr {
		b, err := dev.Mem.Alloc(bytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Mem.Free(b) })
		return b.Ptr
	}
	x := randn(rng, maxRows*in, 1)
	for i := 0; i < len(x); i += 61 {
		x[i] *= 50 // outliers, as residual streams have
	}
	norm := randn(rng, in, 1)
	xd, nd, xq := buf(4*len(x)), buf(4*in), buf(maxRows*qiRowBytesL(in, 3))
	ys := [3]DevicePtr{buf(4 * maxRows * outs[0]), buf(4 * maxRows * outs[1]), buf(4 * maxRows * outs[2])}
	h := buf(4 * maxRows * inter)
	if err := errors.Join(CopyHtoD(dev, xd, x), CopyHtoD(dev, nd, norm)); err != nil {
		t.Fatal(err)
	}
	download := func(p DevicePtr, n int) []float32 {
		v := make([]float32, n)
		if err := dev.StreamSync(s); err != nil {
			t.Fatal(err)
		}
		if err := CopyDtoH(dev, v, p); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, dt := range quantFormats {
		if in%tensor.BlockValues(dt) != 0 {
			continue
		}
		mats := make([]*Matrix, len(outs))
		for i, out := range outs {
			q, _ := quantWeight(t, rng, dt, out, in)
			var bias []float32
			if i == 1 {
				bias = randn(rng, out, 1)
			}
			m, err := o.Matrix(q, bias)
			if err != nil {
				t.Fatal(err)
			}
			mats[i] = m.(*Matrix)
		}
		qg, _ := quantWeight(t, rng, dt, inter, in)
		qu, _ := quantWeight(t, rng, dt, inter, in)
		gm, err := o.Matrix(qg, randn(rng, inter, 1))
		if err != nil {
			t.Fatal(err)
		}
		um, err := o.Matrix(qu, nil)
		if err != nil {
			t.Fatal(err)
		}
		gate, up := gm.(*Matrix), um.(*Matrix)
		for _, m := range rowsList {
			for _, stage := range []GemvStage{GemvRound, GemvRMSNorm} {
				what := fmt.Sprintf("%v m=%d stage=%d", dt, m, stage)
				var nptr DevicePtr
				if stage == GemvRMSNorm {
					nptr = nd
				}
				if err := k.QQuantX(s, xq, xd, stage, nptr, 1e-5, m, in, dt); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if stage == GemvRound {
					got := make([]byte, m*qiRowBytes(in, dt))
					if err := errors.Join(dev.StreamSync(s), CopyDtoH(dev, got, xq)); err != nil {
						t.Fatal(err)
					}
					for r := range m {
						want := qiBytes(dt, qiStage(dt, x[r*in:(r+1)*in]))
						row := got[r*len(want) : (r+1)*len(want)]
						for i := range row {
							if row[i] != want[i] {
								t.Fatalf("%s: qquant_x row %d byte %d = %#02x, the Go statement %#02x", what, r, i, row[i], want[i])
							}
						}
					}
				}
				// The three matrices in one launch, then gate and up.
				run := func(preq int, legacy bool) (y [3][]float32, hv []float32) {
					qgemvPreq = preq
					c := QGemvCall{X: xd, Staged: true, Stage: stage, Norm: nptr, Eps: 1e-5, M: m, Mats: mats, Y: ys[:]}
					if !legacy {
						c.XQ = xq
					}
					if err := k.QGemv(s, c); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					for i := range y {
						y[i] = download(ys[i], m*outs[i])
					}
					if stage != GemvRMSNorm {
						return y, nil
					}
					var sxq DevicePtr
					if !legacy {
						sxq = xq
					}
					if err := k.QGemvSwiGLU(s, xd, nd, 1e-5, m, gate, up, h, sxq); err != nil {
						t.Fatalf("%s swiglu: %v", what, err)
					}
					return y, download(h, m*inter)
				}
				same := func(a, b []float32) bool {
					return slices.EqualFunc(a, b, func(u, v float32) bool { return math.Float32bits(u) == math.Float32bits(v) })
				}
				y0, h0 := run(qgemvPreqStaged, false)
				y1, h1 := run(qgemvPreqInPlace, false)
				for i := range y0 {
					if !same(y0[i], y1[i]) {
						t.Errorf("%s: matrix %d from shared memory and in place differ", what, i)
					}
				}
				if !same(h0, h1) {
					t.Errorf("%s: swiglu from shared memory and in place differ", what)
				}
				if m <= GemvMaxRows && qgemvIntStages(m, in, dt) {
					y2, h2 := run(qgemvPreqStaged, true)
					for i := range y0 {
						if !same(y0[i], y2[i]) {
							t.Errorf("%s: matrix %d on qquant_x's x and on each block's own differ", what, i)
						}
					}
					if !same(h0, h2) {
						t.Errorf("%s: swiglu on qquant_x's x and on each block's own differ", what)
					}
				}
			}
		}
	}
}

// The suite on the emulated GPU: the launches' arguments and qquant_x's
// byte layout (quant_fake_test.go) through the Go side.
func TestFakeQGemvPreq(t *testing.T) {
	o := NewFakeModelOpsWith(t, ModelOpsOptions{WeightDType: BF16, KeepQuantized: true})
	defer func(l int) { qgemvLimbs = l }(qgemvLimbs)
	for limbs := 1; limbs <= 3; limbs++ {
		qgemvLimbs = limbs
		t.Run(fmt.Sprintf("l%d", limbs), func(t *testing.T) { qgemvPreqSuite(t, o, 512, []int{1, 2, 5, 8, 13, 32}) })
	}
}

// Where the integer launches find x: each block quantises it into shared
// memory (xq 0), copies qquant_x's rows there while they fit the 48 KiB
// less the static part, and reads them in place beyond (or always, with
// GOSLING_QGEMV_PREQ=inplace).
func TestQGemvIntArgs(t *testing.T) {
	defer func(p int) { qgemvPreq = p }(qgemvPreq)
	const xq = DevicePtr(1 << 20)
	for _, tc := range []struct {
		preq, m, in int
		xq          DevicePtr
		dt          DType
		staged      int
		smem        int
	}{
		{qgemvPreqStaged, 1, 4096, 0, tensor.AWQ4_G128, 1, 13824},
		{qgemvPreqStaged, 1, 4096, xq, tensor.AWQ4_G128, 1, 13824},
		{qgemvPreqStaged, 3, 4096, xq, tensor.AWQ4_G128, 1, 3 * 13824},
		{qgemvPreqStaged, 4, 4096, xq, tensor.AWQ4_G128, 0, 0}, // 55296 bytes: in place
		{qgemvPreqStaged, 1, 14336, xq, tensor.AWQ4_G128, 1, 48384},
		{qgemvPreqStaged, 2, 14336, xq, tensor.AWQ4_G128, 0, 0},
		{qgemvPreqStaged, 32, 256, xq, tensor.AWQ4_G128, 1, 32 * 864},
		{qgemvPreqInPlace, 1, 4096, xq, tensor.AWQ4_G128, 0, 0},
		{qgemvPreqInPlace, 1, 4096, 0, tensor.AWQ4_G128, 1, 13824},
		// GGUF's formats stage one limb (qgemvFormatLimbs): 44 bytes a unit.
		{qgemvPreqStaged, 1, 4096, xq, tensor.Q4_K, 1, 5632},
		{qgemvPreqStaged, 4, 4096, xq, tensor.Q6_K, 1, 4 * 5632},
		{qgemvPreqStaged, 2, 14336, xq, tensor.Q8_0, 1, 2 * 19712},
	} {
		qgemvPreq = tc.preq
		a, smem := qgemvIntArgs(qgemvArgs{M: tc.m, In: tc.in, Out0: 7}, tc.xq, tc.dt)
		if a.Staged != tc.staged || smem != tc.smem || a.Xq != tc.xq || a.Out0 != 7 || a.M != tc.m {
			t.Errorf("%v, preq %d, %d×%d, xq %#x: staged %d, %d bytes of shared memory (xq %#x), want %d and %d",
				tc.dt, tc.preq, tc.m, tc.in, tc.xq, a.Staged, smem, a.Xq, tc.staged, tc.smem)
		}
		if smem > qgemvIntMaxBytes {
			t.Errorf("%d bytes of shared memory past %d", smem, qgemvIntMaxBytes)
		}
	}
}

// NormLinearGroup over compact matrices of three formats in two unit
// layouts (Q4_K and Q5_K share one, Q6_K has its own): three launches,
// x normalised and quantised twice, once a layout, and each product
// against the CPU reference.
func TestFakeQuantNormGroupsLayouts(t *testing.T) {
	pinLimbs(t, 3)
	defer func(v bool, p int) { qgemvIntKernels, qgemvPreq = v, p }(qgemvIntKernels, qgemvPreq)
	qgemvIntKernels, qgemvPreq = true, qgemvPreqStaged
	o := NewFakeModelOpsWith(t, ModelOpsOptions{WeightDType: BF16, KeepQuantized: true})
	rng := rand.New(rand.NewPCG(24, 11))
	const in, rows, eps = 512, 3, 1e-5
	dts := []DType{tensor.Q4_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K}
	outs := []int{24, 8, 8, 16}
	var ms []device.Matrix
	var ws [][]float32
	for i, dt := range dts {
		q, w := quantWeight(t, rng, dt, outs[i], in)
		m, err := o.Matrix(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		ms, ws = append(ms, m), append(ws, w)
	}
	norm := randn(rng, in, 1)
	nv, err := o.Vector(norm)
	if err != nil {
		t.Fatal(err)
	}
	x := randn(rng, rows*in, 1)
	o.BeginForward()
	defer o.EndForward()
	quants, ints := fakeLaunches(o, "qquant_x_"), fakeLaunches(o, "qgemv_int_")
	ys := o.NormLinearGroup(o.Upload(tensor.From(x, rows, in)), nv, eps, ms...)
	if q, n := fakeLaunches(o, "qquant_x_")-quants, fakeLaunches(o, "qgemv_int_")-ints; q != 2 || n != 3 {
		t.Errorf("%d qquant_x and %d qgemv_int launches, want 2 (a layout each) and 3 (a format each)", q, n)
	}
	xn := rmsNormRef(x, norm, rows, in, eps)
	for i := range dts {
		want, mag := quantRef(xn, ws[i], nil, rows, outs[i], in)
		checkQuant(t, fmt.Sprintf("%v matrix %d", dts[i], i), o.ToHost(ys[i]).HostData(), want, mag, qgemvTol+1e-6)
	}
}
