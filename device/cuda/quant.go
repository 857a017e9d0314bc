package cuda

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// Block formats kept compact on the device (kernels/quant.cu): a Q8_0,
// Q4_K, Q5_K, Q6_K, MXFP4 or AWQ4 matrix is uploaded as its blocks, not
// widened, so it takes the memory it takes on disk and a decode step
// reads that many bytes. A decode batch (1..quantMaxRows rows) runs the
// fused dequant-GEMV; a larger batch widens the matrix to bf16 per call, a
// bounded slice of rows at a time, into a scratch buffer that cuBLASLt's
// bf16 GEMM reads (as FP8's widened path does). Embedding tables gather
// their rows dequantised.

// quantLayout is how a block format lies on the device: per block of
// values, body bytes in 16-byte words, and the scales a format keeps at
// the block's end or start in a plane of their own (so that every body
// load is aligned); together exactly the stored bytes, each row's scales
// padded to an even count of bytes (the kernels index the plane in u16).
type quantLayout struct {
	values int // per block
	body   int // body bytes per block
	// scaleAt is where the block's scale bytes sit in the stored block
	// (moved to the scale plane), or -1: the block is uploaded as stored.
	scaleAt    int
	scaleBytes int // per block: f16 d, E8M0 e, or AWQ's f16 s | u16 z
}

var quantLayouts = map[DType]quantLayout{
	tensor.Q8_0:      {values: 32, body: 32, scaleAt: 0, scaleBytes: 2},     // f16 d | qs[32]
	tensor.Q4_K:      {values: 256, body: 144, scaleAt: -1},                 // as stored
	tensor.Q5_K:      {values: 256, body: 176, scaleAt: -1},                 // as stored
	tensor.Q6_K:      {values: 256, body: 208, scaleAt: 208, scaleBytes: 2}, // ql | qh | sc | f16 d
	tensor.MXFP4:     {values: 32, body: 16, scaleAt: 0, scaleBytes: 1},     // e | qs[16]
	tensor.AWQ4_G32:  {values: 32, body: 16, scaleAt: 0, scaleBytes: 4},     // f16 s | u16 z | qs[16]
	tensor.AWQ4_G64:  {values: 64, body: 32, scaleAt: 0, scaleBytes: 4},     // f16 s | u16 z | qs[32]
	tensor.AWQ4_G128: {values: 128, body: 64, scaleAt: 0, scaleBytes: 4},    // f16 s | u16 z | qs[64]
}

// QuantOnDevice reports whether matrices stored in dt stay in their
// blocks on the device (ModelOpsOptions.KeepQuantized).
func QuantOnDevice(dt DType) bool {
	_, ok := quantLayouts[dt]
	return ok
}

// KeepsCompact is device.CompactWeights: the matrices Matrix uploads
// compact.
func (o *ModelOps) KeepsCompact(dt DType) bool { return o.opts.KeepQuantized && QuantOnDevice(dt) }

var _ device.CompactWeights = (*ModelOps)(nil)

// quantName is dt as the kernels' names spell it ("q4_k").
func quantName(dt DType) string { return strings.ToLower(dt.String()) }

// quantPlan is a compact matrix's device layout.
type quantPlan struct {
	dt       DType
	out, in  int
	blocks   int // per row
	bodyRow  int // body bytes per row
	scaleRow int // scale-plane bytes per row, even (0: none)
}

func planQuant(dt DType, out, in int) (quantPlan, error) {
	l, ok := quantLayouts[dt]
	switch {
	case !ok:
		return quantPlan{}, fmt.Errorf("%v is not kept compact on the device", dt)
	case out <= 0 || in <= 0 || in%l.values != 0:
		return quantPlan{}, fmt.Errorf("%v matrix [%d, %d]: rows must be whole blocks of %d", dt, out, in, l.values)
	}
	p := quantPlan{dt: dt, out: out, in: in, blocks: in / l.values}
	p.bodyRow = p.blocks * l.body
	if l.scaleAt >= 0 {
		p.scaleRow = (l.scaleBytes*p.blocks + 1) &^ 1
	}
	return p, nil
}

// scaleOffset is where the scale plane starts in the matrix's allocation:
// after the body, 16-byte aligned.
func (p quantPlan) scaleOffset() int { return (p.out*p.bodyRow + 15) &^ 15 }

// Bytes is the device memory the matrix takes.
func (p quantPlan) Bytes() int {
	if p.scaleRow == 0 {
		return p.out * p.bodyRow
	}
	return p.scaleOffset() + p.out*p.scaleRow
}

// pack lays rows of stored blocks (whole rows of src) out as the device
// holds them: their bodies into body and, for a format with a scale
// plane, their scales into scales.
func (p quantPlan) pack(src, body, scales []byte) {
	l := quantLayouts[p.dt]
	stored := tensor.BlockBytes(p.dt)
	if l.scaleAt < 0 {
		copy(body, src)
		return
	}
	for b := 0; b*stored < len(src); b++ {
		blk := src[b*stored : (b+1)*stored]
		copy(scales[p.scaleAt(b):], blk[l.scaleAt:l.scaleAt+l.scaleBytes])
		if l.scaleAt == 0 {
			copy(body[b*l.body:], blk[l.scaleBytes:])
		} else {
			copy(body[b*l.body:], blk[:l.scaleAt])
		}
	}
}

