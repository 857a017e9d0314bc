package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
)

// quantFormats are the formats kept compact, in a fixed order.
var quantFormats = []DType{tensor.Q8_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K, tensor.MXFP4, tensor.AWQ4_G32, tensor.AWQ4_G64, tensor.AWQ4_G128}

// The device layout holds exactly the stored bytes (plus at most 15 of
// alignment before the scale plane, and MXFP4's byte of padding a row of
// an odd count of blocks), every body row and the scale plane start
// 16-byte aligned, and rows that are not whole blocks are refused.
func TestQuantPlan(t *testing.T) {
	for _, dt := range quantFormats {
		bv := tensor.BlockValues(dt)
		for _, shape := range [][2]int{{1, bv}, {3, 2 * bv}, {7, 4096}, {128, 14336}} {
			p, err := planQuant(dt, shape[0], shape[1])
			if err != nil {
				t.Fatalf("%v %v: %v", dt, shape, err)
			}
			stored, _ := dt.RowBytes(shape[1])
			extra := p.Bytes() - shape[0]*stored
			if dt == tensor.MXFP4 && p.blocks%2 == 1 {
				extra -= shape[0]
			}
			if extra < 0 || extra > 15 || (p.scaleRow == 0 && extra != 0) {
				t.Errorf("%v %v: %d device bytes for %d stored", dt, shape, p.Bytes(), shape[0]*stored)
			}
			if p.bodyRow%16 != 0 || p.scaleOffset()%16 != 0 {
				t.Errorf("%v %v: body rows of %d bytes, scales at %d: not 16-byte aligned", dt, shape, p.bodyRow, p.scaleOffset())
			}
		}
		if _, err := planQuant(dt, 4, bv+16); err == nil || !strings.Contains(err.Error(), "whole blocks") {
			t.Errorf("%v: a row of %d values: %v", dt, bv+16, err)
		}
	}
	if _, err := planQuant(tensor.Q4_0, 1, 32); err == nil {
		t.Error("Q4_0 planned compact")
	}
}

// What a random llama-3.1-8b GGUF file (gosling model random) takes on
// the GPU: each matrix's compact layout, norms as float32 vectors, against
// the file's bytes and bf16's. The compact layouts hold the stored bytes
// and at most 15 of alignment each.
func TestQuantBytesLlama8B(t *testing.T) {
	for _, tc := range []struct {
		name string
		dt   DType
		mix  bool
	}{{"Q8_0", tensor.Q8_0, false}, {"Q4_K_M", tensor.Q4_K, true}} {
		o := random.Options{Shape: random.Presets["llama-3.1-8b"], Format: "gguf", DType: tc.dt, MixQ6K: tc.mix}
		var dev, stored, bf16 int64
		matrices := 0
		for _, w := range o.Tensors() {
			n := int64(1)
			for _, d := range w.Shape {
				n *= int64(d)
			}
			in := w.Shape[len(w.Shape)-1]
			rb, err := w.DType.RowBytes(in)
			if err != nil {
				t.Fatal(err)
			}
			stored += int64(rb) * (n / int64(in))
			bf16 += 2 * n
			switch {
			case len(w.Shape) == 1:
				dev += 4 * n // Vector
			case QuantOnDevice(w.DType):
				p, err := planQuant(w.DType, w.Shape[0], w.Shape[1])
				if err != nil {
					t.Fatal(err)
				}
				dev += int64(p.Bytes())
				matrices++
			default:
				t.Fatalf("%s: %v is not kept compact", w.Name, w.DType)
			}
		}
		if dev < stored || dev > stored+int64(15*matrices) {
			t.Errorf("%s: %d device bytes for %d stored in %d matrices", tc.name, dev, stored, matrices)
		}
		t.Logf("llama-3.1-8b %s: %.3f GB on the GPU (the file's tensors %.3f GB; bf16 %.3f GB, %.2f×)",
			tc.name, float64(dev)/1e9, float64(stored)/1e9, float64(bf16)/1e9, float64(bf16)/float64(dev))
	}
}

