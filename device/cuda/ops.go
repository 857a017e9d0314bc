package cuda

import (
	"fmt"

	"github.com/gosling-ai/gosling/tensor"
)

// DType is the element type of device buffers: F32, BF16 or F16.
type DType = tensor.DType

// The element types the kernels are built for.
const (
	F32  = tensor.F32
	BF16 = tensor.BF16
	F16  = tensor.F16
)

// ElemSize is the size of one element of dt in bytes.
func ElemSize(dt DType) int {
	switch dt {
	case F32:
		return 4
	case BF16, F16:
		return 2
	case FP8E4M3:
		return 1
	}
	panic(fmt.Sprintf("cuda: no element size for %v", dt))
}

// rowThreads is the block size for a kernel that walks one row of width
// values per block: a whole number of warps, at most 1024.
func rowThreads(width int) int {
	t := (width + 31) / 32 * 32
	return min(max(t, 32), 1024)
}

// flatConfig is a 1-D launch over n elements; kernels grid-stride past the cap.
func flatConfig(n int) LaunchConfig {
	const threads = 256
	blocks := min(max((n+threads-1)/threads, 1), 1<<20)
	return LaunchConfig{Grid: D1(blocks), Block: D1(threads)}
}

func (k *Kernels) launch(name string, cfg LaunchConfig, s Stream, args *Args) error {
	f, err := k.Function(name)
	if err != nil {
		return err
	}
	return k.dev.Launch(f, cfg, s, args)
}

// Embedding gathers rows of the table.
//
//	table: [vocab, hidden] (tableDT)   ids: [nTokens] int32   out: [nTokens, hidden] (outDT)
//	out[t] = table[ids[t]] * scale; an id outside [0, vocab) gives zeros.
func (k *Kernels) Embedding(s Stream, out, table, ids DevicePtr, nTokens, hidden, vocab int, tableDT, outDT DType, scale float32) error {
	if nTokens == 0 {
		return nil
	}
	return k.launchEmbedding(s, LaunchConfig{Grid: D1(nTokens), Block: D1(rowThreads(hidden / 4))}, tableDT, outDT,
		embeddingArgs{Out: out, Table: table, Ids: ids, Hidden: hidden, Vocab: vocab, Scale: scale})
}

// RMSNormParams describes one RMSNorm launch.
//
//	X:        [NTokens, Heads*Hidden] rows of XStride elements (0: dense)
//	Residual: [NTokens, Heads*Hidden] dense, or 0 for none
//	Weight:   [Hidden]
//	Out:      [NTokens, Heads*Hidden] rows of OutStride elements (0: dense); may be X
//
// With a residual: Residual = X + Residual, Out = norm(Residual)·(Weight+WeightOffset).
// Heads > 1 normalises each head separately (q/k norm); 0 means 1.
type RMSNormParams struct {
	Out, Residual, X, Weight DevicePtr
	NTokens, Hidden, Heads   int
	XStride, OutStride       int
	Eps, WeightOffset        float32
	DType                    DType
	// OutDType, with DType F32, writes Out in BF16 or F16 (a GEMM's
	// input, rounded once); F32 (the zero value) writes it in DType.
	OutDType DType
}

// RMSNorm runs the (fused add +) RMSNorm kernel.
func (k *Kernels) RMSNorm(s Stream, p RMSNormParams) error {
	if p.NTokens == 0 {
		return nil
	}
	heads := max(p.Heads, 1)
	xs, os := p.XStride, p.OutStride
	if xs == 0 {
		xs = heads * p.Hidden
	}
	if os == 0 {
		os = heads * p.Hidden
	}
	cfg := LaunchConfig{Grid: Dim3{p.NTokens, heads, 1}, Block: D1(rowThreads(p.Hidden / 4))}
	if p.DType == F32 && p.Residual == 0 && p.Hidden%4 == 0 {
		// rmsnorm_vec: four float4 a thread, so more rows share an SM
		cfg.Block = D1(rowThreads(p.Hidden / 16))
	}
	a := rmsnormArgs{Out: p.Out, Residual: p.Residual, X: p.X, Weight: p.Weight,
		Hidden: p.Hidden, XStride: xs, OutStride: os, Eps: p.Eps, WeightOffset: p.WeightOffset}
	if p.OutDType != F32 {
		if p.DType != F32 || (p.OutDType != BF16 && p.OutDType != F16) {
			return fmt.Errorf("rmsnorm: %v input to %v output", p.DType, p.OutDType)
		}
		return k.launchRMSNormTo(s, cfg, p.OutDType, a)
	}
	return k.launchRMSNorm(s, cfg, p.DType, a)
}