// scaleAt is where block b (counted over whole rows) has its scale bytes
// in the scale plane.
func (p quantPlan) scaleAt(b int) int {
	return b/p.blocks*p.scaleRow + b%p.blocks*quantLayouts[p.dt].scaleBytes
}

// quantMatrix is what a compact Matrix adds: its plan and scale plane
// (0 when the format has none); Matrix.ptr is the body.
type quantMatrix struct {
	plan  quantPlan
	scale DevicePtr
}

// keepsQuantized reports whether Matrix uploads w compact: the option is
// on, the format has a device layout, and the bytes are there (a
// synthetic or lazily computed weight is widened as before).
func (o *ModelOps) keepsQuantized(w tensor.Weight) bool {
	return o.opts.KeepQuantized && QuantOnDevice(w.DType) && w.Data != nil && len(w.Shape) == 2
}

// quantMatrixUpload uploads w's blocks in the device layout, one chunk of
// rows at a time, with bias ([out] or nil).
func (o *ModelOps) quantMatrixUpload(w tensor.Weight, bias []float32) (*Matrix, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	p, err := planQuant(w.DType, w.Shape[0], w.Shape[1])
	if err != nil {
		return nil, err
	}
	if bias != nil && len(bias) != p.out {
		return nil, fmt.Errorf("bias of %d values for %d outputs", len(bias), p.out)
	}
	m := &Matrix{out: p.out, in: p.in, dtype: p.dt, quant: &quantMatrix{plan: p}}
	if m.ptr, err = o.ownedAlloc(p.Bytes()); err != nil {
		return nil, fmt.Errorf("%d bytes: %w", p.Bytes(), err)
	}
	if p.scaleRow > 0 {
		m.quant.scale = m.ptr.Add(p.scaleOffset())
	}
	fail := func(err error) (*Matrix, error) {
		o.ownedFree(m.ptr)
		if m.bias != 0 {
			o.ownedFree(m.bias)
		}
		return nil, err
	}
	storedRow, _ := w.DType.RowBytes(p.in)
	rows := max(1, weightChunkBytes/storedRow)
	var body, scales []byte
	for r := 0; r < p.out; r += rows {
		end := min(r+rows, p.out)
		src := w.Data[r*storedRow : end*storedRow]
		if p.scaleRow == 0 {
			body = src // as stored
		} else {
			body, scales = make([]byte, (end-r)*p.bodyRow), make([]byte, (end-r)*p.scaleRow)
			p.pack(src, body, scales)
			if err := CopyHtoD(o.dev, m.quant.scale.Add(r*p.scaleRow), scales); err != nil {
				return fail(fmt.Errorf("upload: %w", err))
			}
		}
		if err := CopyHtoD(o.dev, m.ptr.Add(r*p.bodyRow), body); err != nil {
			return fail(fmt.Errorf("upload: %w", err))
		}
	}
	if bias != nil {
		if m.bias, err = o.uploadOwned(bias); err != nil {
			return fail(fmt.Errorf("upload bias: %w", err))
		}
	}
	return m, nil
}

// QGemvCall is one launch of qgemv_<q>: y_i = x·W_iᵀ + bias_i (y_i += …
// with Accumulate) for up to three compact matrices of one format and
// width sharing float32 x [M, In], 1 <= M <= GemvMaxRows (qgemvIntMaxRows
// with XQ).
type QGemvCall struct {
	X DevicePtr
	// Staged: x goes through shared memory, transformed by Stage
	// (qgemvStages must hold); else it is read in place and Stage must be
	// GemvRound.
	Staged     bool
	Stage      GemvStage
	Norm       DevicePtr // GemvRMSNorm: [In] float32
	Eps        float32
	M          int
	Accumulate bool
	Mats       []*Matrix
	Y          []DevicePtr // one per matrix, [M, Out] float32
	// XQ is x as QQuantX wrote it for the matrices' format, with Stage
	// applied (X is then not read), or 0. It takes the integer kernels
	// and up to qgemvIntMaxRows rows.
	XQ DevicePtr
}

// qgemvBlocksPerSM and qgemvIntBlocksPerSM are how many qgemv and
// qgemv_int blocks stay resident per SM (the minimum their
// __launch_bounds__ ask for); the grid fills them once.
const (
	qgemvBlocksPerSM    = 2
	qgemvIntBlocksPerSM = 4
)

// qintPerSM is how many qgemv_int blocks a launch's grid puts on each SM.
func (k *Kernels) qintPerSM() int {
	if k.qintBlocksPerSM > 0 {
		return k.qintBlocksPerSM
	}
	return qgemvIntBlocksPerSM
}