// pack moves each block's f16 scale to the scale plane and keeps the rest
// in order; unpack (the fake kernels' reader) restores the stored bytes.
func TestQuantPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, dt := range quantFormats {
		rows, in := 3, 2*tensor.BlockValues(dt)
		p, _ := planQuant(dt, rows, in)
		src := make([]byte, rows*p.blocks*tensor.BlockBytes(dt))
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		body, scales := make([]byte, rows*p.bodyRow), make([]byte, rows*p.scaleRow)
		p.pack(src, body, scales)
		if got := p.unpack(body, scales, rows); !bytes.Equal(got, src) {
			t.Errorf("%v: unpack(pack(blocks)) differs", dt)
		}
		switch dt {
		case tensor.Q8_0: // d | qs[32]
			if !bytes.Equal(scales[:2], src[:2]) || !bytes.Equal(body[:32], src[2:34]) || !bytes.Equal(body[32:64], src[36:68]) {
				t.Error("Q8_0: body is not the quants, scales not d")
			}
		case tensor.Q6_K: // ql | qh | sc | d
			if !bytes.Equal(scales[:2], src[208:210]) || !bytes.Equal(body[:208], src[:208]) || !bytes.Equal(body[208:416], src[210:418]) {
				t.Error("Q6_K: body is not ql|qh|sc, scales not d")
			}
		case tensor.MXFP4: // e | qs[16]
			if scales[1] != src[17] || !bytes.Equal(body[:16], src[1:17]) || !bytes.Equal(body[16:32], src[18:34]) {
				t.Error("MXFP4: body is not the codes, scales not e")
			}
		case tensor.AWQ4_G32, tensor.AWQ4_G64, tensor.AWQ4_G128: // s | z | qs
			g := tensor.BlockValues(dt)
			if !bytes.Equal(scales[:8], append(src[:4:4], src[4+g/2:8+g/2]...)) || !bytes.Equal(body[:g], append(src[4:4+g/2:4+g/2], src[8+g/2:8+g]...)) {
				t.Errorf("%v: body is not the quants, scales not s|z", dt)
			}
		default:
			if !bytes.Equal(body, src) || len(scales) != 0 {
				t.Errorf("%v: not uploaded as stored", dt)
			}
		}
	}
}

// pinLimbs stages x as limbs limbs (qgemvLimbs) for the rest of t: the
// tests that hold the integer kernels to float32's accuracy pin three
// (the default, one, is held to qiBound by TestFakeQuantOps and
// TestGPUQuantOps's l1 modes).
func pinLimbs(t testing.TB, limbs int) {
	prev := qgemvLimbs
	qgemvLimbs = limbs
	t.Cleanup(func() { qgemvLimbs = prev })
}