// RopeParams describes one rotary-embedding launch, in place on Q and K.
//
//	Q: [NTokens, NQHeads*HeadDim ...] rows of QStride elements (0: dense)
//	K: [NTokens, NKVHeads*HeadDim ...] rows of KStride elements (0: dense); 0 with NKVHeads 0
//	Positions: [NTokens] int32   InvFreq: [RotDim/2] float32
//
// RotDim 0 means HeadDim. Interleaved pairs (2i, 2i+1) (GPT-J); otherwise
// (i, i+RotDim/2) (NeoX rotate-half). MScale multiplies cos and sin (yarn's
// attention factor); 0 means 1.
type RopeParams struct {
	Q, K, Positions, InvFreq   DevicePtr
	NTokens, NQHeads, NKVHeads int
	HeadDim, RotDim            int
	QStride, KStride           int
	Interleaved                bool
	MScale                     float32
	DType                      DType
}

// Rope runs the rotary-embedding kernel.
func (k *Kernels) Rope(s Stream, p RopeParams) error {
	if p.NTokens == 0 {
		return nil
	}
	rot := p.RotDim
	if rot == 0 {
		rot = p.HeadDim
	}
	if rot%2 != 0 || rot > p.HeadDim {
		return fmt.Errorf("rope: rotary dim %d must be even and at most head dim %d", rot, p.HeadDim)
	}
	qs, ks := p.QStride, p.KStride
	if qs == 0 {
		qs = p.NQHeads * p.HeadDim
	}
	if ks == 0 {
		ks = p.NKVHeads * p.HeadDim
	}
	mscale := p.MScale
	if mscale == 0 {
		mscale = 1
	}
	interleaved := 0
	if p.Interleaved {
		interleaved = 1
	}
	if ropeVec(p, rot, qs, ks) {
		// rope_<dt>_v8: a block a token, eight pairs a thread
		heads := p.NQHeads + p.NKVHeads
		cfg := LaunchConfig{Grid: D1(p.NTokens), Block: D1(min(rowThreads(heads*rot/16), 256)), SharedMem: 4 * rot}
		return k.launchRopeVec(s, cfg, p.DType, ropeVecArgs{Q: p.Q, K: p.K, Positions: p.Positions, InvFreq: p.InvFreq,
			NQHeads: p.NQHeads, NKVHeads: p.NKVHeads, HeadDim: p.HeadDim, RotDim: rot, QStride: qs, KStride: ks, Mscale: mscale})
	}
	cfg := LaunchConfig{Grid: Dim3{p.NTokens, p.NQHeads + p.NKVHeads, 1}, Block: D1(rowThreads(rot / 2))}
	return k.launchRope(s, cfg, p.DType, ropeArgs{Q: p.Q, K: p.K, Positions: p.Positions, InvFreq: p.InvFreq,
		NQHeads: p.NQHeads, HeadDim: p.HeadDim, RotDim: rot, QStride: qs, KStride: ks, Interleaved: interleaved, Mscale: mscale})
}

// ropeVec reports whether a rope launch (rot rotary dims, strides qs and
// ks) takes rope_<dt>_v8: 16-bit q and k in rotate-half style, whole
// 16-byte groups of pairs (rot a multiple of 16), heads and rows of whole
// 16-byte groups, 16-byte aligned q and k.
func ropeVec(p RopeParams, rot, qs, ks int) bool {
	return (p.DType == BF16 || p.DType == F16) && !p.Interleaved && rot%16 == 0 && p.HeadDim%8 == 0 &&
		qs%8 == 0 && ks%8 == 0 && (uintptr(p.Q)|uintptr(p.K))%16 == 0
}

// Activation is a gated MLP activation.
type Activation int

const (
	SiLU     Activation = iota // SwiGLU: silu(gate)·up
	GeLUTanh                   // GeGLU with the tanh approximation: gelu_tanh(gate)·up
)

// GatedAct computes out = act(gate)·up.
//
//	gate, up: [nTokens, inter] rows of inStride elements (0: inter)
//	out:      [nTokens, inter] dense; may alias gate when inStride == inter
//
// For a fused gate_up [nTokens, 2·inter]: gate = base, up = base + inter
// elements, inStride = 2·inter.
func (k *Kernels) GatedAct(s Stream, act Activation, out, gate, up DevicePtr, nTokens, inter, inStride int, dt DType) error {
	if nTokens == 0 {
		return nil
	}
	if inStride == 0 {
		inStride = inter
	}
	return k.launchGated(s, flatConfig(nTokens*inter), act.kernelName(), dt,
		gatedArgs{Out: out, Gate: gate, Up: up, NTokens: nTokens, Inter: inter, InStride: inStride})
}

// kernelName is the activation's name in the gated kernels' names.
func (a Activation) kernelName() string {
	if a == GeLUTanh {
		return "gelu_tanh"
	}
	return "silu"
}