// qgemvIntKernels selects the decode kernels: the integer ones
// (qgemv_int_l<L>_<q>: x staged as qgemvFormatLimbs int8 limbs, dp4a dot products)
// wherever their staged x fits (qgemvIntStages), else the float ones
// (qgemv_<q>: each weight widened to float32, exact products).
// GOSLING_QGEMV=float keeps the float kernels everywhere, to compare the
// two in one build; GOSLING_QGEMV=int (or unset) is the default; any
// other value fails the launches (qgemvKernelsErr).
var qgemvIntKernels, qgemvKernelsErr = func() (bool, error) {
	switch v := os.Getenv("GOSLING_QGEMV"); v {
	case "", "int":
		return true, nil
	case "float":
		return false, nil
	default:
		return false, fmt.Errorf("GOSLING_QGEMV=%q: want int or float", v)
	}
}()

// How the integer kernels get x (GOSLING_QGEMV_PREQ):
//
//   - qgemvPreqStaged (unset or "1"): ModelOps quantises x once with
//     qquant_x_l<L>_<q> into a buffer of the forward's arena, which every
//     launch sharing x reads (q, k and v; gate and up); each block copies
//     it into its shared memory where it fits, and reads it in place
//     (global memory, through L1) beyond: up to qgemvIntMaxRows rows of
//     any width.
//   - qgemvPreqInPlace ("inplace"): the same buffer, always read in
//     place.
//   - qgemvPreqOff ("0"): every block quantises x itself into its shared
//     memory (the earlier path): only what fits there, at most
//     GemvMaxRows rows; the rest takes the float kernels.
//
// Any other value fails the launches (qgemvKernelsErr).
const (
	qgemvPreqOff = iota
	qgemvPreqStaged
	qgemvPreqInPlace
)

var qgemvPreq, qgemvPreqErr = func() (int, error) {
	switch v := os.Getenv("GOSLING_QGEMV_PREQ"); v {
	case "", "1":
		return qgemvPreqStaged, nil
	case "inplace":
		return qgemvPreqInPlace, nil
	case "0":
		return qgemvPreqOff, nil
	default:
		return qgemvPreqOff, fmt.Errorf("GOSLING_QGEMV_PREQ=%q: want 1, inplace or 0", v)
	}
}()

// qgemvIntRows is the most rows of x that compact matrices serve by the
// integer kernels on pre-quantised x rather than widened to bf16 for
// cuBLASLt (quantMaxRows): 16, or as GOSLING_QGEMV_INT_ROWS
// (1..qgemvIntMaxRows) says, to find the crossing on a GPU. The integer
// kernels read the weights once per QGEMV_INT_GROUP rows of x (from L1 or
// L2 after the first pass), and their work grows with the rows: about
// 36 instructions a row of x per 32 weights, two thirds of them dp4a at
// half the issue rate, some 0.5 ms a row for Llama-3.1-8B's 7.5e9 matrix
// weights on an H100 (estimated, not measured); the widened GEMM's cost
// is flat, about 12 ms a step (4.9 GB of Q4_K_M read, 16 GB of bf16
// written and read again). The crossing is estimated near 25 rows; 16
// keeps a margin until a GPU measures it.
// A value outside 1..qgemvIntMaxRows fails the launches, as a bad
// GOSLING_QGEMV_PREQ does.
var qgemvIntRows, qgemvIntRowsErr = func() (int, error) {
	env := os.Getenv("GOSLING_QGEMV_INT_ROWS")
	if env == "" {
		return 16, nil
	}
	if v, err := strconv.Atoi(env); err == nil && v >= 1 && v <= qgemvIntMaxRows {
		return v, nil
	}
	return 16, fmt.Errorf("GOSLING_QGEMV_INT_ROWS=%q: want 1 to %d", env, qgemvIntMaxRows)
}()

// qgemvLimbs, when set (GOSLING_QGEMV_LIMBS=1, 2 or 3; SetQGemvLimbs),
// is how many int8 limbs the integer kernels stage each value of x as
// (quant.cu's L) for every format; 0 leaves it to qgemvFormatLimbs. A
// value other than 1, 2 or 3 fails the launches, as a bad
// GOSLING_QGEMV_PREQ does.
var qgemvLimbs, qgemvLimbsErr = func() (int, error) {
	switch v := os.Getenv("GOSLING_QGEMV_LIMBS"); v {
	case "":
		return 0, nil
	case "1", "2", "3":
		return int(v[0] - '0'), nil
	default:
		return 0, fmt.Errorf("GOSLING_QGEMV_LIMBS=%q: want 1, 2 or 3", v)
	}
}()

// qgemvFormatLimbs is the limbs x takes for matrices in dt unless
// qgemvLimbs says otherwise. GGUF's formats take one: llama.cpp's 8-bit
// activations (x within 2^−7 of its 32-value unit's largest |x|), as the
// CPU's K-quant kernels quantise x too (Q8_K), for a third of the dot
// products and bytes of x. AWQ, GPTQ and MXFP4 take three (within
// 2^−23, float32's accuracy), as vLLM's kernels keep 16-bit activations
// for them.
func qgemvFormatLimbs(dt DType) int {
	if qgemvLimbs != 0 {
		return qgemvLimbs
	}
	switch dt {
	case tensor.Q8_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K:
		return 1
	}
	return 3
}

