package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/gosling-ai/gosling/tensor"
)

// The compact-matrix kernels of kernels/quant.cu on fakeGPU: each reads
// the device layout back into stored GGUF blocks (quantPlan.unpack) and
// dequantises them with the CPU reference, so what the emulation checks
// is the layout and ModelOps' use of the kernels. qgemv sums w·x in
// float32 per row; qwiden rounds to bf16 as the kernel stores it.

// unpack is pack's inverse: rows of device body and scales back into
// stored blocks.
func (p quantPlan) unpack(body, scales []byte, rows int) []byte {
	l := quantLayouts[p.dt]
	stored := tensor.BlockBytes(p.dt)
	out := make([]byte, rows*p.blocks*stored)
	if l.scaleAt < 0 {
		copy(out, body)
		return out
	}
	for b := range rows * p.blocks {
		blk := out[b*stored : (b+1)*stored]
		copy(blk[l.scaleAt:], scales[p.scaleAt(b):p.scaleAt(b)+l.scaleBytes])
		if l.scaleAt == 0 {
			copy(blk[l.scaleBytes:], body[b*l.body:(b+1)*l.body])
		} else {
			copy(blk, body[b*l.body:(b+1)*l.body])
		}
	}
	return out
}

// fakeQuantStored reads rows [r0, r1) of a compact matrix whose body and
// scale plane start at w and s (row 0) back as stored blocks.
func (f *fakeGPU) fakeQuantStored(dt DType, w, s DevicePtr, r0, r1, in int) ([]byte, error) {
	p, err := planQuant(dt, r1, in)
	if err != nil {
		return nil, err
	}
	n := r1 - r0
	body, err := f.resolve(w.Add(r0*p.bodyRow), n*p.bodyRow)
	if err != nil {
		return nil, err
	}
	var scales []byte
	if p.scaleRow > 0 {
		if scales, err = f.resolve(s.Add(r0*p.scaleRow), n*p.scaleRow); err != nil {
			return nil, err
		}
	}
	return p.unpack(body, scales, n), nil
}

// fakeQuantRows dequantises rows [r0, r1) of a compact matrix whose body
// and scale plane start at w and s (row 0).
func (f *fakeGPU) fakeQuantRows(dt DType, w, s DevicePtr, r0, r1, in int) ([]float32, error) {
	stored, err := f.fakeQuantStored(dt, w, s, r0, r1, in)
	if err != nil {
		return nil, err
	}
	n := r1 - r0
	wt, err := tensor.Convert(tensor.Weight{Name: "fake", DType: dt, Shape: []int{n, in}, Data: stored}, tensor.F32)
	if err != nil {
		return nil, err
	}
	vals := make([]float32, n*in)
	for i := range vals {
		vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(wt.Data[4*i:]))
	}
	return vals, nil
}

// fakeLimbs is the limbs an integer kernel's name says (_l<L>_).
func fakeLimbs(name string) int {
	for l := 1; l <= 3; l++ {
		if strings.Contains(name, fmt.Sprintf("_l%d_", l)) {
			return l
		}
	}
	panic("fake: no limbs in " + name)
}

func fakeQuantDType(name string) DType {
	for dt := range quantLayouts {
		if strings.HasSuffix(name, "_"+quantName(dt)) {
			return dt
		}
	}
	panic("fake: no format in " + name)
}

