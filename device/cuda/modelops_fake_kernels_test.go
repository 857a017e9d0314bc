package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/gosling-ai/gosling/tensor"
)

// The kernels and cuBLASLt of fakeGPU (modelops_fake_test.go).

// fakeArgs reads kernel arguments from their 8-byte slots.
type fakeArgs []uint64

func (a fakeArgs) ptr(i int) DevicePtr { return DevicePtr(a[i]) }
func (a fakeArgs) i32(i int) int       { return int(int32(uint32(a[i]))) }
func (a fakeArgs) i64(i int) int       { return int(int64(a[i])) }
func (a fakeArgs) f32(i int) float32   { return math.Float32frombits(uint32(a[i])) }

// f32s views n float32 values at p.
func (f *fakeGPU) f32s(p DevicePtr, n int) ([]float32, error) {
	b, err := f.resolve(p, 4*n)
	if err != nil || n == 0 {
		return nil, err
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), nil
}

func (f *fakeGPU) i32s(p DevicePtr, n int) ([]int32, error) {
	b, err := f.resolve(p, 4*n)
	if err != nil || n == 0 {
		return nil, err
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), n), nil
}

// loadAny reads n values of dtype dt (by kernel suffix or cudaDataType) at p.
func (f *fakeGPU) loadAny(p DevicePtr, n int, dt DType) ([]float32, error) {
	if dt == F32 {
		return f.f32s(p, n)
	}
	if dt == FP8E4M3 {
		b, err := f.resolve(p, n)
		if err != nil {
			return nil, err
		}
		out := make([]float32, n)
		for i, v := range b {
			out[i] = tensor.FP8E4M3ToF32(v)
		}
		return out, nil
	}
	b, err := f.resolve(p, 2*n)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		bits := uint16(b[2*i]) | uint16(b[2*i+1])<<8
		if dt == BF16 {
			out[i] = tensor.BF16ToF32(bits)
		} else {
			out[i] = tensor.F16ToF32(bits)
		}
	}
	return out, nil
}

func (f *fakeGPU) storeAny(p DevicePtr, vals []float32, dt DType) error {
	if dt == F32 {
		dst, err := f.f32s(p, len(vals))
		copy(dst, vals)
		return err
	}
	b, err := f.resolve(p, 2*len(vals))
	if err != nil {
		return err
	}
	for i, v := range vals {
		var bits uint16
		if dt == BF16 {
			bits = tensor.F32ToBF16(v)
		} else {
			bits = tensor.F32ToF16(v)
		}
		b[2*i], b[2*i+1] = byte(bits), byte(bits>>8)
	}
	return nil
}

type fakeKernel struct {
	nargs int
	run   func(f *fakeGPU, name string, grid [3]int, a fakeArgs) error
}

// fakeStaticSmem is a kernel's static shared memory in bytes, where it
// matters: it counts with a launch's dynamic bytes against the 48 KiB
// limit.
var fakeStaticSmem = map[string]int{}

// fakeKernels restate the float32 kernels ModelOps launches (and the
// embedding table in bf16), argument for argument as kernels/*.cu declares them.
var fakeKernels = map[string]fakeKernel{
	nameEmbedding(F32, F32):     {6, fakeEmbedding},
	nameEmbedding(BF16, F32):    {6, fakeEmbedding},
	nameEmbedding(F16, F32):     {6, fakeEmbedding},
	nameRMSNorm(F32):            {9, fakeRMSNorm},
	nameRope(F32):               {11, fakeRope},
	nameRope(BF16):              {11, fakeRope},
	nameRope(F16):               {11, fakeRope},
	nameRopeVec(BF16):           {11, fakeRopeVec},
	nameRopeVec(F16):            {11, fakeRopeVec},
	nameGated("silu", F32):      {6, fakeGated},
	nameGated("gelu_tanh", F32): {6, fakeGated},
	// float32 in, 16-bit out (a GEMM's input)
	nameRMSNormTo(BF16):            {9, fakeRMSNorm},
	nameRMSNormTo(F16):             {9, fakeRMSNorm},
	nameGatedTo("silu", BF16):      {6, fakeGated},
	nameGatedTo("silu", F16):       {6, fakeGated},
	nameGatedTo("gelu_tanh", BF16): {6, fakeGated},
	nameGatedTo("gelu_tanh", F16):  {6, fakeGated},
	// 16-bit in and out (a fused gate_up GEMM's 16-bit output)
	nameGatedVec("silu", BF16):      {6, fakeGated},
	nameGatedVec("silu", F16):       {6, fakeGated},
	nameGatedVec("gelu_tanh", BF16): {6, fakeGated},
	nameGatedVec("gelu_tanh", F16):  {6, fakeGated},
	nameSoftcap(F32): {3, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
		x, err := f.f32s(a.ptr(0), a.i64(1))
		c := a.f32(2)
		for i, v := range x {
			x[i] = c * float32(math.Tanh(float64(v/c)))
		}
		return err
	}},
	nameConvert(F32, BF16): {3, fakeConvertF32},
	nameConvert(F32, F16):  {3, fakeConvertF32},
	nameAddF32(): {3, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
		dst, err := f.f32s(a.ptr(0), a.i64(2))
		src, err2 := f.f32s(a.ptr(1), a.i64(2))
		if err := errors.Join(err, err2); err != nil {
			return err
		}
		for i := range dst {
			dst[i] += src[i]
		}
		return nil
	}},
	nameScaleF32(): {3, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
		x, err := f.f32s(a.ptr(0), a.i64(1))
		for i := range x {
			x[i] *= a.f32(2)
		}
		return err
	}},
	nameSplit3F32(): {11, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
		rows := a.i64(1)
		n := a.i32(4) + a.i32(7) + a.i32(10)
		src, err := f.f32s(a.ptr(0), rows*n)
		if err != nil {
			return err
		}
		col := 0
		for i := range 3 {
			w := a.i32(4 + 3*i)
			if w == 0 {
				continue
			}
			out, err := f.f32s(a.ptr(2+3*i), rows*w)
			if err != nil {
				return err
			}
			var bias []float32
			if a.ptr(3+3*i) != 0 {
				if bias, err = f.f32s(a.ptr(3+3*i), w); err != nil {
					return err
				}
			}
			for r := range rows {
				for c := range w {
					out[r*w+c] = src[r*n+col+c]
					if bias != nil {
						out[r*w+c] += bias[c]
					}
				}
			}
			col += w
		}
		return nil
	}},
	nameAddRowF32(): {4, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
		rows, cols := a.i64(2), a.i32(3)
		x, err := f.f32s(a.ptr(0), rows*cols)
		row, err2 := f.f32s(a.ptr(1), cols)
		if err := errors.Join(err, err2); err != nil {
			return err
		}
		for i := range x {
			x[i] += row[i%cols]
		}
		return nil
	}},
}

// kernelTableDType is the table's dtype of an embedding_<table>_<out> kernel.
func kernelTableDType(name string) DType { return suffixDType(strings.Split(name, "_")[1]) }

// kernelWeightDType is the weights' dtype a kernel's name ends in.
func kernelWeightDType(name string) DType { return suffixDType(name[strings.LastIndex(name, "_")+1:]) }