// SetQGemvLimbs makes the integer decode kernels stage x as limbs limbs
// for every format (1, 2 or 3; 0: each format's own, qgemvFormatLimbs)
// and returns the previous setting: for tests that run each in one
// process. Launches and quantised rows read it as they are enqueued, so
// it must not change while a model on the GPU runs.
func SetQGemvLimbs(limbs int) (int, error) {
	if limbs < 0 || limbs > 3 {
		return qgemvLimbs, fmt.Errorf("%d limbs: want 1, 2 or 3 (0: each format's own)", limbs)
	}
	prev := qgemvLimbs
	qgemvLimbs, qgemvLimbsErr = limbs, nil
	return prev, nil
}

// quantPreq reports whether ModelOps quantises x for the integer kernels
// once per shared x (QQuantX) rather than in each block.
func quantPreq() bool { return qgemvIntKernels && qgemvPreq != qgemvPreqOff }

// quantMaxRows is the most rows of x for which a compact matrix runs its
// decode kernels (qgemv) rather than the widened GEMM: qgemvIntRows on
// pre-quantised x, else GemvMaxRows (the float kernels' accumulators).
func quantMaxRows() int {
	if quantPreq() {
		return qgemvIntRows
	}
	return GemvMaxRows
}

// QuantDecodeRows is quantMaxRows, for tests beyond this package: the
// batches up to it take the compact matrices' decode kernels (float32
// products of the exact weights), larger ones the widened bf16 GEMM.
func QuantDecodeRows() int { return quantMaxRows() }

// qiLayout names how format dt cuts a row into the integer path's units
// of 32 values (quant.cu's Q::pos): formats of one layout read the same
// quantised x, so a launch group of another format (Q6_K's v beside
// Q4_K's q and k) quantises x again only when the layout differs.
func qiLayout(dt DType) int {
	switch dt {
	case tensor.Q4_K, tensor.Q5_K:
		return 1 // units of two runs 32 apart in 64-value sub-blocks
	case tensor.Q6_K:
		return 2 // two runs 64 apart in 128-value halves
	}
	return 0 // 32 consecutive values
}

// qiRowBytes is the shared memory qgemv_int stages one row of x of width
// in in (quant.cu's qi_row_bytes) for matrices in dt: qiRowBytesL.
func qiRowBytes(in int, dt DType) int { return qiRowBytesL(in, qgemvFormatLimbs(dt)) }

// qiRowBytesL is a row of x of width in staged as limbs limbs: per unit
// of 32 values limbs limbs of 32 bytes, the runs' two sums and the
// unit's scale, rows 16-byte aligned.
func qiRowBytesL(in, limbs int) int { return ((32*limbs+12)*(in/32) + 15) &^ 15 }

// qgemvIntMaxBytes bounds qgemv_int's staged x: the 48 KiB a launch may
// use without opting in, less its static shared memory.
const qgemvIntMaxBytes = 48<<10 - gemvStaticSmem

// qgemvIntStages reports whether the integer kernels take m rows of x of
// width in, each block quantising x itself (a QGemvCall without XQ).
func qgemvIntStages(m, in int, dt DType) bool {
	return qgemvIntKernels && m <= GemvMaxRows && m*qiRowBytes(in, dt) <= qgemvIntMaxBytes
}

// qgemvStages reports whether m rows of float32 x of width in fit staged
// in shared memory: as integers (qgemvIntStages), or as float32.
func qgemvStages(m, in int, dt DType) bool {
	return qgemvIntStages(m, in, dt) || 4*m*in <= gemvStagedBytes
}

// qgemvSplit is how many warps share a pair of rows: enough that the
// launch has about gemvWantWarps warps, while each lane keeps at least
// two units of 32 values.
func qgemvSplit(rows, in int) int {
	pairs, units := (rows+1)/2, in/32
	ks := 1
	for ks < gemvWarps && pairs*ks < gemvWantWarps && units/(2*ks*32) >= 2 {
		ks *= 2
	}
	return ks
}