// gatedVec checks a gated launch whose threads take per values each in
// 16-byte vectors (inter and inStride multiples of per, the pointers
// aligned) and returns its arguments and shape: grid (ceil(inter/per/256),
// min(nTokens, 65535)), block 256, blocks striding over the tokens.
func gatedVec(out, gate, up DevicePtr, nTokens, inter, inStride, per int, aligned ...DevicePtr) (gatedArgs, LaunchConfig, error) {
	if inStride == 0 {
		inStride = inter
	}
	var or uintptr
	for _, p := range aligned {
		or |= uintptr(p)
	}
	if inter%per != 0 || inStride%per != 0 || or%16 != 0 {
		return gatedArgs{}, LaunchConfig{}, fmt.Errorf("gated activation: width %d, stride %d: not in 16-byte vectors", inter, inStride)
	}
	cfg := LaunchConfig{Grid: Dim3{(inter/per + 255) / 256, min(nTokens, 65535), 1}, Block: D1(256)}
	return gatedArgs{Out: out, Gate: gate, Up: up, NTokens: nTokens, Inter: inter, InStride: inStride}, cfg, nil
}

// GatedActTo is GatedAct from float32 gate and up to out in outDT (BF16
// or F16: the down projection's input), rounded once.  inter and
// inStride must be multiples of 4, gate and up 16-byte aligned.
func (k *Kernels) GatedActTo(s Stream, act Activation, out, gate, up DevicePtr, nTokens, inter, inStride int, outDT DType) error {
	if nTokens == 0 {
		return nil
	}
	if outDT != BF16 && outDT != F16 {
		return fmt.Errorf("gated activation: output in %v", outDT)
	}
	a, cfg, err := gatedVec(out, gate, up, nTokens, inter, inStride, 4, gate, up)
	if err != nil {
		return err
	}
	return k.launchGatedTo(s, cfg, act.kernelName(), outDT, a)
}

// GatedActVec is GatedAct over 16-bit gate, up and out (dt BF16 or F16)
// in 16-byte vectors: inter and inStride multiples of 8, 16-byte aligned.
func (k *Kernels) GatedActVec(s Stream, act Activation, out, gate, up DevicePtr, nTokens, inter, inStride int, dt DType) error {
	if nTokens == 0 {
		return nil
	}
	if dt != BF16 && dt != F16 {
		return fmt.Errorf("gated activation: %v in 16-byte vectors", dt)
	}
	a, cfg, err := gatedVec(out, gate, up, nTokens, inter, inStride, 8, gate, up, out)
	if err != nil {
		return err
	}
	return k.launchGatedVec(s, cfg, act.kernelName(), dt, a)
}

// Softcap applies x = cap·tanh(x/cap) in place.  x: [n]
func (k *Kernels) Softcap(s Stream, x DevicePtr, n int, cap float32, dt DType) error {
	if n == 0 {
		return nil
	}
	return k.launchSoftcap(s, flatConfig(n), dt, softcapArgs{X: x, N: n, Cap: cap})
}

// KVStoreParams describes storing new keys and values into the KV pool.
//
//	K, V:           [NTokens, KVWidth] rows of KStride / VStride elements (0: dense), InDT
//	Slots:          [NTokens] int32 token slots (page·pageSize + offset); negative skips
//	KCache, VCache: [nSlots, KVWidth] dense, CacheDT
type KVStoreParams struct {
	KCache, VCache, K, V, Slots DevicePtr
	NTokens, KVWidth            int
	KStride, VStride            int
	InDT, CacheDT               DType
}

// KVStore runs the KV-store kernel.
func (k *Kernels) KVStore(s Stream, p KVStoreParams) error {
	if p.NTokens == 0 {
		return nil
	}
	ks, vs := p.KStride, p.VStride
	if ks == 0 {
		ks = p.KVWidth
	}
	if vs == 0 {
		vs = p.KVWidth
	}
	return k.launchKVStore(s, LaunchConfig{Grid: D1(p.NTokens), Block: D1(rowThreads(p.KVWidth / 2))}, p.InDT, p.CacheDT,
		kvStoreArgs{KCache: p.KCache, VCache: p.VCache, K: p.K, V: p.V, Slots: p.Slots, KVWidth: p.KVWidth, KStride: ks, VStride: vs})
}

// Argmax writes each row's greedy token.
//
//	logits: [nRows, vocab] rows of stride elements (0: vocab)   out: [nRows] int32
//
// Lowest index on ties, NaN skipped, 0 when no logit is above -inf.
func (k *Kernels) Argmax(s Stream, out, logits DevicePtr, nRows, vocab, stride int, dt DType) error {
	if nRows == 0 {
		return nil
	}
	if stride == 0 {
		stride = vocab
	}
	return k.launchArgmax(s, LaunchConfig{Grid: D1(nRows), Block: D1(1024)}, dt, argmaxArgs{Out: out, Logits: logits, Vocab: vocab, Stride: stride})
}

// Convert converts n elements from one dtype to another.  in: [n] → out: [n]
func (k *Kernels) Convert(s Stream, out, in DevicePtr, n int, from, to DType) error {
	if n == 0 {
		return nil
	}
	if from == to {
		return k.dev.CopyDtoDAsync(out, in, n*ElemSize(from), s)
	}
	return k.launchConvert(s, flatConfig(n), from, to, convertArgs{Out: out, In: in, N: n})
}
