package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGPUGemvBulk runs the bulk-copy kernels (gemv_bulk_*) against a
// float64 host reference of the same rounded operands, over the shapes
// that exercise their edges: a last piece shorter than GB_PIECE (in not
// a multiple of it), a last round of fewer than GEMV_WARPS tasks, rows
// numbered through three matrices, biases, accumulation, every row count
// up to GemvMaxRows, x direct or staged (rounded, RMS-normalised), and
// gate/up with the gated activation; bf16 and f16.
func TestGPUGemvBulk(t *testing.T) {
	dev, k := needKernels(t)
	if dev.Info.Arch() < 90 {
		t.Skipf("gemv_bulk needs sm_90 (this GPU is sm_%d)", dev.Info.Arch())
	}
	k.gemvBulk = 1
	defer func() { k.gemvBulk = 0 }()
	rng := rand.New(rand.NewPCG(7, 11))
	type shape struct {
		outs []int
		in   int
	}
	shapes := []shape{{[]int{1}, 8}, {[]int{37}, 1032}, {[]int{96, 16, 16}, 2048}, {[]int{203, 5, 77}, 4104}, {[]int{1000}, 5000}}
	for _, dt := range []DType{BF16, F16} {
		for _, sh := range shapes {
			for _, m := range []int{1, 2, 3, 5, 8} {
				for _, mode := range []string{"direct", "round", "norm", "swiglu"} {
					if mode == "swiglu" && len(sh.outs) != 1 {
						continue
					}
					name := fmt.Sprintf("%v/%v/in%d/m%d/%s", dt, sh.outs, sh.in, m, mode)
					t.Run(name, func(t *testing.T) {
						if _, ok := k.gemvBulkLaunch(dt, m, sh.in, sh.outs[0], 1); !ok || mode != "direct" && !gemvStages(m, sh.in, dt) {
							t.Skip("past the shared memory the calls allow")
						}
						gemvBulkCheck(t, dev, k, rng, dt, sh.outs, sh.in, m, mode)
					})
				}
			}
		}
	}
}

func gemvBulkCheck(t *testing.T, dev *Device, k *Kernels, rng *rand.Rand, dt DType, outs []int, in, m int, mode string) {
	x := randn(rng, m*in, 1)
	norm := randn(rng, in, 1)
	const eps = 1e-5
	// xs is x as the kernel multiplies it: normalised, rounded to dt.
	xs := make([]float64, m*in)
	for r := range m {
		inv := 1.0
		if mode == "norm" || mode == "swiglu" {
			ss := 0.0
			for _, v := range x[r*in : (r+1)*in] {
				ss += float64(v) * float64(v)
			}
			inv = 1 / math.Sqrt(ss/float64(in)+eps)
		}
		for i := range in {
			v := float64(x[r*in+i])
			if mode == "norm" || mode == "swiglu" {
				v = float64(float32(float32(v)*float32(inv)) * norm[i])
			}
			xs[r*in+i] = float64(round(float32(v), dt))
		}
	}
	dot := func(w []float32, r int) float64 {
		s := 0.0
		for i, v := range w {
			s += float64(v) * xs[r*in+i]
		}
		return s
	}
	xdt := F32
	if mode == "direct" {
		xdt = dt
	}
	dx := upload(t, dev, x, xdt)
	dn := upload(t, dev, norm, F32)
	if mode == "swiglu" {
		inter := outs[0]
		wg, wu := roundAll(randn(rng, inter*in, 0.05), dt), roundAll(randn(rng, inter*in, 0.05), dt)
		bg, bu := randn(rng, inter, 0.1), randn(rng, inter, 0.1)
		h := alloc(t, dev, 2*m*inter)
		c := GemvSwiGLUCall{X: dx, Norm: dn, Eps: eps, M: m, In: in, WDType: dt, H: h,
			Gate: GemvTarget{W: upload(t, dev, wg, dt), Bias: upload(t, dev, bg, F32), Out: inter},
			Up:   GemvTarget{W: upload(t, dev, wu, dt), Bias: upload(t, dev, bu, F32), Out: inter}}
		if err := k.GemvSwiGLU(dev.Stream, c); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, m*inter)
		for r := range m {
			for j := range inter {
				g := dot(wg[j*in:(j+1)*in], r) + float64(bg[j])
				u := dot(wu[j*in:(j+1)*in], r) + float64(bu[j])
				want[r*inter+j] = round(float32(g/(1+math.Exp(-g))*u), dt)
			}
		}
		atol, rtol := tolerance(dt)
		compare(t, "h", download(t, dev, h, m*inter, dt), want, atol, rtol)
		return
	}
	c := GemvCall{X: dx, M: m, In: in, WDType: dt, Accumulate: true, Targets: nil}
	switch mode {
	case "round":
		c.Staged = true
	case "norm":
		c.Staged, c.Stage, c.Norm, c.Eps = true, GemvRMSNorm, dn, eps
	}
	var ws, bs, y0s [][]float32
	for i, out := range outs {
		w := roundAll(randn(rng, out*in, 0.05), dt)
		y0 := randn(rng, m*out, 1)
		var b []float32
		tg := GemvTarget{W: upload(t, dev, w, dt), Y: upload(t, dev, y0, F32), Out: out}
		if i != 1 { // the middle matrix without a bias
			b = randn(rng, out, 0.1)
			tg.Bias = upload(t, dev, b, F32)
		}
		ws, bs, y0s = append(ws, w), append(bs, b), append(y0s, y0)
		c.Targets = append(c.Targets, tg)
	}
	if err := k.Gemv(dev.Stream, c); err != nil {
		t.Fatal(err)
	}
	for i, out := range outs {
		want := make([]float32, m*out)
		for r := range m {
			for j := range out {
				v := dot(ws[i][j*in:(j+1)*in], r) + float64(y0s[i][r*out+j])
				if bs[i] != nil {
					v += float64(bs[i][j])
				}
				want[r*out+j] = float32(v)
			}
		}
		compare(t, fmt.Sprintf("y%d", i), download(t, dev, c.Targets[i].Y, m*out, F32), want, 1e-4, 1e-4)
	}
}