// checkQGemv checks c's shape: compact matrices of one format and width,
// and the staging (or the pre-quantised x).
func checkQGemv(c QGemvCall) error {
	if len(c.Mats) == 0 || len(c.Mats) > gemvMaxGroup || len(c.Y) != len(c.Mats) {
		return fmt.Errorf("qgemv: %d matrices, %d outputs (1 to %d)", len(c.Mats), len(c.Y), gemvMaxGroup)
	}
	m0 := c.Mats[0]
	for _, m := range c.Mats {
		if m.quant == nil || m.dtype != m0.dtype || m.in != m0.in {
			return fmt.Errorf("qgemv: a [%d, %d] %v matrix beside a [%d, %d] %v one", m.out, m.in, m.dtype, m0.out, m0.in, m0.dtype)
		}
	}
	if c.XQ != 0 {
		switch {
		case !qgemvIntKernels:
			return errors.New("qgemv: pre-quantised x with the float kernels (GOSLING_QGEMV=float)")
		case c.M < 1 || c.M > qgemvIntMaxRows:
			return fmt.Errorf("qgemv: %d rows of pre-quantised x (1 to %d)", c.M, qgemvIntMaxRows)
		case uintptr(c.XQ)%16 != 0:
			return errors.New("qgemv: pre-quantised x is not 16-byte aligned")
		}
		return nil
	}
	switch {
	case c.M < 1 || c.M > GemvMaxRows:
		return fmt.Errorf("qgemv: %d rows (1 to %d)", c.M, GemvMaxRows)
	case c.Staged && !qgemvStages(c.M, m0.in, m0.dtype):
		return fmt.Errorf("qgemv: %d×%d x staged exceeds the shared memory (%d bytes as float32, %d as integers)",
			c.M, m0.in, gemvStagedBytes, qgemvIntMaxBytes)
	case c.Stage < GemvRound || c.Stage > GemvRMSNorm || (c.Stage == GemvRMSNorm && c.Norm == 0):
		return fmt.Errorf("qgemv: stage %d without its operand", c.Stage)
	case !c.Staged && c.Stage != GemvRound:
		return fmt.Errorf("qgemv: stage %d needs staged x", c.Stage)
	case uintptr(c.X)%16 != 0:
		return errors.New("qgemv: x is not 16-byte aligned")
	}
	return nil
}

// qgemvIntArgs are a's arguments for qgemv_int_l<L>_<q> reading x from xq (0:
// each block quantises x itself), and the dynamic shared memory the
// launch takes: m rows of quantised x, unless a pre-quantised x is read
// in place (GOSLING_QGEMV_PREQ=inplace, or more than fits).
func qgemvIntArgs(a qgemvArgs, xq DevicePtr, dt DType) (qgemvintArgs, int) {
	staged, smem := 1, a.M*qiRowBytes(a.In, dt)
	if xq != 0 && (qgemvPreq == qgemvPreqInPlace || smem > qgemvIntMaxBytes) {
		staged, smem = 0, 0
	}
	return qgemvintArgs{X: a.X, Norm: a.Norm, Eps: a.Eps, Mode: a.Mode, Staged: staged, Accumulate: a.Accumulate,
		M: a.M, In: a.In, Ks: a.Ks,
		Y0: a.Y0, W0: a.W0, S0: a.S0, B0: a.B0, Out0: a.Out0,
		Y1: a.Y1, W1: a.W1, S1: a.S1, B1: a.B1, Out1: a.Out1,
		Y2: a.Y2, W2: a.W2, S2: a.S2, B2: a.B2, Out2: a.Out2, Xq: xq}, smem
}

// QGemv enqueues c on s: qgemv_int_l<L>_<q> on c.XQ where it is set, else
// qgemv_int_l<L>_<q> quantising x in each block where it takes c's x
// (qgemvIntStages; Staged then only names the transform), else
// qgemv_<q>.
func (k *Kernels) QGemv(s Stream, c QGemvCall) error {
	if err := errors.Join(qgemvKernelsErr, qgemvPreqErr, qgemvIntRowsErr, qgemvLimbsErr, checkQGemv(c)); err != nil {
		return err
	}
	m0 := c.Mats[0]
	rows := 0
	for _, m := range c.Mats {
		rows += m.out
	}
	var t [gemvMaxGroup]struct {
		y, w, s, b DevicePtr
		out        int
	}
	for i, m := range c.Mats {
		t[i].y, t[i].w, t[i].s, t[i].b, t[i].out = c.Y[i], m.ptr, m.quant.scale, m.bias, m.out
	}
	ks := qgemvSplit(rows, m0.in)
	args := qgemvArgs{X: c.X, Norm: c.Norm, Eps: c.Eps, Mode: int(c.Stage), Staged: b2i(c.Staged), Accumulate: b2i(c.Accumulate),
		M: c.M, In: m0.in, Ks: ks,
		Y0: t[0].y, W0: t[0].w, S0: t[0].s, B0: t[0].b, Out0: t[0].out,
		Y1: t[1].y, W1: t[1].w, S1: t[1].s, B1: t[1].b, Out1: t[1].out,
		Y2: t[2].y, W2: t[2].w, S2: t[2].s, B2: t[2].b, Out2: t[2].out}
	// Two rows a warp: a block serves 2·GEMV_WARPS/ks rows.
	if c.XQ != 0 || qgemvIntStages(c.M, m0.in, m0.dtype) {
		ia, smem := qgemvIntArgs(args, c.XQ, m0.dtype)
		cfg := k.gemvLaunchPer((rows+1)/2, ks, smem, k.qintPerSM())
		if c.M == 1 {
			return k.launchQGemvInt1(s, cfg, qgemvFormatLimbs(m0.dtype), quantName(m0.dtype), ia)
		}
		return k.launchQGemvInt(s, cfg, qgemvFormatLimbs(m0.dtype), quantName(m0.dtype), ia)
	}
	smem := 0
	if c.Staged {
		smem = 4 * c.M * m0.in
	}
	cfg := k.gemvLaunchPer((rows+1)/2, ks, smem, qgemvBlocksPerSM)
	return k.launchQGemv(s, cfg, quantName(m0.dtype), args)
}