// suffixDType is the dtype a kernel-name suffix (kernelDType) names.
func suffixDType(suffix string) DType {
	for _, dt := range []DType{BF16, F16} {
		if suffix == kernelDType(dt) {
			return dt
		}
	}
	return F32
}

// convert_f32_<dt>(out, in, n).
func fakeConvertF32(f *fakeGPU, name string, _ [3]int, a fakeArgs) error {
	in, err := f.f32s(a.ptr(1), a.i64(2))
	if err != nil {
		return err
	}
	return f.storeAny(a.ptr(0), in, kernelWeightDType(name))
}

// embedding(out, table, ids, hidden, vocab, scale), grid nTokens.
func fakeEmbedding(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	n, hidden, vocab, scale := grid[0], a.i32(3), a.i32(4), a.f32(5)
	ids, err := f.i32s(a.ptr(2), n)
	if err != nil {
		return err
	}
	out, err := f.f32s(a.ptr(0), n*hidden)
	if err != nil {
		return err
	}
	for t, id := range ids {
		o := out[t*hidden : (t+1)*hidden]
		if id < 0 || int(id) >= vocab {
			clear(o)
			continue
		}
		row, err := f.loadAny(a.ptr(1).Add(int(id)*hidden*ElemSize(kernelTableDType(name))), hidden, kernelTableDType(name))
		if err != nil {
			return err
		}
		for i, v := range row {
			o[i] = v * scale
		}
	}
	return nil
}

// rmsnorm(out, residual, x, weight, hidden, x_stride, out_stride, eps, offset), grid (nTokens, heads).
// With a residual: residual = x + residual, then out = norm(residual).
func fakeRMSNorm(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	hidden, xs, os, eps, offset := a.i32(4), a.i64(5), a.i64(6), a.f32(7), a.f32(8)
	odt := outDType(name)
	w, err := f.f32s(a.ptr(3), hidden)
	if err != nil {
		return err
	}
	for t := range grid[0] {
		for h := range grid[1] {
			x, err := f.f32s(a.ptr(2).Add(4*(t*xs+h*hidden)), hidden)
			if err != nil {
				return err
			}
			out := make([]float32, hidden)
			if a.ptr(1) != 0 {
				res, err := f.f32s(a.ptr(1).Add(4*((t*grid[1]+h)*hidden)), hidden)
				if err != nil {
					return err
				}
				for i := range res {
					res[i] += x[i]
				}
				x = res
			}
			var ss float32
			for _, v := range x {
				ss += v * v
			}
			inv := 1 / float32(math.Sqrt(float64(ss/float32(hidden)+eps)))
			for i, v := range x {
				out[i] = v * inv * (w[i] + offset)
			}
			if err := f.storeAny(a.ptr(0).Add(ElemSize(odt)*(t*os+h*hidden)), out, odt); err != nil {
				return err
			}
		}
	}
	return nil
}

// outDType is the output dtype of a <kernel>_f32_to_<dt> kernel, F32 for
// the others.
func outDType(name string) DType {
	if _, to, ok := strings.Cut(name, "_to_"); ok {
		return suffixDType(to)
	}
	return F32
}

// rope_<dt>(q, k, positions, inv_freq, n_q_heads, head_dim, rot_dim, q_stride, k_stride, interleaved, mscale),
// grid (nTokens, n_q_heads + n_kv_heads).
func fakeRope(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	p := fakeRopeCall{dt: suffixDType(strings.TrimPrefix(name, "rope_")), tokens: grid[0], nq: a.i32(4), nk: grid[1] - a.i32(4),
		headDim: a.i32(5), rot: a.i32(6), qs: a.i64(7), ks: a.i64(8), interleaved: a.i32(9) != 0, mscale: a.f32(10)}
	return p.run(f, a)
}

// rope_<dt>_v8(q, k, positions, inv_freq, n_q_heads, n_kv_heads, head_dim, rot_dim, q_stride, k_stride, mscale),
// grid (nTokens): rope_<dt>'s arithmetic, on the 16-byte groups it requires.
func fakeRopeVec(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	p := fakeRopeCall{dt: suffixDType(strings.TrimSuffix(strings.TrimPrefix(name, "rope_"), "_v8")), tokens: grid[0],
		nq: a.i32(4), nk: a.i32(5), headDim: a.i32(6), rot: a.i32(7), qs: a.i64(8), ks: a.i64(9), mscale: a.f32(10)}
	if p.rot%16 != 0 || p.headDim%8 != 0 || p.qs%8 != 0 || p.ks%8 != 0 || (a.ptr(0)|a.ptr(1))%16 != 0 {
		return fmt.Errorf("fake: %s on rot %d, head dim %d, strides %d/%d, q %#x, k %#x: not in 16-byte groups",
			name, p.rot, p.headDim, p.qs, p.ks, a.ptr(0), a.ptr(1))
	}
	return p.run(f, a)
}

// fakeRopeCall is one rope launch's shape; q, k, positions and inv_freq
// are its first four arguments. A 16-bit head is rotated in float32 and
// rounded once, as the kernels do.
type fakeRopeCall struct {
	dt                                   DType
	tokens, nq, nk, headDim, rot, qs, ks int
	interleaved                          bool
	mscale                               float32
}