func init() {
	for dt := range quantLayouts {
		q := quantName(dt)
		fakeStaticSmem[nameQGemv(q)] = gemvStaticSmem
		// qgemv(x, norm, eps, mode, staged, accumulate, m, in, ks, then y,
		// w, s, bias, out for three matrices).
		fakeKernels[nameQGemv(q)] = fakeKernel{24, func(f *fakeGPU, name string, _ [3]int, a fakeArgs) error {
			mode, staged, accumulate, m, in := a.i32(3), a.i32(4) != 0, a.i32(5) != 0, a.i32(6), a.i32(7)
			if !staged && mode != 0 {
				return errors.New("a norm without staging")
			}
			x, err := fakeGemvX(f, a.ptr(0), a.ptr(1), a.f32(2), mode == 1, m, in, F32)
			if err != nil {
				return err
			}
			for g := range 3 {
				base := 9 + 5*g
				out := a.i32(base + 4)
				if out == 0 {
					continue
				}
				y, err := f.f32s(a.ptr(base), m*out)
				w, err2 := f.fakeQuantRows(fakeQuantDType(name), a.ptr(base+1), a.ptr(base+2), 0, out, in)
				if err := errors.Join(err, err2); err != nil {
					return err
				}
				var bias []float32
				if a.ptr(base+3) != 0 {
					if bias, err = f.f32s(a.ptr(base+3), out); err != nil {
						return err
					}
				}
				fakeGemvOut(y, x, w, bias, m, out, in, accumulate)
			}
			return nil
		}}
		// qgemv_swiglu: the qgemv arguments; y0 = silu(xn·w0ᵀ + b0)·(xn·w1ᵀ + b1).
		fakeStaticSmem[nameQGemvSwiGLU(q)] = gemvStaticSmem
		fakeKernels[nameQGemvSwiGLU(q)] = fakeKernel{24, func(f *fakeGPU, name string, _ [3]int, a fakeArgs) error {
			m, in, inter := a.i32(6), a.i32(7), a.i32(13)
			if a.i32(3) != 1 || a.i32(4) != 1 || a.i32(18) != inter {
				return errors.New("swiglu wants staged, normalised x and gate and up of one height")
			}
			x, err := fakeGemvX(f, a.ptr(0), a.ptr(1), a.f32(2), true, m, in, F32)
			if err != nil {
				return err
			}
			var gu [2][]float32
			for i, base := range []int{9, 14} {
				y := make([]float32, m*inter)
				w, err := f.fakeQuantRows(fakeQuantDType(name), a.ptr(base+1), a.ptr(base+2), 0, inter, in)
				if err != nil {
					return err
				}
				var bias []float32
				if a.ptr(base+3) != 0 {
					if bias, err = f.f32s(a.ptr(base+3), inter); err != nil {
						return err
					}
				}
				fakeGemvOut(y, x, w, bias, m, inter, in, false)
				gu[i] = y
			}
			return fakeSwiGLUOut(f, a.ptr(9), gu[0], gu[1])
		}}
		for l := 1; l <= 3; l++ {
			fakeStaticSmem[nameQGemvInt(l, q)] = gemvStaticSmem
			fakeKernels[nameQGemvInt(l, q)] = fakeKernel{25, fakeQGemvInt}
			fakeStaticSmem[nameQGemvSwiGLUInt(l, q)] = gemvStaticSmem
			fakeKernels[nameQGemvSwiGLUInt(l, q)] = fakeKernel{25, fakeQGemvInt}
			for _, name := range []string{nameQGemvInt1(l, q), nameQGemvSwiGLUInt1(l, q)} {
				fakeStaticSmem[name] = gemvStaticSmem
				fakeKernels[name] = fakeKernel{25, fakeQGemvInt1}
			}
			fakeKernels[nameQQuantX(l, q)] = fakeKernel{7, fakeQQuantX}
		}
		fakeKernels[nameMoEQGemv(q)] = fakeKernel{8, fakeMoEQGemv}
		// qwiden_bf16(wb, w, s, out, in)
		fakeKernels[nameQWidenBF16(q)] = fakeKernel{5, func(f *fakeGPU, name string, _ [3]int, a fakeArgs) error {
			out, in := a.i32(3), a.i32(4)
			w, err := f.fakeQuantRows(fakeQuantDType(name), a.ptr(1), a.ptr(2), 0, out, in)
			if err != nil {
				return err
			}
			return f.storeAny(a.ptr(0), w, BF16)
		}}
		// qembed(out, w, s, ids, in, vocab), one block an id
		fakeKernels[nameQEmbed(q)] = fakeKernel{6, func(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
			n, in, vocab := grid[0], a.i32(4), a.i32(5)
			ids, err := f.i32s(a.ptr(3), n)
			out, err2 := f.f32s(a.ptr(0), n*in)
			if err := errors.Join(err, err2); err != nil {
				return err
			}
			for t, id := range ids {
				o := out[t*in : (t+1)*in]
				if id < 0 || int(id) >= vocab {
					clear(o)
					continue
				}
				// the row alone: the scale plane of one row starts at row id
				p, _ := planQuant(fakeQuantDType(name), vocab, in)
				row, err := f.fakeQuantRows(p.dt, a.ptr(1).Add(int(id)*p.bodyRow), a.ptr(2).Add(int(id)*p.scaleRow), 0, 1, in)
				if err != nil {
					return err
				}
				copy(o, row)
			}
			return nil
		}}
	}
}

// moe_qgemv_<q>(y, x, w, s, bias, tiles, in, out), grid (ceil(out /
// GEMV_WARPS), tiles): moe_linear over compact experts for tiles of 1 to
// GEMV_MAX_ROWS rows; counted with the moe_gemv launches.
func fakeMoEQGemv(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	in, out := a.i32(6), a.i32(7)
	if grid[0]*gemvWarps < out || grid[2] != 1 {
		return fmt.Errorf("grid %v does not cover %d outputs", grid, out)
	}
	tiles, err := f.i32s(a.ptr(5), 3*grid[1])
	if err != nil {
		return err
	}
	for t := range grid[1] {
		e, r0, nr := int(tiles[3*t]), int(tiles[3*t+1]), int(tiles[3*t+2])
		if nr < 1 || nr > GemvMaxRows {
			return fmt.Errorf("tile %d has %d rows", t, nr)
		}
		wp, err := f.addressAt(a.ptr(2), e)
		if err != nil {
			return err
		}
		sp, err := f.addressAt(a.ptr(3), e)
		if err != nil {
			return err
		}
		w, err := f.fakeQuantRows(fakeQuantDType(name), wp, sp, 0, out, in)
		if err != nil {
			return err
		}
		var bias []float32
		if a.ptr(4) != 0 {
			bp, err := f.addressAt(a.ptr(4), e)
			if err != nil {
				return err
			}
			if bp != 0 {
				if bias, err = f.f32s(bp, out); err != nil {
					return err
				}
			}
		}
		if err := f.tileLinear(a.ptr(0), a.ptr(1), r0, nr, in, out, w, bias); err != nil {
			return err
		}
	}
	return nil
}