// QGemvSwiGLU enqueues qgemv_swiglu_<q> (qgemv_swiglu_int_<q> on xq
// where it is set or where qgemvIntStages holds): h [M, inter] float32 =
// silu(xn·Gateᵀ + bg)·(xn·Upᵀ + bu), xn the RMSNorm of float32 x [M,
// In] (or xq: xn as QQuantX wrote it for the format), gate and up compact
// matrices of one format.
func (k *Kernels) QGemvSwiGLU(s Stream, x, norm DevicePtr, eps float32, m int, gate, up *Matrix, h, xq DevicePtr) error {
	c := QGemvCall{X: x, Staged: true, Stage: GemvRMSNorm, Norm: norm, Eps: eps, M: m, Mats: []*Matrix{gate, up}, Y: []DevicePtr{h, 0}, XQ: xq}
	if err := errors.Join(qgemvKernelsErr, qgemvPreqErr, qgemvIntRowsErr, qgemvLimbsErr, checkQGemv(c)); err != nil {
		return err
	}
	if gate.out != up.out || h == 0 {
		return fmt.Errorf("qgemv swiglu: gate of %d rows, up of %d, output %#x", gate.out, up.out, h)
	}
	ks := qgemvSplit(2*gate.out, gate.in)
	args := qgemvArgs{X: x, Norm: norm, Eps: eps, Mode: int(GemvRMSNorm), Staged: 1, M: m, In: gate.in, Ks: ks,
		Y0: h, W0: gate.ptr, S0: gate.quant.scale, B0: gate.bias, Out0: gate.out,
		W1: up.ptr, S1: up.quant.scale, B1: up.bias, Out1: up.out}
	if xq != 0 || qgemvIntStages(m, gate.in, gate.dtype) {
		ia, smem := qgemvIntArgs(args, xq, gate.dtype)
		cfg := k.gemvLaunchPer(gate.out, ks, smem, k.qintPerSM())
		if m == 1 {
			return k.launchQGemvSwiGLUInt1(s, cfg, qgemvFormatLimbs(gate.dtype), quantName(gate.dtype), ia)
		}
		return k.launchQGemvSwiGLUInt(s, cfg, qgemvFormatLimbs(gate.dtype), quantName(gate.dtype), ia)
	}
	return k.launchQGemvSwiGLU(s, k.gemvLaunchPer(gate.out, ks, 4*m*gate.in, qgemvBlocksPerSM), quantName(gate.dtype), args)
}

// qquantUnitsPerBlock is how many units of a row of x one qquant_x block
// takes: one pass of its warps, four units each. The kernel is latency
// bound (the norm's block sum, then one pass), and a decode step runs
// it before every group of launches: more blocks of one pass each finish
// sooner than fewer of several (a 4096-wide row: 4 blocks).
const qquantUnitsPerBlock = 4 * gemvWarps

// QQuantX enqueues qquant_x_l<L>_<q> (L = qgemvFormatLimbs(dt)): m rows of float32 x [m, in], transformed
// by stage (GemvRMSNorm: norm [in] float32, eps), as the integer kernels'
// x for compact matrices in dt into xq (m·qiRowBytes(in, dt) bytes), what a
// QGemvCall with XQ reads. Every matrix of dt's layout (qiLayout) of
// width in reads the same xq. With the norm, the bytes are those each
// qgemv_int block would stage, bit for bit.
func (k *Kernels) QQuantX(s Stream, xq, x DevicePtr, stage GemvStage, norm DevicePtr, eps float32, m, in int, dt DType) error {
	l, ok := quantLayouts[dt]
	switch {
	case !ok:
		return fmt.Errorf("qquant_x: %v is not kept compact", dt)
	case m < 1 || m > qgemvIntMaxRows || in < l.values || in%l.values != 0:
		return fmt.Errorf("qquant_x: %d rows of %d (1 to %d rows of whole %v blocks)", m, in, qgemvIntMaxRows, dt)
	case stage < GemvRound || stage > GemvRMSNorm || (stage == GemvRMSNorm && norm == 0):
		return fmt.Errorf("qquant_x: stage %d without its operand", stage)
	case uintptr(x)%16 != 0 || uintptr(xq)%16 != 0 || uintptr(norm)%16 != 0:
		return fmt.Errorf("qquant_x: x %#x, xq %#x, norm %#x not 16-byte aligned", x, xq, norm)
	}
	if qgemvLimbsErr != nil {
		return qgemvLimbsErr
	}
	units := in / 32
	cfg := LaunchConfig{Grid: Dim3{(units + qquantUnitsPerBlock - 1) / qquantUnitsPerBlock, m, 1}, Block: D1(32 * gemvWarps)}
	return k.launchQQuantX(s, cfg, qgemvFormatLimbs(dt), quantName(dt),
		qQuantXArgs{Xq: xq, X: x, Norm: norm, Eps: eps, Mode: int(stage), M: m, In: in})
}

