package cuda

import (
	"fmt"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// FP8 linear layers (kernels/fp8.cu, device.FP8Path): weights in e4m3
// with float32 scales, kept so on the device. A decode batch streams them
// through the skinny kernels (gemv.go: gemv_fp8*, with their fused norm,
// SwiGLU and residual add) at a byte per weight; a larger batch quantises its
// activations per token (once for the layers sharing x; fused with the
// norm before them, or with the SwiGLU before the down projection) and
// runs cuBLASLt's e4m3×e4m3 GEMM, scaled by sx[t]·s[o]: in the GEMM's
// epilogue where cuBLASLt has outer-vector scaling for the shape
// (BlasLt.RowScaled; none with cuBLASLt 13 on sm_90), else by a pass over
// its raw bf16 products (fp8_scale_out_*, fp8_swiglu_quant) that also
// adds the residual or rounds the output to 16 bits; vLLM and SGLang apply
// such scales in a CUTLASS epilogue. Block-scaled weights (and shapes the
// FP8 kernels do not tile) are widened to bf16 per call for a bf16 GEMM.

// FP8E4M3 is e4m3 storage (cuBLASLt's CUDA_R_8F_E4M3).
const FP8E4M3 = tensor.FP8E4M3

// fp8MinArch is the first architecture with e4m3 tensor cores and
// conversions (Ada, sm_89).
const fp8MinArch = 89

// fp8Weights describes the scales of an FP8 Matrix.
type fp8Weights struct {
	shape tensor.ScaledFP8 // shape and scale blocks, no data
	scale DevicePtr        // float32 [ceil(out/br), gc]; per row for PerRow weights
	br    int              // rows per scale block (1 for PerRow weights)
	bc    int              // columns per scale block
	gc    int              // scale blocks per row
}

// FP8Weights reports whether the device multiplies e4m3 weights
// (device.FP8Ops): compute capability 8.9 or later.
func (o *ModelOps) FP8Weights() bool { return o.dev.Info.Arch() >= fp8MinArch }

var _ device.FP8Ops = (*ModelOps)(nil)

// FP8Matrix uploads w's quants as they are and its scales as float32
// (one per row when the weight has one per tensor or per channel, which
// the GEMM's epilogue indexes by row), with bias ([out] or nil).
func (o *ModelOps) FP8Matrix(w tensor.ScaledFP8, bias []float32) (device.Matrix, error) {
	if !o.FP8Weights() {
		return nil, fmt.Errorf("cuda: weight %s: FP8 weights need compute capability 8.%d or later, have %d.%d", w.Q.Name, fp8MinArch%10, o.dev.Info.Major, o.dev.Info.Minor)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if w.Q.Data == nil {
		return nil, fmt.Errorf("cuda: weight %s: FP8 weights without data", w.Q.Name)
	}
	out, in := w.Out(), w.In()
	if bias != nil && len(bias) != out {
		return nil, fmt.Errorf("cuda: weight %s: bias of %d values for %d outputs", w.Q.Name, len(bias), out)
	}
	f := &fp8Weights{shape: w, br: w.BlockRows, bc: w.BlockCols, gc: w.ScaleCols()}
	f.shape.Q.Data, f.shape.Scales = nil, nil
	scales := w.Scales
	if w.PerRow() {
		scales, f.br, f.bc, f.gc = w.RowScales(), 1, in, 1
	}
	m := &Matrix{out: out, in: in, dtype: FP8E4M3, fp8: f}
	var err error
	if m.ptr, err = o.ownedAlloc(out * in); err != nil {
		return nil, fmt.Errorf("cuda: weight %s (%d bytes): %w", w.Q.Name, out*in, err)
	}
	fail := func(err error) (device.Matrix, error) {
		for _, p := range []DevicePtr{m.ptr, f.scale, m.bias} {
			if p != 0 {
				o.ownedFree(p)
			}
		}
		return nil, fmt.Errorf("cuda: weight %s: %w", w.Q.Name, err)
	}
	rows := max(1, weightChunkBytes/in)
	for r := 0; r < out; r += rows {
		end := min(r+rows, out)
		if err := CopyHtoD(o.dev, m.ptr.Add(r*in), w.Q.Data[r*in:end*in]); err != nil {
			return fail(fmt.Errorf("upload: %w", err))
		}
	}
	if f.scale, err = o.uploadOwned(scales); err != nil {
		return fail(fmt.Errorf("upload scales: %w", err))
	}
	if bias != nil {
		if m.bias, err = o.uploadOwned(bias); err != nil {
			return fail(fmt.Errorf("upload bias: %w", err))
		}
	}
	return m, nil
}

// QuantFP8Rows enqueues fp8_quant_rows_<xdt>: each of the rows rows of x
// [rows, in] (float32 or 16-bit) to e4m3 in q with its scale in sx
// (tensor.QuantizeFP8Row).
func (k *Kernels) QuantFP8Rows(s Stream, q, sx, x DevicePtr, xdt DType, rows, in int) error {
	if rows < 1 || in%2 != 0 {
		return fmt.Errorf("fp8 quantise: %d rows of %d (an even width)", rows, in)
	}
	return k.launchFP8QuantRows(s, LaunchConfig{Grid: D1(rows), Block: D1(fp8RowThreads(in))}, xdt, fp8QuantRowsArgs{X: x, Q: q, Sx: sx, In: in})
}

// fp8RowThreads is the block of the FP8 row kernels (a block a row):
// enough threads to hold a row in registers at fp8RowChunks chunks of 8
// values each, where a row of up to 32,768 values fits.
func fp8RowThreads(width int) int {
	return rowThreads((width + 8*fp8RowChunks - 1) / (8 * fp8RowChunks))
}

// NormQuantFP8 enqueues rmsnorm_f32_to_e4m3: the rows rows of float32 x
// (xStride apart) RMS-normalised by weight (+ offset) and quantised to
// e4m3 per row into q [rows, hidden] and sx [rows].
func (k *Kernels) NormQuantFP8(s Stream, q, sx, x, weight DevicePtr, rows, hidden, xStride int, eps, offset float32) error {
	if rows < 1 || hidden%2 != 0 {
		return fmt.Errorf("fp8 norm: %d rows of %d (an even width)", rows, hidden)
	}
	return k.launchRMSNormFP8(s, LaunchConfig{Grid: D1(rows), Block: D1(fp8RowThreads(hidden))},
		rmsNormFP8Args{Q: q, Sx: sx, X: x, Weight: weight, Hidden: hidden, XStride: xStride, Eps: eps, WeightOffset: offset})
}

// FP8SwiGLUQuant enqueues fp8_swiglu_quant: h = silu(g·sx·sg)·(u·sx·su)
// from the raw bf16 products g and u ([rows, inter], rows stride
// elements apart) into e4m3 hq [rows, inter] and its scales sh [rows].
func (k *Kernels) FP8SwiGLUQuant(s Stream, hq, sh, g, u, sx, sg, su DevicePtr, rows, inter, stride int) error {
	if rows < 1 || inter%2 != 0 {
		return fmt.Errorf("fp8 swiglu: %d rows of %d (an even width)", rows, inter)
	}
	return k.launchFP8SwiGLUQuant(s, LaunchConfig{Grid: D1(rows), Block: D1(fp8RowThreads(inter))},
		fp8SwiGLUQuantArgs{Hq: hq, Sh: sh, G: g, U: u, Sx: sx, Sg: sg, Su: su, Inter: inter, Stride: stride})
}

// ScaleFP8Out enqueues fp8_scale_out_<ydt>: y = d·(sx[t]·sw[o]) + bias
// (added to y with accumulate) over [rows, out], d the raw e4m3 product
// in bf16; a 16-bit y may be d itself.
func (k *Kernels) ScaleFP8Out(s Stream, y DevicePtr, ydt DType, d, sx, sw, bias DevicePtr, rows, out int, accumulate bool) error {
	acc := 0
	if accumulate {
		acc = 1
	}
	return k.launchFP8ScaleOut(s, LaunchConfig{Grid: D1(rows), Block: D1(min(rowThreads((out+7)/8), 256))}, ydt,
		fp8ScaleOutArgs{Y: y, D: d, Sx: sx, Sw: sw, Bias: bias, Out: out, Accumulate: acc})
}

// WidenFP8 enqueues fp8_widen_bf16: the FP8 matrix m's values W·s as bf16
// into wb [out, in].
func (k *Kernels) WidenFP8(s Stream, wb DevicePtr, m *Matrix) error {
	if m.fp8 == nil {
		return fmt.Errorf("fp8 widen: a [%d, %d] %v matrix", m.out, m.in, m.dtype)
	}
	f := m.fp8
	return k.launchFP8WidenBF16(s, flatConfig(m.out*m.in),
		fp8WidenBF16Args{Wb: wb, W: m.ptr, Scale: f.scale, Br: f.br, Bc: f.bc, Gc: f.gc, Out: m.out, In: m.in})
}

// fp8X is x quantised per token for the FP8 GEMMs of a group of linear
// layers that share it (q, k and v): made once, by the first.
type fp8X struct {
	q, sx Buffer // e4m3 [rows, in]; float32 [rows]
}

// free releases the buffers (once the products reading them are enqueued:
// one stream), the newest first.
func (f *fp8X) free(mem *Allocator) {
	for _, b := range []Buffer{f.sx, f.q} {
		if b.Ptr != 0 {
			mem.Free(b)
		}
	}
	*f = fp8X{}
}

// fp8Raw enqueues d = qx·Qᵀ [rows, m.out] in bf16: the raw sums of the
// e4m3 product of xq's quantised x and m's quants, their scales left to
// the pass that reads d (bf16, unlike f16, holds any such sum).
func (o *ModelOps) fp8Raw(m *Matrix, xq *fp8X, rows int, d DevicePtr) error {
	g := Gemm{M: rows, N: m.out, K: m.in, TransB: true, DType: FP8E4M3, OutDType: BF16}
	if err := o.lt.Matmul(o.stream, g, xq.q.Ptr, m.ptr, d, 1, 0); err != nil {
		return fmt.Errorf("fp8 %dx%d·%dx%dᵀ: %w", rows, m.in, m.out, m.in, err)
	}
	return nil
}

// fp8Linear enqueues y = x·Wᵀ + b (y += … with accumulate) for rows rows
// of x through the FP8 matrix m, on the path device.FP8PathOf names; x
// is float32 or, on the FP8Scaled path, 16-bit (xdt), y float32 or, on
// that path without accumulate, 16-bit (ydt). xq holds x quantised per
// token for the linear layers of a group (the caller frees it; a caller
// may also fill it beforehand, x then unread). Other scratch buffers are
// freed once enqueued (one stream), the newest first, which leaves the
// allocator's free lists as they were (the next forward, a graph's
// capture after its dry run, gets the same addresses).
func (o *ModelOps) fp8Linear(m *Matrix, x DevicePtr, xdt DType, y DevicePtr, ydt DType, rows int, accumulate bool, xq *fp8X) (err error) {
	var scratch []Buffer
	defer func() {
		for i := len(scratch) - 1; i >= 0; i-- {
			o.dev.Mem.Free(scratch[i])
		}
	}()
	alloc := func(bytes int) DevicePtr {
		if err != nil {
			return 0
		}
		var b Buffer
		if b, err = o.dev.Mem.Alloc(bytes); err == nil {
			scratch = append(scratch, b)
		}
		return b.Ptr
	}
	path := device.FP8PathOf(rows, m.fp8.shape)
	if path != device.FP8Scaled && (xdt != F32 || ydt != F32) || ydt != F32 && accumulate {
		return fmt.Errorf("fp8 linear: %v x into %v y (accumulate %v) on the %v path", xdt, ydt, accumulate, path)
	}
	switch path {
	case device.FP8Skinny:
		c := GemvCall{X: x, Staged: true, M: rows, In: m.in, WDType: FP8E4M3, Accumulate: accumulate,
			Targets: []GemvTarget{m.gemvTarget(y)}}
		if !gemvStages(rows, m.in, FP8E4M3) { // x to bf16 first, read by the kernel from memory
			if c.X, c.Staged = alloc(2*rows*m.in), false; err != nil {
				return err
			}
			if err := o.k.Convert(o.stream, c.X, x, rows*m.in, F32, BF16); err != nil {
				return err
			}
		}
		return o.k.Gemv(o.stream, c)
	case device.FP8Scaled:
		if xq.q.Ptr == 0 {
			if xq.q, err = o.dev.Mem.Alloc(rows * m.in); err != nil {
				return err
			}
			if xq.sx, err = o.dev.Mem.Alloc(4 * rows); err != nil {
				return err
			}
			if err := o.k.QuantFP8Rows(o.stream, xq.q.Ptr, xq.sx.Ptr, x, xdt, rows, m.in); err != nil {
				return err
			}
		}
		g := Gemm{M: rows, N: m.out, K: m.in, TransB: true, DType: FP8E4M3, OutDType: F32}
		if ydt == F32 && o.lt.RowScaled(g) { // the scales applied in cuBLASLt's epilogue
			g.RowScales = true
			beta := float32(0)
			if accumulate {
				beta = 1
			}
			if err := o.lt.MatmulScaled(o.stream, g, xq.q.Ptr, m.ptr, y, xq.sx.Ptr, m.fp8.scale, 1, beta); err != nil {
				return fmt.Errorf("fp8 %dx%d·%dx%dᵀ: %w", rows, m.in, m.out, m.in, err)
			}
			if m.bias != 0 {
				return o.k.AddRowF32(o.stream, y, m.bias, rows, m.out)
			}
			return nil
		}
		// The raw products in bf16, scaled by a pass over them (into y
		// itself where y is 16-bit).
		d := y
		if ydt == F32 {
			d = alloc(2 * rows * m.out)
		}
		if err != nil {
			return err
		}
		if err := o.fp8Raw(m, xq, rows, d); err != nil {
			return err
		}
		return o.k.ScaleFP8Out(o.stream, y, ydt, d, xq.sx.Ptr, m.fp8.scale, m.bias, rows, m.out, accumulate)
	}
	wb, xb := alloc(2*m.out*m.in), alloc(2*rows*m.in)
	if err != nil {
		return err
	}
	if err := o.k.WidenFP8(o.stream, wb, m); err != nil {
		return err
	}
	if err := o.k.Convert(o.stream, xb, x, rows*m.in, F32, BF16); err != nil {
		return err
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	g := Gemm{M: rows, N: m.out, K: m.in, TransB: true, DType: BF16, OutDType: F32}
	if err := o.lt.Matmul(o.stream, g, xb, wb, y, 1, beta); err != nil {
		return fmt.Errorf("fp8 widened %dx%d·%dx%dᵀ: %w", rows, m.in, m.out, m.in, err)
	}
	if m.bias != 0 {
		return o.k.AddRowF32(o.stream, y, m.bias, rows, m.out)
	}
	return nil
}