func (p fakeRopeCall) run(f *fakeGPU, a fakeArgs) error {
	dt := p.dt
	pos, err := f.i32s(a.ptr(2), p.tokens)
	if err != nil {
		return err
	}
	freq, err := f.f32s(a.ptr(3), p.rot/2)
	if err != nil {
		return err
	}
	for t := range p.tokens {
		for h := range p.nq + p.nk {
			at := a.ptr(0).Add(ElemSize(dt) * (t*p.qs + h*p.headDim))
			if h >= p.nq {
				at = a.ptr(1).Add(ElemSize(dt) * (t*p.ks + (h-p.nq)*p.headDim))
			}
			head, err := f.loadAny(at, p.headDim, dt)
			if err != nil {
				return err
			}
			for i := range p.rot / 2 {
				s, c := math.Sincos(float64(float32(pos[t]) * freq[i]))
				sf, cf := float32(s)*p.mscale, float32(c)*p.mscale
				i0, i1 := i, i+p.rot/2
				if p.interleaved {
					i0, i1 = 2*i, 2*i+1
				}
				x0, x1 := head[i0], head[i1]
				head[i0], head[i1] = x0*cf-x1*sf, x0*sf+x1*cf
			}
			if dt != F32 { // f32s is the device memory itself; loadAny a copy
				if err := f.storeAny(at, head, dt); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// attn_store_<si>_<sc>(k_cache, v_cache, k, v, slots, k_width, v_width, k_stride, v_stride, k_inv_scale, v_inv_scale),
// grid (n_tokens): row t of k (and of v where v_cache is set) times its
// inverse scale, rounded to the cache's dtype, into row slots[t] (none
// where slots[t] < 0). attention/gpu's kernel; the attention itself is
// not emulated.
func fakeAttnStore(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	si, sc, _ := strings.Cut(strings.TrimPrefix(name, "attn_store_"), "_")
	in := suffixDType(si)
	slots, err := f.i32s(a.ptr(4), grid[0])
	if err != nil {
		return err
	}
	for t, slot := range slots {
		if slot < 0 {
			continue
		}
		for _, s := range []struct {
			cache, src    DevicePtr
			width, stride int
			inv           float32
		}{{a.ptr(0), a.ptr(2), a.i32(5), a.i64(7), a.f32(9)}, {a.ptr(1), a.ptr(3), a.i32(6), a.i64(8), a.f32(10)}} {
			if s.cache == 0 {
				continue
			}
			src, err := f.loadAny(s.src.Add(ElemSize(in)*t*s.stride), s.width, in)
			if err != nil {
				return err
			}
			row := make([]float32, s.width)
			for i, v := range src {
				row[i] = v * s.inv
			}
			if sc == "fp8" {
				b, err := f.resolve(s.cache.Add(int(slot)*s.width), s.width)
				if err != nil {
					return err
				}
				for i, v := range row {
					b[i] = tensor.F32ToFP8E4M3(v)
				}
				continue
			}
			out := suffixDType(sc)
			if err := f.storeAny(s.cache.Add(ElemSize(out)*int(slot)*s.width), row, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// silu_mul / gelu_tanh_mul(out, gate, up, n_tokens, inter, in_stride).
func fakeGated(f *fakeGPU, name string, _ [3]int, a fakeArgs) error {
	n, inter, stride := a.i64(3), a.i32(4), a.i64(5)
	if n == 0 || inter == 0 {
		return nil
	}
	span := (n-1)*stride + inter
	out := make([]float32, n*inter)
	in, odt := F32, outDType(name)
	if v8, ok := strings.CutSuffix(name, "_v8"); ok { // {act}_mul_{dt}_v8: 16-bit in and out
		in = suffixDType(v8[strings.LastIndexByte(v8, '_')+1:])
		odt = in
	}
	gate, err := f.loadAny(a.ptr(1), span, in)
	if err != nil {
		return err
	}
	up, err := f.loadAny(a.ptr(2), span, in)
	if err != nil {
		return err
	}
	for t := range n {
		for c := range inter {
			g, u := float64(gate[t*stride+c]), float64(up[t*stride+c])
			var act float64
			if name[0] == 's' {
				act = g / (1 + math.Exp(-g))
			} else {
				act = 0.5 * g * (1 + math.Tanh(0.7978845608028654*(g+0.044715*g*g*g)))
			}
			out[t*inter+c] = float32(act) * float32(u)
		}
	}
	return f.storeAny(a.ptr(0), out, odt)
}

// lt is the fake as the cuBLASLt table: column-major D = α·op(A)·op(B) + β·C
// with float32 accumulation.
func (f *fakeGPU) lt() *ltAPI {
	locked := func(fn func() int32) int32 {
		f.mu.Lock()
		defer f.mu.Unlock()
		return fn()
	}
	dtypeOf := map[int32]DType{cudaR32F: F32, cudaR16BF: BF16, cudaR16F: F16, cudaR8FE4M3: FP8E4M3}
	return &ltAPI{
		cublasLtCreate:          func(h *uintptr) int32 { return locked(func() int32 { *h = f.handle(); return 0 }) },
		cublasLtDestroy:         func(h uintptr) int32 { return 0 },
		cublasLtGetVersion:      func() uint64 { return 130000 },
		cublasLtGetStatusString: func(s int32) string { return "fake cuBLASLt status" },
		cublasLtMatmulDescCreate: func(d *uintptr, compute, scale int32) int32 {
			return locked(func() int32 { *d = f.handle(); f.descs[*d] = &fakeDesc{}; return 0 })
		},
		cublasLtMatmulDescSetAttribute: func(d uintptr, attr int32, buf unsafe.Pointer, size uint64) int32 {
			return locked(func() int32 {
				switch attr {
				case ltDescTransA:
					f.descs[d].transA = *(*int32)(buf)
				case ltDescTransB:
					f.descs[d].transB = *(*int32)(buf)
				case ltDescAScaleMode:
					f.descs[d].aMode = *(*int32)(buf)
				case ltDescBScaleMode:
					f.descs[d].bMode = *(*int32)(buf)
				case ltDescAScalePtr:
					f.descs[d].aScale = *(*DevicePtr)(buf)
				case ltDescBScalePtr:
					f.descs[d].bScale = *(*DevicePtr)(buf)
				}
				return 0
			})
		},
		cublasLtMatmulDescDestroy: func(d uintptr) int32 { return locked(func() int32 { delete(f.descs, d); return 0 }) },
		cublasLtMatrixLayoutCreate: func(l *uintptr, dtype int32, rows, cols uint64, ld int64) int32 {
			return locked(func() int32 {
				*l = f.handle()
				f.layouts[*l] = fakeLayout{dtype, int(rows), int(cols), int(ld)}
				return 0
			})
		},
		cublasLtMatrixLayoutDestroy:     func(l uintptr) int32 { return locked(func() int32 { delete(f.layouts, l); return 0 }) },
		cublasLtMatmulPreferenceCreate:  func(p *uintptr) int32 { return locked(func() int32 { *p = f.handle(); return 0 }) },
		cublasLtMatmulPreferenceSetAttr: func(p uintptr, attr int32, buf unsafe.Pointer, size uint64) int32 { return 0 },
		cublasLtMatmulPreferenceDestroy: func(p uintptr) int32 { return 0 },
		cublasLtMatmulAlgoGetHeuristic: func(h, op, a, b, c, d, pref uintptr, requested int32, results unsafe.Pointer, returned *int32) int32 {
			return locked(func() int32 {
				*returned = 1
				if desc := f.descs[op]; f.noRowScales && (desc.aMode != 0 || desc.bMode != 0) {
					*returned = 0 // as cuBLASLt 13 on sm_90
				}
				return 0
			})
		},
		cublasLtMatmul: func(h, op uintptr, alpha unsafe.Pointer, a DevicePtr, aDesc uintptr, b DevicePtr, bDesc uintptr, beta unsafe.Pointer, c DevicePtr, cDesc uintptr, d DevicePtr, dDesc uintptr, algo unsafe.Pointer, ws DevicePtr, wsBytes uint64, s Stream) int32 {
			return locked(func() int32 {
				desc, la, lb, lc, ld := *f.descs[op], f.layouts[aDesc], f.layouts[bDesc], f.layouts[cDesc], f.layouts[dDesc]
				al, be := *(*float32)(alpha), *(*float32)(beta)
				f.launchesOn[s]++
				f.enqueue(s, func() error {
					m, n := ld.rows, ld.cols
					k := la.cols
					if desc.transA == cublasOpT {
						k = la.rows
					}
					load := func(p DevicePtr, l fakeLayout) ([]float32, error) {
						return f.loadAny(p, (l.cols-1)*l.ld+l.rows, dtypeOf[l.dtype])
					}
					av, err := load(a, la)
					if err != nil {
						return fmt.Errorf("gemm A: %w", err)
					}
					bv, err := load(b, lb)
					if err != nil {
						return fmt.Errorf("gemm B: %w", err)
					}
					cv, err := load(c, lc)
					if err != nil {
						return fmt.Errorf("gemm C: %w", err)
					}
					var sa, sb []float32 // outer-vector scales: A's per row i, B's per column j
					if desc.aMode == ltScaleOuterVec32F {
						if sa, err = f.f32s(desc.aScale, m); err != nil {
							return fmt.Errorf("gemm A scales: %w", err)
						}
					}
					if desc.bMode == ltScaleOuterVec32F {
						if sb, err = f.f32s(desc.bScale, n); err != nil {
							return fmt.Errorf("gemm B scales: %w", err)
						}
					}
					for j := range n {
						for i := range m {
							var sum float32
							for l := range k {
								var x, y float32
								if desc.transA == cublasOpT {
									x = av[l+i*la.ld]
								} else {
									x = av[i+l*la.ld]
								}
								if desc.transB == cublasOpT {
									y = bv[j+l*lb.ld]
								} else {
									y = bv[l+j*lb.ld]
								}
								sum += x * y
							}
							if sa != nil {
								sum *= sa[i]
							}
							if sb != nil {
								sum *= sb[j]
							}
							v := al * sum
							if be != 0 {
								v += be * cv[i+j*lc.ld]
							}
							cv[i+j*ld.ld] = v
						}
					}
					return f.storeAny(d, cv, dtypeOf[ld.dtype])
				})
				return 0
			})
		},
	}
}

// fill_synthetic_<dt> (kernels/fill.cu), restated from the .cu rather than
// through tensor.Synthetic, so the fake also checks that the two agree.
func init() {
	for _, si := range []string{"f32", "bf16", "f16"} {
		for _, sc := range []string{"f32", "bf16", "f16", "fp8"} {
			fakeKernels["attn_store_"+si+"_"+sc] = fakeKernel{11, fakeAttnStore}
		}
	}
	for _, dt := range []DType{F32, BF16, F16} {
		fakeKernels[nameFillSynthetic(dt)] = fakeKernel{6, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
			first, n, seed := uint64(a.i64(1)), a.i64(2), uint64(a[3])
			scale, offset := a.f32(4), a.f32(5)
			vals := make([]float32, n)
			for j := range vals {
				z := seed + (first+uint64(j))*0x9e3779b97f4a7c15
				z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
				z = (z ^ z>>27) * 0x94d049bb133111eb
				z ^= z >> 31
				u := float32(int32(z>>40)-(1<<23)) * (1.0 / 8388608)
				vals[j] = float32(scale*u) + offset // __fadd_rn(__fmul_rn(...)): no FMA
			}
			return f.storeAny(a.ptr(0), vals, dt)
		}}
	}
}

// The kernels of kernels/moe.cu (modelops_moe.go).
func init() {
	fakeKernels[nameConcatHeadsF32()] = fakeKernel{7, fakeConcatHeads}
	fakeKernels[nameScatterAddRowsF32()] = fakeKernel{5, fakeScatterAddRows}
	fakeKernels[nameMoERouteF32()] = fakeKernel{10, fakeMoERoute}
	for _, w := range []DType{F32, BF16, F16} {
		fakeKernels[nameHeadLinear(w)] = fakeKernel{7, fakeHeadLinear}
		fakeKernels[nameMoELinear(w)] = fakeKernel{7, fakeMoELinear}
		fakeKernels[nameMoEGemv(w)] = fakeKernel{7, fakeMoELinear}
		fakeKernels[nameMoEGemvGLU(w)] = fakeKernel{13, fakeMoEGemvGLU}
	}
	fakeKernels[nameMoECombineF32()] = fakeKernel{6, fakeMoECombine}
	fakeKernels[nameMoESort()] = fakeKernel{8, fakeMoESort}
	fakeKernels[nameMoEAlign()] = fakeKernel{9, fakeMoEAlign}
	fakeStaticSmem[nameMoEAlign()] = 4
	for _, w := range []DType{BF16, F16} {
		fakeKernels[nameMoEGemm(w)] = fakeKernel{13, fakeMoEGemm}
		fakeStaticSmem[nameMoEGemm(w)] = 2 * (moeGemmRows + 2*moeGemmCols) * (32 + 8) * 2
	}
	fakeKernels[nameSigmoidGateAddF32()] = fakeKernel{4, fakeSigmoidGateAdd}
	fakeKernels[nameClampedSwiGLU()] = fakeKernel{5, fakeClampedSwiGLU}
}

// addressAt reads the device address stored at p + 8·i (an array of them).
func (f *fakeGPU) addressAt(p DevicePtr, i int) (DevicePtr, error) {
	b, err := f.resolve(p.Add(8*i), 8)
	if err != nil {
		return 0, err
	}
	return DevicePtr(*(*uint64)(unsafe.Pointer(&b[0]))), nil
}

// moe_linear_<w> and moe_gemv_<w>(y, x, w, bias, tiles, in, out), grid
// (out tiles, tiles): 32 outputs and 0..32 rows per tile (none: an unused
// tile of moe_align's list), or
// GEMV_WARPS·MOE_GEMV_OUTS outputs and any rows (none: an unused tile)
// with in a multiple of 8.
func fakeMoELinear(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	in, out := a.i32(5), a.i32(6)
	perBlock, minRows, maxRows := headLinearTile, 0, headLinearTile
	if slices.Contains(KernelNames.MoEGemv, name) {
		perBlock, minRows, maxRows = gemvWarps*moeGemvOuts, 0, math.MaxInt
		if in%8 != 0 {
			return fmt.Errorf("in %d is no multiple of 8", in)
		}
	}
	if grid[0]*perBlock < out || grid[2] != 1 {
		return fmt.Errorf("grid %v does not cover %d outputs", grid, out)
	}
	tiles, err := f.i32s(a.ptr(4), 3*grid[1])
	if err != nil {
		return err
	}
	for t := range grid[1] {
		e, r0, nr := int(tiles[3*t]), int(tiles[3*t+1]), int(tiles[3*t+2])
		if nr < minRows || nr > maxRows {
			return fmt.Errorf("tile %d has %d rows", t, nr)
		}
		if nr == 0 {
			continue
		}
		w, bias, err := f.expertMatrix(a.ptr(2), a.ptr(3), e, out, in, kernelWeightDType(name))
		if err != nil {
			return err
		}
		if err := f.tileLinear(a.ptr(0), a.ptr(1), r0, nr, in, out, w, bias); err != nil {
			return err
		}
	}
	return nil
}

// expertMatrix reads expert e's [out, in] matrix and its bias (nil: none)
// through the pointer arrays w and bias (0: no biases).
func (f *fakeGPU) expertMatrix(w, bias DevicePtr, e, out, in int, dt DType) (mat, b []float32, err error) {
	wp, err := f.addressAt(w, e)
	if err != nil {
		return nil, nil, err
	}
	if mat, err = f.loadAny(wp, out*in, dt); err != nil {
		return nil, nil, err
	}
	if bias == 0 {
		return mat, nil, nil
	}
	bp, err := f.addressAt(bias, e)
	if err != nil || bp == 0 {
		return mat, nil, err
	}
	b, err = f.f32s(bp, out)
	return mat, b, err
}

// tileLinear sets rows r0..r0+nr of the float32 y [rows, out] to
// x [rows, in] times wᵀ (w [out, in]) plus bias (nil: none): one tile of a
// grouped expert GEMV.
func (f *fakeGPU) tileLinear(yp, xp DevicePtr, r0, nr, in, out int, w, bias []float32) error {
	x, err := f.f32s(xp.Add(4*r0*in), nr*in)
	if err != nil {
		return err
	}
	y, err := f.f32s(yp.Add(4*r0*out), nr*out)
	if err != nil {
		return err
	}
	for r := range nr {
		for o := range out {
			y[r*out+o] = fakeDot(x[r*in:(r+1)*in], w[o*in:(o+1)*in], bias, o)
		}
	}
	return nil
}

// fakeDot is x·w plus bias[o] (bias nil: none), summed in float32 in order.
func fakeDot(x, w, bias []float32, o int) float32 {
	var sum float32
	for i, v := range x {
		sum += v * w[i]
	}
	if bias != nil {
		sum += bias[o]
	}
	return sum
}

// moe_sort(experts, order, pos, tiles, pairs, n_experts, k, n_tiles), grid
// 1: planExperts' order, one tile per expert with rows.
func fakeMoESort(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	if grid != [3]int{1, 1, 1} {
		return fmt.Errorf("grid %v, want one block", grid)
	}
	return f.sortPairs(a, max(a.i32(4), 1))
}

// moe_align(experts, order, pos, tiles, pairs, n_experts, k, n_tiles,
// tile_rows), grid 1: the pairs of each expert in token order (the kernel
// leaves the order within an expert open), cut into tiles of at most
// tile_rows rows.
func fakeMoEAlign(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	if tileRows := a.i32(8); grid != [3]int{1, 1, 1} || tileRows <= 0 {
		return fmt.Errorf("grid %v, tiles of %d rows", grid, tileRows)
	}
	return f.sortPairs(a, a.i32(8))
}

// sortPairs is moe_sort's and moe_align's work, arguments (experts, order,
// pos, tiles, pairs, n_experts, k, n_tiles): a counting sort of the pairs
// by expert (one outside [0, n_experts) counts as expert 0), tokens in
// order within each, an expert's rows cut into tiles of at most tileRows,
// the list padded with empty tiles.
func (f *fakeGPU) sortPairs(a fakeArgs, tileRows int) error {
	pairs, nExp, k, nTiles := a.i32(4), a.i32(5), a.i32(6), a.i32(7)
	experts, err := f.i32s(a.ptr(0), pairs)
	if err != nil {
		return err
	}
	order, err := f.i32s(a.ptr(1), pairs)
	if err != nil {
		return err
	}
	pos, err := f.i32s(a.ptr(2), pairs)
	if err != nil {
		return err
	}
	tiles, err := f.i32s(a.ptr(3), 3*nTiles)
	if err != nil {
		return err
	}
	expert := func(i int) int {
		if e := int(experts[i]); e >= 0 && e < nExp {
			return e
		}
		return 0
	}
	next := make([]int, nExp)
	for i := range pairs {
		next[expert(i)]++
	}
	clear(tiles)
	row, t := 0, 0
	for e, c := range next {
		for r := 0; r < c; r += tileRows {
			if t >= nTiles {
				return fmt.Errorf("more than %d tiles", nTiles)
			}
			tiles[3*t], tiles[3*t+1], tiles[3*t+2] = int32(e), int32(row+r), int32(min(tileRows, c-r))
			t++
		}
		next[e] = row
		row += c
	}
	for i := range pairs {
		e := expert(i)
		order[next[e]], pos[i] = int32(i/k), int32(next[e])
		next[e]++
	}
	return nil
}

// moe_gemm_<w>(y, x, order, w, w2, bias, bias2, tiles, in, out, act,
// alpha, limit), grid (out / MOE_GEMM_BN, tiles): x's rows (gathered
// through order when it is not null) rounded to the weights' type, as the
// kernel stages them, times each tile's expert, with the gated activation
// of w and w2 when w2 is not null.
func fakeMoEGemm(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	in, out, act, alpha, limit := a.i32(8), a.i32(9), a.i32(10), a.f32(11), a.f32(12)
	if in%8 != 0 {
		return fmt.Errorf("in %d is no multiple of 8", in)
	}
	if grid[0]*moeGemmCols < out || grid[2] != 1 {
		return fmt.Errorf("grid %v does not cover %d outputs", grid, out)
	}
	tiles, err := f.i32s(a.ptr(7), 3*grid[1])
	if err != nil {
		return err
	}
	dt, glu := kernelWeightDType(name), a.ptr(4) != 0
	for t := range grid[1] {
		e, r0, nr := int(tiles[3*t]), int(tiles[3*t+1]), int(tiles[3*t+2])
		if nr < 0 || nr > moeGemmRows {
			return fmt.Errorf("tile %d has %d rows", t, nr)
		}
		if nr == 0 {
			continue
		}
		w, b, err := f.expertMatrix(a.ptr(3), a.ptr(5), e, out, in, dt)
		if err != nil {
			return err
		}
		var w2, b2 []float32
		if glu {
			if w2, b2, err = f.expertMatrix(a.ptr(4), a.ptr(6), e, out, in, dt); err != nil {
				return err
			}
		}
		y, err := f.f32s(a.ptr(0).Add(4*r0*out), nr*out)
		if err != nil {
			return err
		}
		for r := range nr {
			src := r0 + r
			if a.ptr(2) != 0 {
				idx, err := f.i32s(a.ptr(2).Add(4*src), 1)
				if err != nil {
					return err
				}
				src = int(idx[0])
			}
			xr, err := f.f32s(a.ptr(1).Add(4*src*in), in)
			if err != nil {
				return err
			}
			x := roundTo(slices.Clone(xr), dt)
			for o := range out {
				v := fakeDot(x, w[o*in:(o+1)*in], b, o)
				if glu {
					v = fakeExpertAct(v, fakeDot(x, w2[o*in:(o+1)*in], b2, o), act == moeActClamped, alpha, limit)
				}
				y[r*out+o] = v
			}
		}
	}
	return nil
}

// fakeExpertAct is common.cuh's expert_act in float32.
func fakeExpertAct(g, u float32, clamped bool, alpha, limit float32) float32 {
	if !clamped {
		return g / (1 + float32(math.Exp(float64(-g)))) * u
	}
	g, u = min(g, limit), min(max(u, -limit), limit)
	return (u + 1) * g / (1 + float32(math.Exp(float64(-alpha*g))))
}

// moe_gemv_glu_<w>(h, x, order, wg, wu, bg, bu, tiles, in, inter, act,
// alpha, limit), grid (inter / GEMV_WARPS, tiles).
func fakeMoEGemvGLU(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	in, inter, act, alpha, limit := a.i32(8), a.i32(9), a.i32(10), a.f32(11), a.f32(12)
	if in%8 != 0 {
		return fmt.Errorf("in %d is no multiple of 8", in)
	}
	if grid[0]*gemvWarps < inter || grid[2] != 1 {
		return fmt.Errorf("grid %v does not cover %d outputs", grid, inter)
	}
	tiles, err := f.i32s(a.ptr(7), 3*grid[1])
	if err != nil {
		return err
	}
	dt := kernelWeightDType(name)
	for t := range grid[1] {
		e, r0, nr := int(tiles[3*t]), int(tiles[3*t+1]), int(tiles[3*t+2])
		if nr == 0 {
			continue
		}
		wg, bg, err := f.expertMatrix(a.ptr(3), a.ptr(5), e, inter, in, dt)
		if err != nil {
			return err
		}
		wu, bu, err := f.expertMatrix(a.ptr(4), a.ptr(6), e, inter, in, dt)
		if err != nil {
			return err
		}
		order, err := f.i32s(a.ptr(2).Add(4*r0), nr)
		if err != nil {
			return err
		}
		h, err := f.f32s(a.ptr(0).Add(4*r0*inter), nr*inter)
		if err != nil {
			return err
		}
		for r, tok := range order {
			x, err := f.f32s(a.ptr(1).Add(4*int(tok)*in), in)
			if err != nil {
				return err
			}
			for o := range inter {
				g, u := fakeDot(x, wg[o*in:(o+1)*in], bg, o), fakeDot(x, wu[o*in:(o+1)*in], bu, o)
				h[r*inter+o] = fakeExpertAct(g, u, act == moeActClamped, alpha, limit)
			}
		}
	}
	return nil
}

// sigmoid_gate_add_f32(dst, src, gate, width), grid T.
func fakeSigmoidGateAdd(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	n, width := grid[0], a.i32(3)
	dst, err := f.f32s(a.ptr(0), n*width)
	if err != nil {
		return err
	}
	src, err := f.f32s(a.ptr(1), n*width)
	if err != nil {
		return err
	}
	gate, err := f.f32s(a.ptr(2), n)
	if err != nil {
		return err
	}
	for t, g := range gate {
		s := 1 / (1 + float32(math.Exp(float64(-g))))
		for c := range width {
			dst[t*width+c] += s * src[t*width+c]
		}
	}
	return nil
}

// moe_combine_f32(dst, src, pos, weights, k, width), grid tokens.
func fakeMoECombine(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	n, k, width := grid[0], a.i32(4), a.i32(5)
	dst, err := f.f32s(a.ptr(0), n*width)
	if err != nil {
		return err
	}
	src, err := f.f32s(a.ptr(1), n*k*width)
	if err != nil {
		return err
	}
	pos, err := f.i32s(a.ptr(2), n*k)
	if err != nil {
		return err
	}
	w, err := f.f32s(a.ptr(3), n*k)
	if err != nil {
		return err
	}
	for t := range n {
		for c := range width {
			acc := dst[t*width+c]
			for j := range k {
				acc += w[t*k+j] * src[int(pos[t*k+j])*width+c]
			}
			dst[t*width+c] = acc
		}
	}
	return nil
}

// clamped_swiglu_f32(gate, up, n, alpha, limit).
func fakeClampedSwiGLU(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
	n, alpha, limit := a.i64(2), a.f32(3), a.f32(4)
	gate, err := f.f32s(a.ptr(0), n)
	if err != nil {
		return err
	}
	up, err := f.f32s(a.ptr(1), n)
	if err != nil {
		return err
	}
	for i := range gate {
		g := min(gate[i], limit)
		u := min(max(up[i], -limit), limit)
		gate[i] = (u + 1) * g / (1 + float32(math.Exp(float64(-alpha*g))))
	}
	return nil
}

// concat_heads_f32(out, a, b, rows, heads, da, db).
func fakeConcatHeads(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
	rows, heads, da, db := a.i64(3), a.i32(4), a.i32(5), a.i32(6)
	out, err := f.f32s(a.ptr(0), rows*heads*(da+db))
	if err != nil {
		return err
	}
	x, err := f.f32s(a.ptr(1), rows*heads*da)
	if err != nil {
		return err
	}
	y, err := f.f32s(a.ptr(2), rows*heads*db)
	if err != nil {
		return err
	}
	for rh := range rows * heads {
		dst := out[rh*(da+db) : (rh+1)*(da+db)]
		copy(dst[:da], x[rh*da:(rh+1)*da])
		copy(dst[da:], y[rh*db:(rh+1)*db])
	}
	return nil
}

// head_linear_<w>(y, x, w, rows, heads, in, out_h), grid (out tiles, row tiles, heads).
func fakeHeadLinear(f *fakeGPU, name string, grid [3]int, a fakeArgs) error {
	rows, heads, in, outH := a.i32(3), a.i32(4), a.i32(5), a.i32(6)
	if grid[0]*headLinearTile < outH || grid[1]*headLinearTile < rows || grid[2] != heads {
		return fmt.Errorf("grid %v does not cover %d rows × %d heads × %d outputs", grid, rows, heads, outH)
	}
	wdt := kernelWeightDType(name)
	y, err := f.f32s(a.ptr(0), rows*heads*outH)
	if err != nil {
		return err
	}
	x, err := f.f32s(a.ptr(1), rows*heads*in)
	if err != nil {
		return err
	}
	w, err := f.loadAny(a.ptr(2), heads*outH*in, wdt)
	if err != nil {
		return err
	}
	for t := range rows {
		for h := range heads {
			xh := x[(t*heads+h)*in : (t*heads+h+1)*in]
			for o := range outH {
				wo := w[(h*outH+o)*in : (h*outH+o+1)*in]
				var sum float32
				for i, v := range xh {
					sum += v * wo[i]
				}
				y[(t*heads+h)*outH+o] = sum
			}
		}
	}
	return nil
}

// scatter_add_rows_f32(dst, src, rows, scales, width), grid n.
func fakeScatterAddRows(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	n, width := grid[0], a.i32(4)
	src, err := f.f32s(a.ptr(1), n*width)
	if err != nil {
		return err
	}
	rows, err := f.i32s(a.ptr(2), n)
	if err != nil {
		return err
	}
	scales, err := f.f32s(a.ptr(3), n)
	if err != nil {
		return err
	}
	for i, r := range rows {
		dst, err := f.f32s(a.ptr(0).Add(4*int(r)*width), width)
		if err != nil {
			return err
		}
		for c := range dst {
			dst[c] += scales[i] * src[i*width+c]
		}
	}
	return nil
}

// moe_route_f32(logits, bias, experts, weights, n_experts, top_k, n_groups,
// topk_groups, flags, scale), grid T: the kernel's repeated arg-max, one
// token at a time.
func fakeMoERoute(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
	nTok, nExp, k, groups, topGroups, flags, scale := grid[0], a.i32(4), a.i32(5), a.i32(6), a.i32(7), a.i32(8), a.f32(9)
	logits, err := f.f32s(a.ptr(0), nTok*nExp)
	if err != nil {
		return err
	}
	var bias []float32
	if a.ptr(1) != 0 {
		if bias, err = f.f32s(a.ptr(1), nExp); err != nil {
			return err
		}
	}
	experts, err := f.i32s(a.ptr(2), nTok*k)
	if err != nil {
		return err
	}
	weights, err := f.f32s(a.ptr(3), nTok*k)
	if err != nil {
		return err
	}
	// best is the first index of the highest value among those in play.
	best := func(vals []float32, inPlay func(int) bool) int {
		bi := -1
		for i, v := range vals {
			if inPlay(i) && (bi < 0 || v > vals[bi]) {
				bi = i
			}
		}
		return bi
	}
	score, choice := make([]float32, nExp), make([]float32, nExp)
	for t := range nTok {
		row := logits[t*nExp : (t+1)*nExp]
		if flags&routeSoftmax != 0 {
			m := float32(math.Inf(-1))
			for _, l := range row {
				m = max(m, l)
			}
			var sum float32
			for _, l := range row {
				sum += float32(math.Exp(float64(l - m)))
			}
			for e, l := range row {
				score[e] = float32(math.Exp(float64(l-m))) / sum
			}
		} else {
			for e, l := range row {
				score[e] = 1 / (1 + float32(math.Exp(float64(-l))))
			}
		}
		for e := range choice {
			choice[e] = score[e]
			if bias != nil {
				choice[e] += bias[e]
			}
		}
		inGroup := func(int) bool { return true }
		if flags&routeGrouped != 0 {
			per := nExp / groups
			gscore := make([]float32, groups)
			for g := range groups {
				// The best value, plus the second best when ranking by the
				// sum of the two best choices.
				by := choice
				if flags&routeGroupMax != 0 {
					by = score
				}
				members := by[g*per : (g+1)*per]
				first := best(members, func(int) bool { return true })
				gscore[g] = members[first]
				if flags&routeGroupMax == 0 && per > 1 {
					gscore[g] += members[best(members, func(i int) bool { return i != first })]
				}
			}
			chosen := make([]bool, groups)
			for range topGroups {
				chosen[best(gscore, func(g int) bool { return !chosen[g] })] = true
			}
			inGroup = func(e int) bool { return chosen[e/per] }
		}
		taken := make([]bool, nExp)
		var sum float32
		for j := range k {
			e := best(choice, func(e int) bool { return inGroup(e) && !taken[e] })
			taken[e] = true
			experts[t*k+j], weights[t*k+j] = int32(e), score[e]
			sum += score[e]
		}
		for j := range k {
			w := weights[t*k+j]
			if flags&routeNorm != 0 {
				w /= sum + 1e-20
			}
			weights[t*k+j] = w * scale
		}
	}
	return nil
}

// fakeGemvX loads m rows of x, staged as the _fx and _swiglu kernels do.
func fakeGemvX(f *fakeGPU, x, norm DevicePtr, eps float32, normalise bool, m, in int, dt DType) ([]float32, error) {
	xs, err := f.f32s(x, m*in)
	if err != nil {
		return nil, err
	}
	xs = slices.Clone(xs)
	if normalise {
		w, err := f.f32s(norm, in)
		if err != nil {
			return nil, err
		}
		for r := range m {
			row := xs[r*in : (r+1)*in]
			var ss float32
			for _, v := range row {
				ss += v * v
			}
			inv := 1 / float32(math.Sqrt(float64(ss/float32(in)+eps)))
			for i := range row {
				row[i] = row[i] * inv * w[i]
			}
		}
	}
	if dt != F32 {
		for i := range xs {
			xs[i] = round(xs[i], dt)
		}
	}
	return xs, nil
}

// fakeGemvOut sets y [m, out] (adds to it with accumulate) to x·wᵀ + bias.
func fakeGemvOut(y, x, w, bias []float32, m, out, in int, accumulate bool) {
	for r := range m {
		for o := range out {
			s := fakeGemvRow(x, w, bias, r, o, in)
			if accumulate {
				s += y[r*out+o]
			}
			y[r*out+o] = s
		}
	}
}

// fakeGemvRow is x_r·w_o + bias_o.
func fakeGemvRow(x, w, bias []float32, r, o, in int) float32 {
	var s float32
	for k := range in {
		s += x[r*in+k] * w[o*in+k]
	}
	if bias != nil {
		s += bias[o]
	}
	return s
}

// gemv_<w>[_fx](x, norm, eps, mode, accumulate, m, in, ks, then y, w, bias,
// out for three matrices, then their scales and the scale blocks' sbr,
// sbc, sgc) (kernels/gemv.cu): y_i (+)= x·w_iᵀ + bias_i, summed in float32
// like the kernel; a matrix with out 0 is absent. The _fx kernels take
// float32 x, RMS-normalise it for mode 1 and round it to gemvX of the
// weights' dtype, as the kernel stages it; FP8 weights are Q·s
// (fakeGemvW). gemv_<w>_swiglu(x, norm, eps, m, in, ks, h, wg, bg, wu, bu,
// inter, sg, su, sbr, sbc, sgc): h = silu(xn·wgᵀ + bg)·(xn·wuᵀ + bu) in
// gemvX, xn the normalised, rounded x.
func init() {
	fakeBias := func(f *fakeGPU, p DevicePtr, n int) ([]float32, error) {
		if p == 0 {
			return nil, nil
		}
		return f.f32s(p, n)
	}
	for _, v := range []struct {
		name   string
		dt     DType
		staged bool
	}{{nameGemv(F32), F32, false}, {nameGemv(BF16), BF16, false}, {nameGemv(F16), F16, false}, {nameGemv(FP8E4M3), FP8E4M3, false},
		{nameGemvStaged(F32), F32, true}, {nameGemvStaged(BF16), BF16, true}, {nameGemvStaged(F16), F16, true},
		{nameGemvStaged(FP8E4M3), FP8E4M3, true}} {
		dt, staged := v.dt, v.staged
		fakeStaticSmem[v.name] = gemvStaticSmem
		if dt == FP8E4M3 {
			fakeStaticSmem[v.name] = gemvFP8StaticSmem
		}
		fakeKernels[v.name] = fakeKernel{26, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
			mode, accumulate, m, in := a.i32(3), a.i32(4) != 0, a.i32(5), a.i32(6)
			var x []float32
			var err error
			if staged {
				x, err = fakeGemvX(f, a.ptr(0), a.ptr(1), a.f32(2), mode == 1, m, in, gemvX(dt))
			} else {
				x, err = f.loadAny(a.ptr(0), m*in, gemvX(dt))
			}
			if err != nil {
				return err
			}
			for g := range 3 {
				base := 8 + 4*g
				out := a.i32(base + 3)
				if out == 0 {
					continue
				}
				y, err := f.f32s(a.ptr(base), m*out)
				w, err2 := fakeGemvW(f, a.ptr(base+1), out, in, dt, a.ptr(20+g), a.i32(23), a.i32(24), a.i32(25))
				bias, err3 := fakeBias(f, a.ptr(base+2), out)
				if err := errors.Join(err, err2, err3); err != nil {
					return err
				}
				fakeGemvOut(y, x, w, bias, m, out, in, accumulate)
			}
			return nil
		}}
	}
	for _, dt := range []DType{F32, BF16, F16, FP8E4M3} {
		name := nameGemvSwiGLU(dt)
		fakeStaticSmem[name] = gemvStaticSmem
		if dt == FP8E4M3 {
			fakeStaticSmem[name] = gemvFP8StaticSmem
		}
		fakeKernels[name] = fakeKernel{17, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
			m, in, inter := a.i32(3), a.i32(4), a.i32(11)
			x, err := fakeGemvX(f, a.ptr(0), a.ptr(1), a.f32(2), true, m, in, gemvX(dt))
			if err != nil {
				return err
			}
			sbr, sbc, sgc := a.i32(14), a.i32(15), a.i32(16)
			wg, err := fakeGemvW(f, a.ptr(7), inter, in, dt, a.ptr(12), sbr, sbc, sgc)
			bg, err2 := fakeBias(f, a.ptr(8), inter)
			wu, err3 := fakeGemvW(f, a.ptr(9), inter, in, dt, a.ptr(13), sbr, sbc, sgc)
			bu, err4 := fakeBias(f, a.ptr(10), inter)
			if err := errors.Join(err, err2, err3, err4); err != nil {
				return err
			}
			h := make([]float32, m*inter)
			for r := range m {
				for o := range inter {
					g, u := fakeGemvRow(x, wg, bg, r, o, in), fakeGemvRow(x, wu, bu, r, o, in)
					h[r*inter+o] = g / (1 + float32(math.Exp(float64(-g)))) * u
				}
			}
			return f.storeAny(a.ptr(6), h, gemvX(dt))
		}}
	}
}

// fp8_quant_rows_<x>(x, q, sx, in), a block a row: tensor.QuantizeFP8Row's
// quants and scale; rmsnorm_f32_to_e4m3(q, sx, x, weight, hidden,
// x_stride, eps, offset): rmsnorm's rows so quantised; fp8_swiglu_quant(hq,
// sh, g, u, sx, sg, su, inter, stride): silu(g·sx·sg)·(u·sx·su) so
// quantised; fp8_scale_out_<y>(y, d, sx, sw, bias, out, accumulate): y
// (+)= d·sx[t]·sw[o] + bias[o], d bf16; fp8_widen_bf16(wb, w, scale, br,
// bc, gc, out, in): bf16(Q·s) (kernels/fp8.cu).
func init() {
	quantRows := func(f *fakeGPU, q DevicePtr, sx DevicePtr, rows, in int, row func(r int) ([]float32, error)) error {
		qs, err := f.resolve(q, rows*in)
		ss, err2 := f.f32s(sx, rows)
		if err := errors.Join(err, err2); err != nil {
			return err
		}
		for r := range rows {
			x, err := row(r)
			if err != nil {
				return err
			}
			ss[r] = tensor.QuantizeFP8Row(qs[r*in:(r+1)*in], x)
		}
		return nil
	}
	for _, dt := range []DType{F32, BF16, F16} {
		fakeKernels[nameFP8QuantRows(dt)] = fakeKernel{4, func(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
			rows, in := grid[0], a.i32(3)
			return quantRows(f, a.ptr(1), a.ptr(2), rows, in, func(r int) ([]float32, error) {
				return f.loadAny(a.ptr(0).Add(ElemSize(dt)*r*in), in, dt)
			})
		}}
		fakeKernels[nameFP8ScaleOut(dt)] = fakeKernel{7, func(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
			m, out, accumulate := grid[0], a.i32(5), a.i32(6) != 0
			y, err := f.loadAny(a.ptr(0), m*out, dt)
			d, err2 := f.loadAny(a.ptr(1), m*out, BF16)
			sx, err3 := f.f32s(a.ptr(2), m)
			sw, err4 := f.f32s(a.ptr(3), out)
			var bias []float32
			var err5 error
			if a.ptr(4) != 0 {
				bias, err5 = f.f32s(a.ptr(4), out)
			}
			if err := errors.Join(err, err2, err3, err4, err5); err != nil {
				return err
			}
			for t := range m {
				for o := range out {
					v := d[t*out+o] * (sx[t] * sw[o])
					if bias != nil {
						v += bias[o]
					}
					if accumulate {
						v += y[t*out+o]
					}
					y[t*out+o] = v
				}
			}
			return f.storeAny(a.ptr(0), y, dt)
		}}
	}
	fakeKernels[nameRMSNormFP8()] = fakeKernel{8, func(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
		hidden, xs, eps, offset := a.i32(4), a.i64(5), a.f32(6), a.f32(7)
		w, err := f.f32s(a.ptr(3), hidden)
		if err != nil {
			return err
		}
		return quantRows(f, a.ptr(0), a.ptr(1), grid[0], hidden, func(r int) ([]float32, error) {
			x, err := f.f32s(a.ptr(2).Add(4*r*xs), hidden)
			if err != nil {
				return nil, err
			}
			var ss float32
			for _, v := range x {
				ss += v * v
			}
			inv := 1 / float32(math.Sqrt(float64(ss/float32(hidden)+eps)))
			out := make([]float32, hidden)
			for i, v := range x {
				out[i] = v * inv * (w[i] + offset)
			}
			return out, nil
		})
	}}
	fakeKernels[nameFP8SwiGLUQuant()] = fakeKernel{9, func(f *fakeGPU, _ string, grid [3]int, a fakeArgs) error {
		rows, inter, stride := grid[0], a.i32(7), a.i64(8)
		sx, err := f.f32s(a.ptr(4), rows)
		sg, err2 := f.f32s(a.ptr(5), inter)
		su, err3 := f.f32s(a.ptr(6), inter)
		if err := errors.Join(err, err2, err3); err != nil {
			return err
		}
		return quantRows(f, a.ptr(0), a.ptr(1), rows, inter, func(r int) ([]float32, error) {
			g, err := f.loadAny(a.ptr(2).Add(2*r*stride), inter, BF16)
			u, err2 := f.loadAny(a.ptr(3).Add(2*r*stride), inter, BF16)
			if err := errors.Join(err, err2); err != nil {
				return nil, err
			}
			h := make([]float32, inter)
			for i := range h {
				gv, uv := g[i]*(sx[r]*sg[i]), u[i]*(sx[r]*su[i])
				h[i] = gv / (1 + float32(math.Exp(float64(-gv)))) * uv
			}
			return h, nil
		})
	}}
	fakeKernels[nameFP8WidenBF16()] = fakeKernel{8, func(f *fakeGPU, _ string, _ [3]int, a fakeArgs) error {
		out, in := a.i32(6), a.i32(7)
		w, err := fakeGemvW(f, a.ptr(1), out, in, FP8E4M3, a.ptr(2), a.i32(3), a.i32(4), a.i32(5))
		if err != nil {
			return err
		}
		return f.storeAny(a.ptr(0), w, BF16)
	}}
}

// fakeGemvW is a gemv kernel's [out, in] weights at w in dt as float32;
// FP8 ones Q[o, i]·scale[(o/sbr)·sgc + i/sbc], each product rounded to
// float32 (device.FP8Skinny's W·s).
func fakeGemvW(f *fakeGPU, w DevicePtr, out, in int, dt DType, scale DevicePtr, sbr, sbc, sgc int) ([]float32, error) {
	if dt != FP8E4M3 {
		return f.loadAny(w, out*in, dt)
	}
	q, err := f.resolve(w, out*in)
	if err != nil {
		return nil, err
	}
	s, err := f.f32s(scale, (out+sbr-1)/sbr*sgc)
	if err != nil {
		return nil, err
	}
	vals := make([]float32, out*in)
	for o := range out {
		for i := range in {
			vals[o*in+i] = tensor.FP8E4M3ToF32(q[o*in+i]) * s[o/sbr*sgc+i/sbc]
		}
	}
	return vals, nil
}