// qgemvSplit fills the GPU while every lane keeps two units of 32 values;
// checkQGemv refuses what the kernel cannot take.
func TestQGemvShape(t *testing.T) {
	pinLimbs(t, 3)
	for _, tc := range []struct{ rows, in, ks int }{
		{6144, 4096, 2},   // q, k, v of Llama-3-8B: 3072 pairs
		{28672, 4096, 1},  // gate and up: pairs enough
		{4096, 14336, 4},  // down: 448 units a row
		{64, 512, 1},      // 16 units: one lane each
		{128256, 4096, 1}, // the output layer
	} {
		if ks := qgemvSplit(tc.rows, tc.in); ks != tc.ks {
			t.Errorf("qgemvSplit(%d, %d) = %d, want %d", tc.rows, tc.in, ks, tc.ks)
		}
	}
	q4 := &Matrix{out: 8, in: 256, dtype: tensor.Q4_K, quant: &quantMatrix{}}
	q6 := &Matrix{out: 8, in: 256, dtype: tensor.Q6_K, quant: &quantMatrix{}}
	bf := &Matrix{out: 8, in: 256, dtype: BF16}
	ok := QGemvCall{X: 4096, M: 2, Mats: []*Matrix{q4}, Y: []DevicePtr{64}}
	for _, tc := range []struct {
		want string
		edit func(c *QGemvCall)
	}{
		{"", func(c *QGemvCall) {}},
		{"beside", func(c *QGemvCall) { c.Mats, c.Y = []*Matrix{q4, q6}, []DevicePtr{64, 64} }},
		{"beside", func(c *QGemvCall) { c.Mats, c.Y = []*Matrix{q4, bf}, []DevicePtr{64, 64} }},
		{"matrices", func(c *QGemvCall) { c.Y = nil }},
		{"rows", func(c *QGemvCall) { c.M = 9 }},
		{"shared memory", func(c *QGemvCall) {
			c.Staged, c.M, c.Mats[0] = true, 8, &Matrix{out: 8, in: 2048, dtype: tensor.Q4_K, quant: &quantMatrix{}}
		}},
		{"operand", func(c *QGemvCall) { c.Staged, c.Stage = true, GemvRMSNorm }},
		{"staged", func(c *QGemvCall) { c.Stage, c.Norm = GemvRMSNorm, 64 }},
		{"aligned", func(c *QGemvCall) { c.X = 4100 }},
	} {
		c := ok
		c.Mats = append([]*Matrix(nil), ok.Mats...)
		tc.edit(&c)
		err := checkQGemv(c)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
}

// quantWeight is a [out, in] weight in dt quantised from unit normals,
// and its dequantised values (the CPU reference).
func quantWeight(t testing.TB, rng *rand.Rand, dt DType, out, in int) (tensor.Weight, []float32) {
	t.Helper()
	vals := randn(rng, out*in, 1)
	q, err := tensor.Convert(tensor.FromFloat32("w", vals, out, in), dt)
	if err != nil {
		t.Fatal(err)
	}
	return q, weightF32(t, q)
}

// weightF32 is w's values as float32 (dequantised by the CPU reference).
func weightF32(t testing.TB, w tensor.Weight) []float32 {
	t.Helper()
	ref, err := tensor.Convert(w, tensor.F32)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, len(ref.Data)/4)
	for i := range vals {
		vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(ref.Data[4*i:]))
	}
	return vals
}

// quantRef is x·Wᵀ + bias in float64 for rows of x, and per output the
// magnitude Σ|w·x| + |bias| its rounding errors scale with.
func quantRef(x, w, bias []float32, rows, out, in int) (y, mag []float64) {
	y, mag = make([]float64, rows*out), make([]float64, rows*out)
	for r := range rows {
		for o := range out {
			var s, m float64
			for i := range in {
				p := float64(w[o*in+i]) * float64(x[r*in+i])
				s += p
				m += math.Abs(p)
			}
			if bias != nil {
				s += float64(bias[o])
				m += math.Abs(float64(bias[o]))
			}
			y[r*out+o], mag[r*out+o] = s, m
		}
	}
	return y, mag
}

// Tolerances, relative to Σ|w·x|. qgemv sums in float32: 16 products a
// run, then the runs of a lane, the lanes and the warps of a row, each
// rounding at 2⁻²⁴ of a partial sum, and a run's minimum subtracts
// b·Σx, whose terms can be a few times |w·x|: well under 1e-5 of
// Σ|w·x| for a row of 14336; 2e-5 leaves margin. The widened path rounds
// x and W to bf16 (2⁻⁹ each, so 2⁻⁸ per product) before a float32 GEMM.
const (
	qgemvTol = 2e-5
	qwideTol = 5e-3
)

func checkQuant(t testing.TB, what string, got []float32, want, mag []float64, tol float64) {
	t.Helper()
	checkQuantBound(t, what, got, want, mag, tol, nil)
}