// quantMLP reports whether GatedMLPAdd of rows rows of x runs as
// qgemv_swiglu and a qgemv of down adding into x: gate and up compact in
// one format, down compact, a decode-sized batch staged with the norm.
func quantMLP(rows int, x DevicePtr, g, u, d *Matrix) bool {
	return quantFuses(rows, g.in, []*Matrix{g, u}, x) && quantGroup(0, []*Matrix{g, u}) == 2 && g.out == u.out &&
		d.quant != nil && d.in == g.out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// QWidenBF16 enqueues qwiden_bf16_<q>: rows [r0, r1) of the compact
// matrix m as bf16 into wb [r1−r0, in].
func (k *Kernels) QWidenBF16(s Stream, wb DevicePtr, m *Matrix, r0, r1 int) error {
	if m.quant == nil || r0 < 0 || r1 > m.out || r0 >= r1 {
		return fmt.Errorf("qwiden: rows [%d, %d) of a [%d, %d] %v matrix", r0, r1, m.out, m.in, m.dtype)
	}
	p := m.quant.plan
	var sc DevicePtr
	if m.quant.scale != 0 {
		sc = m.quant.scale.Add(r0 * p.scaleRow)
	}
	return k.launchQWidenBF16(s, flatConfig((r1-r0)*(m.in/32)), quantName(m.dtype),
		qWidenBF16Args{Wb: wb, W: m.ptr.Add(r0 * p.bodyRow), S: sc, Out: r1 - r0, In: m.in})
}

// QEmbed enqueues qembed_<q>: out [n, in] float32 = rows ids [n] int32 of
// the compact matrix m, dequantised (zeros for an id outside the table).
func (k *Kernels) QEmbed(s Stream, out, ids DevicePtr, n int, m *Matrix) error {
	if m.quant == nil || n < 1 {
		return fmt.Errorf("qembed: %d ids into a [%d, %d] %v matrix", n, m.out, m.in, m.dtype)
	}
	cfg := LaunchConfig{Grid: D1(n), Block: D1(min(rowThreads(m.in/32), 256))}
	return k.launchQEmbed(s, cfg, quantName(m.dtype),
		qEmbedArgs{Out: out, W: m.ptr, S: m.quant.scale, Ids: ids, In: m.in, Vocab: m.out})
}

// quantWidenBytes bounds the bf16 scratch a large batch widens a compact
// matrix into: the matrix goes through the GEMM a slice of rows at a
// time (a 128K-vocabulary head in one piece would be a gigabyte). A
// variable for the tests, which cut matrices into several slices.
var quantWidenBytes = 128 << 20

// quantGemm enqueues out = xb·Wᵀ + bias (out += … with accumulate) for
// rows rows of bf16 xb [rows, in] through the compact matrix m, widened
// to bf16 a slice of output rows at a time into scratch; out [rows,
// m.out] in outDT (float32, or bf16 without a bias). Its scratch is freed
// once enqueued (one stream).
func (o *ModelOps) quantGemm(m *Matrix, xb DevicePtr, rows int, out DevicePtr, outDT DType, accumulate bool) error {
	if outDT != F32 && (outDT != BF16 || m.bias != 0) {
		return fmt.Errorf("%v widened %dx%d·%dx%dᵀ into %v (bias %t)", m.dtype, rows, m.in, m.out, m.in, outDT, m.bias != 0)
	}
	slice := max(1, min(m.out, quantWidenBytes/(2*m.in)))
	wb, err := o.dev.Mem.Alloc(2 * slice * m.in)
	if err != nil {
		return err
	}
	defer o.dev.Mem.Free(wb)
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	for r0 := 0; r0 < m.out; r0 += slice {
		r1 := min(r0+slice, m.out)
		if err := o.k.QWidenBF16(o.stream, wb.Ptr, m, r0, r1); err != nil {
			return err
		}
		g := Gemm{M: rows, N: r1 - r0, K: m.in, TransB: true, DType: BF16, OutDType: outDT, LDD: m.out}
		if err := o.lt.Matmul(o.stream, g, xb, wb.Ptr, out.Add(ElemSize(outDT)*r0), 1, beta); err != nil {
			return fmt.Errorf("%v widened %dx%d·%dx%dᵀ: %w", m.dtype, rows, m.in, r1-r0, m.in, err)
		}
	}
	if m.bias != 0 {
		return o.k.AddRowF32(o.stream, out, m.bias, rows, m.out)
	}
	return nil
}

// quantGroup is how many of mats, from i on, share one qgemv launch with
// mats[i]: compact, of its format and width, at most three.
func quantGroup(i int, mats []*Matrix) int {
	n := 1
	for n < gemvMaxGroup && i+n < len(mats) && mats[i+n].quant != nil && mats[i+n].dtype == mats[i].dtype && mats[i+n].in == mats[i].in {
		n++
	}
	return n
}

// quantFuses reports whether NormLinearGroup of rows rows of x through
// mats runs as qgemv launches with the norm, one a format
// (quantNormGroups): a decode-sized batch (quantMaxRows) of compact
// matrices, x pre-quantised or within the shared memory, aligned.
func quantFuses(rows, in int, mats []*Matrix, x DevicePtr) bool {
	if rows < 1 || rows > quantMaxRows() || len(mats) == 0 || (!quantPreq() && !qgemvStages(rows, in, mats[0].dtype)) || uintptr(x)%16 != 0 {
		return false
	}
	for _, m := range mats {
		if m.quant == nil || m.in != in {
			return false
		}
	}
	return true
}

// quantNormGroups enqueues NormLinearGroup's qgemv launches (quantFuses)
// into outs: each run of matrices of one format (Q4_K_M mixes Q6_K into
// attention v) is a launch. With pre-quantised x (quantPreq) x is
// normalised and quantised once for the runs of one layout (qiLayout);
// else each block of each launch stages and normalises x itself.
func (o *ModelOps) quantNormGroups(x DevicePtr, rows int, norm DevicePtr, eps float32, mats []*Matrix, outs []DevicePtr) error {
	var xq Buffer
	layout := -1
	defer func() { o.quantXRelease(xq) }()
	for i := 0; i < len(mats); {
		n := quantGroup(i, mats)
		c := QGemvCall{X: x, Staged: true, Stage: GemvRMSNorm, Norm: norm, Eps: eps, M: rows, Mats: mats[i : i+n], Y: outs[i : i+n]}
		if quantPreq() {
			if l := qiLayout(mats[i].dtype); l != layout {
				o.quantXRelease(xq)
				xq = Buffer{}
				var err error
				if xq, err = o.quantX(x, rows, mats[i].in, GemvRMSNorm, norm, eps, mats[i].dtype); err != nil {
					return err
				}
				layout = l
			}
			c.XQ = xq.Ptr
		}
		if err := o.k.QGemv(o.stream, c); err != nil {
			return err
		}
		i += n
	}
	return nil
}

// quantX quantises rows rows of float32 x [rows, in] (transformed by
// stage) for compact matrices in dt (QQuantX) into a buffer of this
// forward's arena (a CUDA graph's capture gets the dry run's address);
// the caller hands it back with quantXRelease once the launches reading
// it are enqueued (one stream: the next user of the block runs after
// them).
func (o *ModelOps) quantX(x DevicePtr, rows, in int, stage GemvStage, norm DevicePtr, eps float32, dt DType) (Buffer, error) {
	b, err := o.arena.alloc(rows * qiRowBytes(in, dt))
	if err != nil {
		return Buffer{}, err
	}
	if err := o.k.QQuantX(o.stream, b.Ptr, x, stage, norm, eps, rows, in, dt); err != nil {
		o.quantXRelease(b)
		return Buffer{}, err
	}
	return b, nil
}

// quantXRelease gives quantX's buffer back to the arena (none: nothing).
func (o *ModelOps) quantXRelease(b Buffer) {
	if b.Ptr != 0 {
		_, _ = o.arena.release(b.Ptr) // the arena's own buffer: held
	}
}

// quantLinear enqueues mats[i] (compact) and the matrices after it that
// share its launch for rows rows of float32 x into outs (added with
// accumulate), returning the index of the last one served. A decode batch
// (quantMaxRows) runs qgemv, on x quantised for it where quantPreq holds;
// a larger one reads x as bf16 from *xb, converting it there on first
// use (the caller frees it).
func (o *ModelOps) quantLinear(i int, mats []*Matrix, outs []DevicePtr, x DevicePtr, rows int, accumulate bool, xb *Buffer) (int, error) {
	m := mats[i]
	if rows <= quantMaxRows() && uintptr(x)%16 == 0 {
		n := quantGroup(i, mats)
		c := QGemvCall{X: x, Staged: qgemvStages(rows, m.in, m.dtype), M: rows, Accumulate: accumulate, Mats: mats[i : i+n], Y: outs[i : i+n]}
		if quantPreq() {
			xq, err := o.quantX(x, rows, m.in, GemvRound, 0, 0, m.dtype)
			if err != nil {
				return i, err
			}
			defer o.quantXRelease(xq)
			c.Staged, c.XQ = true, xq.Ptr
		}
		return i + n - 1, o.k.QGemv(o.stream, c)
	}
	if xb.Ptr == 0 {
		var err error
		if *xb, err = o.dev.Mem.Alloc(2 * rows * m.in); err != nil {
			return i, err
		}
		if err := o.k.Convert(o.stream, xb.Ptr, x, rows*m.in, F32, BF16); err != nil {
			return i, err
		}
	}
	return i, o.quantGemm(m, xb.Ptr, rows, outs[i], F32, accumulate)
}