// qquant_x_l<L>_<q>(xq, x, norm, eps, mode, m, in), grid (blocks a row, m):
// m rows of x after the float32 staging's transform (fakeGemvX), staged
// as quant_int_test.go states it and laid out as the kernel writes them
// (qiBytes).
func fakeQQuantX(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	mode, m, in := a.i32(4), a.i32(5), a.i32(6)
	if grid[1] != m || grid[0] < 1 || in%32 != 0 {
		return fmt.Errorf("grid %v for %d rows of %d", grid, m, in)
	}
	dt := fakeQuantDType(name)
	x, err := fakeGemvX(f, a.ptr(1), a.ptr(2), a.f32(3), mode == 1, m, in, F32)
	if err != nil {
		return err
	}
	limbs := fakeLimbs(name)
	rb := qiRowBytesL(in, limbs)
	xq, err := f.resolve(a.ptr(0), m*rb)
	if err != nil {
		return err
	}
	for r := range m {
		copy(xq[r*rb:], qiBytes(dt, qiStageL(dt, x[r*in:(r+1)*in], limbs)))
	}
	return nil
}

// qgemv_int_1_l<L>_<q> and qgemv_swiglu_int_1_l<L>_<q>: the same for one
// row of x.
func fakeQGemvInt1(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	if m := a.i32(6); m != 1 {
		return fmt.Errorf("%s takes one row of x, not %d", name, m)
	}
	return fakeQGemvInt(f, name, grid, a)
}

// qgemv_int_l<L>_<q> and qgemv_swiglu_int_l<L>_<q> (the qgemv arguments,
// then xq):
// the integer path as quant_int_test.go states it, on x read back from
// qquant_x's rows at xq (staged or read in place), or (xq null, staged
// always) after the float32 staging's transform (fakeGemvX).
func fakeQGemvInt(f *fakeGPU, name string, _ [3]int, a fakeArgs) error {
	mode, staged, accumulate, m, in := a.i32(3), a.i32(4), a.i32(5) != 0, a.i32(6), a.i32(7)
	xqp := a.ptr(24)
	swiglu := strings.HasPrefix(name, "qgemv_swiglu_")
	switch {
	case xqp == 0 && staged != 1:
		return errors.New("the integer kernels stage x unless it is pre-quantised")
	case xqp != 0 && (m < 1 || m > qgemvIntMaxRows):
		return fmt.Errorf("%d rows of pre-quantised x", m)
	case swiglu && (mode != 1 || a.i32(18) != a.i32(13)):
		return errors.New("swiglu wants normalised x and gate and up of one height")
	}
	dt, limbs := fakeQuantDType(name), fakeLimbs(name)
	xs := make([]qiX, m)
	if xqp != 0 {
		rb := qiRowBytesL(in, limbs)
		b, err := f.resolve(xqp, m*rb)
		if err != nil {
			return err
		}
		for r := range m {
			xs[r] = qiUnbytes(dt, b[r*rb:(r+1)*rb], in, limbs)
		}
	} else {
		x, err := fakeGemvX(f, a.ptr(0), a.ptr(1), a.f32(2), mode == 1, m, in, F32)
		if err != nil {
			return err
		}
		for r := range m {
			xs[r] = qiStageL(dt, x[r*in:(r+1)*in], limbs)
		}
	}
	var ys [3][]float32
	for g := range 3 {
		base := 9 + 5*g
		out := a.i32(base + 4)
		if out == 0 {
			continue
		}
		stored, err := f.fakeQuantStored(dt, a.ptr(base+1), a.ptr(base+2), 0, out, in)
		if err != nil {
			return err
		}
		ys[g] = qiGemvStaged(dt, stored, out, in, xs)
		if a.ptr(base+3) != 0 {
			bias, err := f.f32s(a.ptr(base+3), out)
			if err != nil {
				return err
			}
			for i := range ys[g] {
				ys[g][i] += bias[i%out]
			}
		}
		if swiglu {
			continue
		}
		y, err := f.f32s(a.ptr(base), m*out)
		if err != nil {
			return err
		}
		for i, v := range ys[g] {
			if accumulate {
				v += y[i]
			}
			y[i] = v
		}
	}
	if swiglu {
		return fakeSwiGLUOut(f, a.ptr(9), ys[0], ys[1])
	}
	return nil
}

// fakeSwiGLUOut stores silu(g)·u at h.
func fakeSwiGLUOut(f *fakeGPU, h DevicePtr, g, u []float32) error {
	hs, err := f.f32s(h, len(g))
	if err != nil {
		return err
	}
	for i, v := range g {
		hs[i] = v / (1 + float32(math.Exp(float64(-v)))) * u[i]
	}
	return nil
}