// checkQuantBound is checkQuant with an absolute bound per value added
// (nil: none), qiBound's for x staged as fewer than three limbs.
func checkQuantBound(t testing.TB, what string, got []float32, want, mag []float64, tol float64, bound []float64) {
	t.Helper()
	bad, worst := 0, 0.0
	for i := range want {
		d := math.Abs(float64(got[i]) - want[i])
		if e := d / (mag[i] + 1e-30); e > worst {
			worst = e
		}
		b := 0.0
		if bound != nil {
			b = bound[i]
		}
		if !(d <= tol*mag[i]+b+1e-30) {
			if bad++; bad <= 3 {
				t.Errorf("%s[%d] = %g, want %g (|Δ| %.3g, Σ|w·x| %.3g)", what, i, got[i], want[i], d, mag[i])
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d values off", what, bad, len(want))
	}
	t.Logf("%s: worst |Δ| / Σ|w·x| = %.2e", what, worst)
}

// quantShapes are the suite's matrices: out, in per test case.
type quantShape struct {
	outs  []int
	in    int
	rows  []int
	inter int // > 0: GatedMLPAdd with gate and up [inter, in], down [in, inter]
}

// quantOpsSuite checks ModelOps over compact matrices against the CPU's
// dequantised reference: the bytes held, Embed (exact), the widening
// kernel (exact, bf16), Linear, LinearGroup (one qgemv launch for a
// group), LinearAdd and NormLinearGroup for each batch size, decode
// sizes on qgemv (staged or not) and larger ones widened for the GEMM.
func quantOpsSuite(t *testing.T, o *ModelOps, shapes []quantShape) {
	rng := rand.New(rand.NewPCG(24, 3))
	// Each format alone, then Q4_K_M's mix (Q6_K among Q4_K: launches
	// split by format).
	var mixes [][]DType
	for _, dt := range quantFormats {
		mixes = append(mixes, []DType{dt})
	}
	mixes = append(mixes, []DType{tensor.Q4_K, tensor.Q6_K})
	for _, mix := range mixes {
		for _, sh := range shapes {
			subtest(t, fmt.Sprintf("%v/%v×%d", mix, sh.outs, sh.in), func(t *testing.T) {
				in := sh.in
				var mats []*Matrix
				var ws, biases [][]float32
				for i, out := range sh.outs {
					dt := mix[i%len(mix)]
					q, w := quantWeight(t, rng, dt, out, in)
					var bias []float32
					if i%2 == 1 {
						bias = randn(rng, out, 1)
					}
					before := o.WeightBytes()
					m, err := o.Matrix(q, bias)
					if err != nil {
						t.Fatal(err)
					}
					p, _ := planQuant(dt, out, in)
					if held := o.WeightBytes() - before; held != int64(p.Bytes()+4*len(bias)) {
						t.Errorf("matrix %d holds %d bytes, want %d (compact) + %d (bias)", i, held, p.Bytes(), 4*len(bias))
					}
					mats, ws, biases = append(mats, m.(*Matrix)), append(ws, w), append(biases, bias)
				}
				o.BeginForward()
				defer o.EndForward()
				// Embed: rows of the first matrix, exactly; zeros outside.
				m0, out0 := mats[0], sh.outs[0]
				ids := []int32{int32(out0 - 1), 0, -1, int32(out0), 1}
				e := o.ToHost(o.Embed(m0, ids)).HostData()
				for j, id := range ids {
					for i := range in {
						want := float32(0)
						if id >= 0 && int(id) < out0 {
							want = ws[0][int(id)*in+i]
						}
						if g := e[j*in+i]; math.Float32bits(g) != math.Float32bits(want) {
							t.Fatalf("Embed id %d [%d] = %g, want %g", id, i, g, want)
						}
					}
				}
				// The widening kernel: every value, rounded to bf16 once.
				o.do("widen", func() error {
					wb, err := o.dev.Mem.Alloc(2 * (out0 - 1) * in)
					if err != nil {
						return err
					}
					defer o.dev.Mem.Free(wb)
					if err := o.k.QWidenBF16(o.stream, wb.Ptr, m0, 1, out0); err != nil {
						return err
					}
					bits := make([]uint16, (out0-1)*in)
					if err := syncDownload(o, bits, wb.Ptr); err != nil {
						return err
					}
					for i, b := range bits {
						if want := tensor.F32ToBF16(ws[0][in+i]); b != want {
							return fmt.Errorf("widened [%d] = %#04x, want %#04x", in+i, b, want)
						}
					}
					return nil
				})
				norm := randn(rng, in, 1)
				nv, err := o.Vector(norm)
				if err != nil {
					t.Fatal(err)
				}
				if sh.inter > 0 {
					quantMLPCheck(t, o, rng, mix[0], mix[len(mix)-1], in, sh.inter, sh.rows, norm, nv)
				}
				for _, rows := range sh.rows {
					tol := qgemvTol
					if rows > quantMaxRows() {
						tol = qwideTol
					}
					x := randn(rng, rows*in, 1)
					xt := tensor.From(x, rows, in)
					dm := make([]device.Matrix, len(mats))
					for i, m := range mats {
						dm[i] = m
					}
					ys := o.LinearGroup(o.Upload(xt), dm...)
					for i, out := range sh.outs {
						want, mag := quantRef(x, ws[i], biases[i], rows, out, in)
						checkQuantBound(t, fmt.Sprintf("rows %d: LinearGroup %d", rows, i), o.ToHost(ys[i]).HostData(), want, mag, tol,
							quantIntBound(mix[i%len(mix)], x, ws[i], rows, out, in))
					}
					// LinearAdd onto a residual of the last matrix's shape.
					last := len(mats) - 1
					res := randn(rng, rows*sh.outs[last], 1)
					dst := o.Upload(tensor.From(res, rows, sh.outs[last]))
					o.LinearAdd(dst, o.Upload(xt), mats[last])
					want, mag := quantRef(x, ws[last], biases[last], rows, sh.outs[last], in)
					for i := range want {
						want[i] += float64(res[i])
						mag[i] += math.Abs(float64(res[i]))
					}
					checkQuantBound(t, fmt.Sprintf("rows %d: LinearAdd", rows), o.ToHost(dst).HostData(), want, mag, tol,
						quantIntBound(mix[last%len(mix)], x, ws[last], rows, sh.outs[last], in))
					// NormLinearGroup: x / rms(x) · norm through every matrix.
					const eps = 1e-5
					xn := rmsNormRef(x, norm, rows, in, eps)
					ns := o.NormLinearGroup(o.Upload(xt), nv, eps, dm...)
					for i, out := range sh.outs {
						want, mag := quantRef(xn, ws[i], biases[i], rows, out, in)
						// the normalised x's own float32 rounding adds 2⁻²⁴ a product
						checkQuantBound(t, fmt.Sprintf("rows %d: NormLinearGroup %d", rows, i), o.ToHost(ns[i]).HostData(), want, mag, tol+1e-6,
							quantIntBound(mix[i%len(mix)], xn, ws[i], rows, out, in))
					}
				}
			})
		}
	}
}

// quantIntBound is qiBound for y [rows, out] = x·Wᵀ through a compact
// matrix in dt where the integer kernels run it (a decode batch on
// pre-quantised x, or staged in each block) with fewer than three limbs,
// else nil: the float kernels, the widened GEMM and three limbs are held
// to their tolerances alone.
func quantIntBound(dt DType, x, w []float32, rows, out, in int) []float64 {
	if !qgemvIntKernels || rows > quantMaxRows() || !(quantPreq() || qgemvIntStages(rows, in, dt)) {
		return nil
	}
	return qiBound(dt, x, w, rows, out, in, qgemvFormatLimbs(dt))
}

// rmsNormRef is x / rms(x) · norm per row, in float64 rounded to float32.
func rmsNormRef(x, norm []float32, rows, in int, eps float64) []float32 {
	xn := make([]float32, len(x))
	for r := range rows {
		var ss float64
		for _, v := range x[r*in : (r+1)*in] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(in)+eps)
		for i := range in {
			xn[r*in+i] = float32(float64(x[r*in+i]) * inv * float64(norm[i]))
		}
	}
	return xn
}

// quantMLPCheck: GatedMLPAdd over compact gate and up (format gu, with
// biases) and down (format dn), x += down(silu(gate(xn))·up(xn)), for
// each batch size: qgemv_swiglu and a qgemv adding into x for decode
// sizes, the unfused ops beyond. h carries gate's and up's rounding into
// down, so the bound is three times a product's.
func quantMLPCheck(t *testing.T, o *ModelOps, rng *rand.Rand, gu, dn DType, in, inter int, rowsList []int, norm []float32, nv device.Vector) {
	t.Helper()
	qg, wg := quantWeight(t, rng, gu, inter, in)
	qu, wu := quantWeight(t, rng, gu, inter, in)
	qd, wd := quantWeight(t, rng, dn, in, inter)
	bg, bu := randn(rng, inter, 1), randn(rng, inter, 1)
	g, err := o.Matrix(qg, bg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := o.Matrix(qu, bu)
	if err != nil {
		t.Fatal(err)
	}
	d, err := o.Matrix(qd, nil)
	if err != nil {
		t.Fatal(err)
	}
	const eps = 1e-5
	for _, rows := range rowsList {
		tol := qgemvTol
		if rows > quantMaxRows() {
			tol = qwideTol
		}
		x := randn(rng, rows*in, 1)
		xn := rmsNormRef(x, norm, rows, in, eps)
		gv, _ := quantRef(xn, wg, bg, rows, inter, in)
		uv, _ := quantRef(xn, wu, bu, rows, inter, in)
		h := make([]float32, rows*inter)
		for i := range h {
			h[i] = float32(gv[i] / (1 + math.Exp(-gv[i])) * uv[i])
		}
		want, mag := quantRef(h, wd, nil, rows, in, inter)
		for i := range want {
			want[i] += float64(x[i])
			mag[i] += math.Abs(float64(x[i]))
		}
		// With fewer than three limbs: down's own staging bound over h, and
		// gate's and up's (Bg, Bu) carried into h: silu is 1.1-Lipschitz,
		// so |Δh| <= 1.1·Bg·(|u| + Bu) + |silu(g)|·Bu.
		var bound []float64
		if bg := quantIntBound(gu, xn, wg, rows, inter, in); bg != nil {
			bu := quantIntBound(gu, xn, wu, rows, inter, in)
			bound = quantIntBound(dn, h, wd, rows, in, inter)
			if bound == nil { // down on the float kernels
				bound = make([]float64, rows*in)
			}
			dh := make([]float64, rows*inter)
			for i := range dh {
				sg := gv[i] / (1 + math.Exp(-gv[i]))
				dh[i] = 1.1*bg[i]*(math.Abs(uv[i])+bu[i]) + math.Abs(sg)*bu[i]
			}
			for r := range rows {
				for o := range in {
					var s float64
					for j := range inter {
						s += math.Abs(float64(wd[o*inter+j])) * dh[r*inter+j]
					}
					bound[r*in+o] += s
				}
			}
		}
		xt := o.Upload(tensor.From(x, rows, in))
		o.GatedMLPAdd(xt, nv, eps, g, u, d)
		checkQuantBound(t, fmt.Sprintf("rows %d: GatedMLPAdd", rows), o.ToHost(xt).HostData(), want, mag, 3*tol, bound)
	}
}

// syncDownload copies device memory at src to dst once o's stream has
// run what was enqueued.
func syncDownload[T any](o *ModelOps, dst []T, src DevicePtr) error {
	if err := o.dev.StreamSync(o.stream); err != nil {
		return err
	}
	return CopyDtoH(o.dev, dst, src)
}

// The suite on the emulated GPU: the Go side (layout, launches, the
// paths each batch size takes) against the CPU reference, with the
// integer decode kernels (quant_int_test.go's statement of them) on x
// quantised once by qquant_x and read from shared memory or in place
// (GOSLING_QGEMV_PREQ=1, inplace), on x each block quantises
// (GOSLING_QGEMV_PREQ=0), and with the float ones (GOSLING_QGEMV=float).
func TestFakeQuantOps(t *testing.T) {
	defer func(v bool, p, r, l int) { qgemvIntKernels, qgemvPreq, qgemvIntRows, qgemvLimbs = v, p, r, l }(qgemvIntKernels, qgemvPreq, qgemvIntRows, qgemvLimbs)
	qgemvIntRows = qgemvIntMaxRows // every batch the kernels take (16 by default)
	for _, mode := range []struct {
		name       string
		intKernels bool
		preq       int
		limbs      int
	}{
		{"int/preq", true, qgemvPreqStaged, 3},
		{"int/preq-inplace", true, qgemvPreqInPlace, 3},
		{"int/block-staged", true, qgemvPreqOff, 3},
		{"float", false, qgemvPreqStaged, 3},
		// GOSLING_QGEMV_LIMBS=1 and 2, held to qiBound besides.
		{"int/preq/l1", true, qgemvPreqStaged, 1},
		{"int/block-staged/l1", true, qgemvPreqOff, 1},
		{"int/preq/l2", true, qgemvPreqStaged, 2},
	} {
		qgemvIntKernels, qgemvPreq, qgemvLimbs = mode.intKernels, mode.preq, mode.limbs
		t.Run(mode.name, func(t *testing.T) {
			o := NewFakeModelOpsWith(t, ModelOpsOptions{WeightDType: BF16, KeepQuantized: true})
			shapes := []quantShape{
				{outs: []int{33, 16, 15}, in: 512, rows: []int{1, 2, 8, 12, 40}, inter: 768},
				{outs: []int{20}, in: 768, rows: []int{3, 9, 32}},
			}
			if mode.intKernels && mode.preq != qgemvPreqInPlace {
				// Two rows too wide for shared memory: the float kernels
				// where each block would quantise x, qquant_x's x read in
				// place otherwise.
				shapes = append(shapes, quantShape{outs: []int{6}, in: 14336, rows: []int{2}, inter: 256})
			}
			quantOpsSuite(t, o, shapes)
			ints, swigluInts := fakeLaunches(o, "qgemv_int_"), fakeLaunches(o, "qgemv_swiglu_int_")
			swigluFloats := fakeLaunches(o, "qgemv_swiglu_") - swigluInts
			floats := fakeLaunches(o, "qgemv_") - ints - swigluInts - swigluFloats
			quants, widens := fakeLaunches(o, "qquant_x_"), fakeLaunches(o, "qwiden_bf16_")
			if l := fmt.Sprintf("_l%d_", mode.limbs); mode.intKernels && fakeLaunchesWith(o, "qgemv_", l) != ints+swigluInts {
				t.Errorf("%d of %d integer launches with %d limbs", fakeLaunchesWith(o, "qgemv_", l), ints+swigluInts, mode.limbs)
			}
			var ok bool
			switch {
			case !mode.intKernels:
				ok = ints+swigluInts+quants == 0 && floats > 0 && swigluFloats > 0
			case mode.preq != qgemvPreqOff:
				// Every batch up to qgemvIntMaxRows on the integer kernels;
				// 40 rows widened.
				ok = ints > 0 && swigluInts > 0 && quants > 0 && floats+swigluFloats == 0
			default:
				// Rows past what a block's shared memory stages take the
				// float kernels (unstaged, the norm a launch of its own:
				// x staged as float32 takes more room than as integers);
				// with one limb every batch here fits as integers.
				ok = ints > 0 && swigluInts > 0 && quants == 0 && (floats > 0) == (mode.limbs == 3)
			}
			if !ok || widens == 0 {
				t.Errorf("%d qgemv_int and %d qgemv_swiglu_int launches, %d and %d float, %d qquant_x, %d qwiden",
					ints, swigluInts, floats, swigluFloats, quants, widens)
			}
		})
	}
	// The widened path in slices of 7 rows (the last one shorter).
	defer func(b int) { quantWidenBytes = b }(quantWidenBytes)
	quantWidenBytes = 2 * 7 * 512
	o := NewFakeModelOpsWith(t, ModelOpsOptions{WeightDType: BF16, KeepQuantized: true})
	quantOpsSuite(t, o, []quantShape{{outs: []int{33, 16}, in: 512, rows: []int{40}}})
}
