package gpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// CudnnCaps is what the cudnn backend supports: cuDNN 9's fused SDPA over
// a bf16 paged cache, causal prefill and extend (bottom-right aligned over
// a cached prefix) and decode, and attention sinks (the softmax statistics
// as an output, each row rescaled after the fused op). Head dims and page
// sizes are those its support surface takes and the GPU battery runs;
// everything else (custom and tree masks, bidirectional spans and encoder
// batches, MLA, softcaps, windows, fp8 or float32 KV, CUDA graphs) is
// refused by Resolve.
var CudnnCaps = attention.Caps{
	Devices:   []string{"cuda"},
	PageSizes: attention.PageSizes{Only: []int{1, 16, 64}},
	HeadDims:  []int{64, 80, 96, 128},
	KVDTypes:  []tensor.DType{tensor.BF16},
	Sinks:     true,
}

// CudnnEntry registers the cudnn backend: a library backend, offered only
// where libcudnn.so.9 (9.8 or newer) loads.
var CudnnEntry = attention.Entry{
	Name:        "cudnn",
	Description: "cuDNN 9 fused SDPA (libcudnn.so.9 at run time): paged K/V through page tables, ragged queries; plans cached per shape",
	Caps:        CudnnCaps,
	Available: func() error {
		_, err := cuda.CudnnAvailable()
		return err
	},
	New: newCudnnBackend,
}

// cudnnGeom is the attention geometry every layer served by one cudnn
// backend shares (the ragged offsets are in elements of it).
type cudnnGeom struct{ Heads, KVHeads, DimQK, DimV int }

// cudnnShape is what one cuDNN plan is built for. Forwards whose batch
// and lengths round to the same shape share the plan: the batch to a
// power of two (padding sequences have no tokens), the new tokens per
// sequence to SeqBucket (1 in decode), the page table to the pages of
// SeqBucket(longest sequence).
type cudnnShape struct {
	cudnnGeom
	Decode   bool // one dense query row per sequence, no causal mask
	Batch    int
	MaxQ     int
	Pages    int // page-table columns per sequence
	PageSize int
	Blocks   int // pages in the pool: the container's first dimension
	DType    tensor.DType
	Scale    float32
	// Lowest is the masked-score value: -inf from cuDNN 9.10, the lowest
	// float before (cudnn-frontend does the same).
	Lowest float32
	// Stats makes the softmax statistics (each row's log-sum-exp) a bound
	// output, for a layer with sinks; the other layers keep them virtual,
	// so they run the plan without that store.
	Stats bool
}

// SKV is the keys each sequence's page table spans.
func (s cudnnShape) SKV() int { return s.Pages * s.PageSize }

// cudnnBatchBucket rounds a number of sequences up to a power of two.
func cudnnBatchBucket(n int) int {
	b := 1
	for b < n {
		b *= 2
	}
	return b
}

// cudnnShapeOf is the plan shape of forward b (scale and dtype set by the
// caller per layer).
func cudnnShapeOf(b *forward.Batch, g cudnnGeom, pageSize, blocks int) cudnnShape {
	s := cudnnShape{cudnnGeom: g, Decode: b.Mode == forward.Decode, Batch: cudnnBatchBucket(b.NumReqs()), PageSize: pageSize, Blocks: blocks}
	maxExt, maxSeq := 0, 0
	for r := range b.NumReqs() {
		maxExt = max(maxExt, int(b.ExtendLens[r]))
		maxSeq = max(maxSeq, b.SeqLen(r))
	}
	s.MaxQ = 1
	if !s.Decode {
		s.MaxQ = SeqBucket(maxExt)
	}
	s.Pages = (SeqBucket(maxSeq) + pageSize - 1) / pageSize
	return s
}

// cudnnArrays are the word offsets, in Plan.Extra, of a forward's
// per-sequence arrays, each 16-byte aligned as the tensors declare:
//
//	seqQ:  [Batch]          new tokens of each sequence (padding: 1 in decode, else 0)
//	seqKV: [Batch]          keys of each sequence after the forward (padding: 1)
//	qOff:  [Batch+1]        element offset of each sequence's first query row
//	oOff:  [Batch+1]        likewise in the output
//	table: [Batch, Pages]   page ids of each sequence's keys (0 past its end)
type cudnnArrays struct{ SeqQ, SeqKV, QOff, OOff, Table, Words int }

func (s cudnnShape) arrays() cudnnArrays {
	up := func(n int) int { return (n + 3) &^ 3 }
	var a cudnnArrays
	a.SeqKV = up(s.Batch)
	a.QOff = a.SeqKV + up(s.Batch)
	a.OOff = a.QOff + up(s.Batch+1)
	a.Table = a.OOff + up(s.Batch+1)
	a.Words = a.Table + s.Batch*s.Pages
	return a
}

// appendCudnnArrays appends forward b's arrays (cudnnArrays) for shape s.
func appendCudnnArrays(words []int32, b *forward.Batch, s cudnnShape) []int32 {
	a := s.arrays()
	at := len(words)
	words = append(words, make([]int32, a.Words)...)
	w := words[at:]
	n := b.NumReqs()
	total := int32(b.NumTokens())
	for i := range s.Batch {
		// A padding sequence attends slot 0 of page 0 (the slot the
		// engine reserves for padding), so no kernel sees an empty key
		// range; in decode it has one dense query row of its own (the
		// scratch rows past the batch), in an extend none.
		start := total
		w[a.SeqKV+i] = 1
		if s.Decode {
			w[a.SeqQ+i] = 1
		}
		if i < n {
			start = b.ExtendStarts[i]
			w[a.SeqQ+i] = b.ExtendLens[i]
			w[a.SeqKV+i] = int32(b.SeqLen(i))
			slots := b.SeqSlots(i)
			for p := 0; p*s.PageSize < len(slots); p++ {
				w[a.Table+i*s.Pages+p] = slots[p*s.PageSize] / int32(s.PageSize)
			}
		}
		if s.Decode {
			start = int32(i) // dense rows: padding rows past the batch
		}
		w[a.QOff+i] = start * int32(s.Heads*s.DimQK)
		w[a.OOff+i] = start * int32(s.Heads*s.DimV)
	}
	end := total
	if s.Decode {
		end = int32(s.Batch)
	}
	w[a.QOff+s.Batch] = end * int32(s.Heads*s.DimQK)
	w[a.OOff+s.Batch] = end * int32(s.Heads*s.DimV)
	return words
}

// Tensor UIDs of the SDPA graph: the bound ones, then by-value scalars;
// virtual tensors count up from cudnnVirtualUID.
const (
	cudnnUIDQ = iota + 1
	cudnnUIDK
	cudnnUIDV
	cudnnUIDO
	cudnnUIDSeqQ
	cudnnUIDSeqKV
	cudnnUIDPageK
	cudnnUIDPageV
	cudnnUIDQOff
	cudnnUIDOOff
	cudnnUIDScale
	cudnnUIDLowestPad
	cudnnUIDLowestCausal
	cudnnUIDStats
	cudnnVirtualUID = 100
)

// statsLayout is the dims and strides of the softmax statistics, float32,
// one per query row of each sequence and head: [B, H, Sq, 1], dense in
// that order (the layout cudnn-frontend gives a generated Stats tensor).
// Rows past a sequence's queries are left unwritten.
func (s cudnnShape) statsLayout() (dims, strides []int64) {
	B, H, Sq := int64(s.Batch), int64(s.Heads), int64(s.MaxQ)
	return []int64{B, H, Sq, 1}, []int64{H * Sq, Sq, 1, 1}
}

func cudnnDType(dt tensor.DType) (cuda.CudnnDataType, error) {
	switch dt {
	case tensor.BF16:
		return cuda.CudnnBFloat16, nil
	case tensor.F16:
		return cuda.CudnnHalf, nil
	}
	return 0, fmt.Errorf("cudnn attention runs in bf16 or f16, not %v", dt)
}

// cudnnSDPAGraph is the operation graph of scaled dot-product attention
// for shape s, as cuDNN's fused flash-attention engines recognise it (the
// composite cudnn-frontend lowers its SDPA node to):
//
//	Kᵀ = paged load of the K container by page table ([B,Hk,D,Skv])
//	S  = Q·Kᵀ · scale                       (M, N overridden by seqQ, seqKV)
//	S  = select(row < seqQ ∧ col < seqKV, S, lowest)           padding mask
//	S  = select(row + seqKV − seqQ ≥ col, S, lowest)   bottom-right causal (extend)
//	P  = exp(S − max S) / Σ exp(S − max S)
//	stats = max S + log Σ exp(S − max S)      (bound when s.Stats, else virtual)
//	V  = paged load of the V container ([B,Hk,Skv,Dv])
//	O  = P·V                                 (M, K overridden by seqQ, seqKV)
//
// Q and O are [B, H, Sq, D] over gosling's token-major rows (strides
// Sq·H·D, D, H·D, 1); in an extend their sequences start at the ragged
// offsets, in a decode at row b. The containers are the pool's
// [pages, page size, Hk, D] rows seen as [pages, Hk, page size, D].
func cudnnSDPAGraph(s cudnnShape) (*cuda.CudnnGraph, error) {
	dt, err := cudnnDType(s.DType)
	if err != nil {
		return nil, err
	}
	B, H, Hk, Dq, Dv, Sq, Skv := int64(s.Batch), int64(s.Heads), int64(s.KVHeads), int64(s.DimQK), int64(s.DimV), int64(s.MaxQ), int64(s.SKV())
	P, ps, nb := int64(s.Pages), int64(s.PageSize), int64(s.Blocks)
	g := &cuda.CudnnGraph{}
	add := func(t cuda.CudnnTensor) int64 {
		g.Tensors = append(g.Tensors, t)
		return t.UID
	}
	one := []int64{1, 1, 1, 1}
	perSeq := func(uid int64, name string) int64 {
		return add(cuda.CudnnTensor{UID: uid, Name: name, DType: cuda.CudnnInt32, Dims: []int64{B, 1, 1, 1}, Strides: one})
	}
	scalar := func(uid int64, name string, v float32) int64 {
		return add(cuda.CudnnTensor{UID: uid, Name: name, DType: cuda.CudnnFloat, Dims: one, Strides: one, ByValue: true, Value: cuda.CudnnFloat32(v)})
	}
	next := int64(cudnnVirtualUID)
	virtual := func(name string, dt cuda.CudnnDataType, dims, strides []int64) int64 {
		next++
		return add(cuda.CudnnTensor{UID: next, Name: name, DType: dt, Dims: dims, Strides: strides, Virtual: true})
	}
	op := func(o cuda.CudnnOp) { g.Ops = append(g.Ops, o) }
	pw := func(name string, mode cuda.CudnnPointwise, compute, outType cuda.CudnnDataType, dims, strides []int64, in ...int64) int64 {
		out := virtual(name, outType, dims, strides)
		op(cuda.CudnnOp{Kind: cuda.CudnnOpPointwise, Name: name, Mode: mode, Compute: compute, In: in, Out: out})
		return out
	}
	genIndex := func(name string, compute cuda.CudnnDataType, axis int64, dims, strides []int64, x int64) int64 {
		out := virtual(name, cuda.CudnnInt32, dims, strides)
		op(cuda.CudnnOp{Kind: cuda.CudnnOpPointwise, Name: name, Mode: cuda.CudnnGenIndex, Compute: compute, Axis: axis, In: []int64{x}, Out: out})
		return out
	}

	var qRagged, oRagged int64
	if !s.Decode {
		qRagged = add(cuda.CudnnTensor{UID: cudnnUIDQOff, Name: "q_ragged_offsets", DType: cuda.CudnnInt32, Dims: []int64{B + 1, 1, 1, 1}, Strides: one})
		oRagged = add(cuda.CudnnTensor{UID: cudnnUIDOOff, Name: "o_ragged_offsets", DType: cuda.CudnnInt32, Dims: []int64{B + 1, 1, 1, 1}, Strides: one})
	}
	q := add(cuda.CudnnTensor{UID: cudnnUIDQ, Name: "Q", DType: dt, Dims: []int64{B, H, Sq, Dq}, Strides: []int64{Sq * H * Dq, Dq, H * Dq, 1}, Ragged: qRagged})
	kc := add(cuda.CudnnTensor{UID: cudnnUIDK, Name: "K_container", DType: dt, Dims: []int64{nb, Hk, ps, Dq}, Strides: []int64{ps * Hk * Dq, Dq, Hk * Dq, 1}})
	vc := add(cuda.CudnnTensor{UID: cudnnUIDV, Name: "V_container", DType: dt, Dims: []int64{nb, Hk, ps, Dv}, Strides: []int64{ps * Hk * Dv, Dv, Hk * Dv, 1}})
	seqQ, seqKV := perSeq(cudnnUIDSeqQ, "seq_len_q"), perSeq(cudnnUIDSeqKV, "seq_len_kv")
	table := func(uid int64, name string) int64 {
		return add(cuda.CudnnTensor{UID: uid, Name: name, DType: cuda.CudnnInt32, Dims: []int64{B, 1, P, 1}, Strides: []int64{P, P, 1, 1}})
	}
	pageK, pageV := table(cudnnUIDPageK, "page_table_k"), table(cudnnUIDPageV, "page_table_v")
	scale := scalar(cudnnUIDScale, "attn_scale", s.Scale)
	o := add(cuda.CudnnTensor{UID: cudnnUIDO, Name: "O", DType: dt, Dims: []int64{B, H, Sq, Dv}, Strides: []int64{Sq * H * Dv, Dv, H * Dv, 1}, Ragged: oRagged})

	kT := virtual("K_paged", dt, []int64{B, Hk, Dq, Skv}, []int64{Dq * Skv * Hk, Dq * Skv, 1, Dq})
	op(cuda.CudnnOp{Kind: cuda.CudnnOpPagedLoad, Name: "paged_k_load", In: []int64{kc, pageK, seqKV}, Out: kT})
	sd, ss := []int64{B, H, Sq, Skv}, []int64{H * Sq * Skv, Sq * Skv, Skv, 1}
	scores := virtual("bmm1", cuda.CudnnFloat, sd, ss)
	op(cuda.CudnnOp{Kind: cuda.CudnnOpMatmul, Name: "bmm1", Compute: cuda.CudnnFloat, In: []int64{q, kT}, Out: scores, MOverride: seqQ, NOverride: seqKV})
	x := pw("attn_scale", cuda.CudnnMul, cuda.CudnnFloat, cuda.CudnnFloat, sd, ss, scores, scale)

	row := genIndex("gen_row_idx_padding", cuda.CudnnInt32, 2, sd, ss, x)
	col := genIndex("gen_col_idx_padding", cuda.CudnnInt32, 3, sd, ss, x)
	rowOK := pw("lt_row_sq_padding", cuda.CudnnCmpLT, cuda.CudnnBoolean, cuda.CudnnBoolean, sd, ss, row, seqQ)
	colOK := pw("lt_col_skv_padding", cuda.CudnnCmpLT, cuda.CudnnBoolean, cuda.CudnnBoolean, sd, ss, col, seqKV)
	inside := pw("and_row_col_padding", cuda.CudnnLogicalAnd, cuda.CudnnBoolean, cuda.CudnnBoolean, sd, ss, rowOK, colOK)
	lowPad := scalar(cudnnUIDLowestPad, "lowest_padding", s.Lowest)
	x = pw("select_padding", cuda.CudnnBinarySelect, cuda.CudnnFloat, cuda.CudnnFloat, sd, ss, x, lowPad, inside)

	if !s.Decode {
		row := genIndex("gen_row_index", cuda.CudnnFloat, 2, sd, ss, x)
		col := genIndex("gen_col_index", cuda.CudnnFloat, 3, sd, ss, x)
		row = pw("row+skv", cuda.CudnnAdd, cuda.CudnnInt32, cuda.CudnnInt32, sd, ss, row, seqKV)
		row = pw("row+skv-sq", cuda.CudnnSub, cuda.CudnnInt32, cuda.CudnnInt32, sd, ss, row, seqQ)
		keep := pw("row+skv-sq>=col", cuda.CudnnCmpGE, cuda.CudnnBoolean, cuda.CudnnBoolean, sd, ss, row, col)
		lowCausal := scalar(cudnnUIDLowestCausal, "lowest_causal", s.Lowest)
		x = pw("select_causal", cuda.CudnnBinarySelect, cuda.CudnnFloat, cuda.CudnnFloat, sd, ss, x, lowCausal, keep)
	}

	rd, rs := []int64{B, H, Sq, 1}, []int64{H * Sq, Sq, 1, 1}
	mx := virtual("softmax_max", cuda.CudnnFloat, rd, rs)
	op(cuda.CudnnOp{Kind: cuda.CudnnOpReduction, Name: "softmax_max", Compute: cuda.CudnnFloat, Reduce: cuda.CudnnReduceMax, In: []int64{x}, Out: mx})
	sub := pw("softmax_sub", cuda.CudnnSub, cuda.CudnnFloat, cuda.CudnnFloat, sd, ss, x, mx)
	ex := pw("softmax_exp", cuda.CudnnExp, cuda.CudnnFloat, cuda.CudnnFloat, sd, ss, sub)
	sum := virtual("softmax_sum", cuda.CudnnFloat, rd, rs)
	op(cuda.CudnnOp{Kind: cuda.CudnnOpReduction, Name: "softmax_sum", Compute: cuda.CudnnFloat, Reduce: cuda.CudnnReduceAdd, In: []int64{ex}, Out: sum})
	lg := pw("softmax_log", cuda.CudnnLog, cuda.CudnnFloat, cuda.CudnnFloat, rd, rs, sum)
	if s.Stats {
		dims, strides := s.statsLayout()
		st := add(cuda.CudnnTensor{UID: cudnnUIDStats, Name: "Stats", DType: cuda.CudnnFloat, Dims: dims, Strides: strides})
		op(cuda.CudnnOp{Kind: cuda.CudnnOpPointwise, Name: "softmax_stats", Mode: cuda.CudnnAdd, Compute: cuda.CudnnFloat, In: []int64{mx, lg}, Out: st})
	} else {
		pw("softmax_stats", cuda.CudnnAdd, cuda.CudnnFloat, cuda.CudnnFloat, rd, rs, mx, lg)
	}
	// P enters the second product in the inputs' dtype.
	p := pw("softmax_div", cuda.CudnnDiv, cuda.CudnnFloat, dt, sd, ss, ex, sum)

	vv := virtual("V_paged", dt, []int64{B, Hk, Skv, Dv}, []int64{Dv * Skv * Hk, Dv * Skv, Dv, 1})
	op(cuda.CudnnOp{Kind: cuda.CudnnOpPagedLoad, Name: "paged_v_load", In: []int64{vc, pageV, seqKV}, Out: vv})
	op(cuda.CudnnOp{Kind: cuda.CudnnOpMatmul, Name: "bmm2", Compute: cuda.CudnnFloat, In: []int64{p, vv}, Out: o, MOverride: seqQ, KOverride: seqKV})
	return g, g.Validate()
}

// cudnnBindings are the device pointers of a plan's bound tensors: q, the
// layer's K and V pools, the output, the statistics (s.Stats: a buffer of
// statsLayout) and the forward's arrays at extra (cudnnArrays).
func cudnnBindings(s cudnnShape, extra, q, k, v, o, stats cuda.DevicePtr) map[int64]cuda.DevicePtr {
	a := s.arrays()
	word := func(i int) cuda.DevicePtr { return extra.Add(4 * i) }
	ptrs := map[int64]cuda.DevicePtr{
		cudnnUIDQ: q, cudnnUIDK: k, cudnnUIDV: v, cudnnUIDO: o,
		cudnnUIDSeqQ: word(a.SeqQ), cudnnUIDSeqKV: word(a.SeqKV),
		cudnnUIDPageK: word(a.Table), cudnnUIDPageV: word(a.Table),
	}
	if !s.Decode {
		ptrs[cudnnUIDQOff], ptrs[cudnnUIDOOff] = word(a.QOff), word(a.OOff)
	}
	if s.Stats {
		ptrs[cudnnUIDStats] = stats
	}
	return ptrs
}

// cudnnBackend runs attention through cuDNN's fused SDPA, one execution
// plan per shape (cudnnShape), built on first use and kept.
type cudnnBackend struct {
	rt      *Runtime
	dnn     *cuda.Cudnn
	planner *Planner
	geom    cudnnGeom
	// shape is the planned forward's (set by the planner's Extra).
	shape cudnnShape

	mu    sync.Mutex
	plans map[cudnnShape]*cuda.CudnnPlan
}

// cudnnRefusal is why a layer or batch cannot run on cuDNN, naming the
// column of `gosling backends` it lacks ("" when it can run). Resolve
// refuses these from CudnnCaps already; this guards a caller that did
// not resolve.
func cudnnRefusal(layer *attention.Layer, b *forward.Batch) string {
	switch {
	case layer.MLA:
		return "MLA"
	case layer.SlidingWindow > 0:
		return "sliding window"
	case layer.LogitSoftcap != 0:
		return "logit softcap"
	case b.CustomMask != nil:
		return "spec. decoding (tree masks)"
	case b.Mode == forward.Encode || len(b.Spans) > 0:
		return "multimodal (bidirectional)"
	}
	return ""
}

func newCudnnBackend(opts attention.Options) (attention.Backend, error) {
	rt, err := FromOptions(opts)
	if err != nil {
		return nil, err
	}
	if arch := rt.Dev.Info.Arch(); arch < 80 {
		return nil, fmt.Errorf("cudnn attention needs an sm_80 or newer GPU (this one is sm_%d)", arch)
	}
	if len(opts.Layers) == 0 {
		return nil, fmt.Errorf("cudnn attention needs the model's layers in attention.Options")
	}
	l0 := opts.Layers[0]
	geom := cudnnGeom{Heads: l0.NumHeads, KVHeads: l0.NumKVHeads, DimQK: l0.HeadDim, DimV: l0.HeadDimV}
	for i := range opts.Layers {
		l := &opts.Layers[i]
		if g := (cudnnGeom{l.NumHeads, l.NumKVHeads, l.HeadDim, l.HeadDimV}); g != geom {
			return nil, fmt.Errorf("cudnn attention: layer %d has heads/dims %+v, layer 0 %+v; one backend serves one geometry", l.Index, g, geom)
		}
		if why := cudnnRefusal(l, &forward.Batch{Mode: forward.Decode}); why != "" {
			return nil, fmt.Errorf("cudnn attention backend does not support %s (layer %d; the %q column of `gosling backends`)", why, l.Index, why)
		}
	}
	dnn, err := cuda.NewCudnn(rt.Dev)
	if err != nil {
		return nil, fmt.Errorf("cudnn attention: %w", err)
	}
	be := &cudnnBackend{rt: rt, dnn: dnn, planner: NewPlanner(rt), geom: geom, plans: map[cudnnShape]*cuda.CudnnPlan{}}
	be.planner.Extra = func(b *forward.Batch, lay *Layout, words []int32) ([]int32, error) {
		if b.Mode == forward.Encode {
			return words, nil
		}
		blocks := b.KV.Pool.NumSlots / lay.PageSize
		be.shape = cudnnShapeOf(b, be.geom, lay.PageSize, blocks)
		return appendCudnnArrays(words, b, be.shape), nil
	}
	return be, nil
}

func (*cudnnBackend) Name() string { return "cudnn" }

func (be *cudnnBackend) Plan(b *forward.Batch) error {
	_, err := be.planner.Plan(b)
	return err
}

func (be *cudnnBackend) Extend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

func (be *cudnnBackend) Decode(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

// plan is the execution plan of shape s, built on first use.
func (be *cudnnBackend) plan(s cudnnShape) (*cuda.CudnnPlan, error) {
	be.mu.Lock()
	defer be.mu.Unlock()
	if p, ok := be.plans[s]; ok {
		return p, nil
	}
	g, err := cudnnSDPAGraph(s)
	if err != nil {
		return nil, fmt.Errorf("cudnn attention graph %+v: %w", s, err)
	}
	p, err := be.dnn.Build(g)
	if err != nil {
		return nil, fmt.Errorf("cudnn attention plan for batch %d, %d queries, %d keys (page %d), heads %d/%d, dims %d/%d, %v: %w",
			s.Batch, s.MaxQ, s.SKV(), s.PageSize, s.Heads, s.KVHeads, s.DimQK, s.DimV, s.DType, err)
	}
	be.plans[s] = p
	return p, nil
}

func (be *cudnnBackend) attend(qt, kt, vt tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	if why := cudnnRefusal(layer, b); why != "" {
		return tensor.T{}, fmt.Errorf("cudnn attention backend does not support %s (the %q column of `gosling backends`)", why, why)
	}
	q, k, v, err := CheckDevice(qt, kt, vt, layer, b)
	if err != nil {
		return tensor.T{}, err
	}
	pool := b.KV.Pool
	kv := pool.Spec.DType
	if kv != tensor.BF16 {
		return tensor.T{}, fmt.Errorf("cudnn attention backend does not support KV cache dtype %v (the \"bf16 KV\" column is its only one)", kv)
	}
	if g := (cudnnGeom{layer.NumHeads, layer.NumKVHeads, layer.HeadDim, layer.HeadDimV}); g != be.geom {
		return tensor.T{}, fmt.Errorf("cudnn attention: layer %d has heads/dims %+v, the backend was built for %+v", layer.Index, g, be.geom)
	}
	p, err := be.planner.For(b)
	if err != nil {
		return tensor.T{}, err
	}
	rt := be.rt
	sinks, err := rt.SinksPtr(layer)
	if err != nil {
		return tensor.T{}, err
	}
	s := be.shape
	s.DType, s.Scale, s.Lowest, s.Stats = kv, layer.Scale, float32(math.Inf(-1)), sinks != 0
	if be.dnn.Version < 91000 {
		s.Lowest = -math.MaxFloat32
	}
	if !s.Decode && rt.Dev.Info.Arch() < 90 && be.dnn.Version < 91801 {
		return tensor.T{}, fmt.Errorf("cudnn attention: ragged (packed) queries of a prefill need an sm_90 GPU or cuDNN 9.18.1 (this GPU is sm_%d, cuDNN %s)",
			rt.Dev.Info.Arch(), cuda.CudnnVersionString(be.dnn.Version))
	}
	if err := rt.StoreKV(p, k, v, layer, pool); err != nil {
		return tensor.T{}, err
	}
	plan, err := be.plan(s)
	if err != nil {
		return tensor.T{}, err
	}
	// Decode reads and writes Batch dense rows (padding rows past the
	// batch); an extend reads and writes exactly its tokens.
	rows := p.NumTokens
	if s.Decode {
		rows = s.Batch
	}
	var bufs []cuda.Buffer
	defer func() {
		for _, buf := range bufs {
			rt.release(buf)
		}
	}()
	alloc := func(bytes int) (cuda.DevicePtr, error) {
		buf, err := rt.scratch(bytes)
		if err != nil {
			return 0, err
		}
		bufs = append(bufs, buf)
		return buf.Ptr, nil
	}
	qPtr := cuda.DevicePtr(q.Ptr)
	if q.DType != kv || rows != p.NumTokens {
		if qPtr, err = alloc(rows * layer.NumHeads * layer.HeadDim * elemBytes(kv)); err != nil {
			return tensor.T{}, err
		}
		if err := rt.Kernels.Convert(rt.Stream, qPtr, cuda.DevicePtr(q.Ptr), q.Len(), q.DType, kv); err != nil {
			return tensor.T{}, err
		}
	}
	cols := layer.NumHeads * layer.HeadDimV
	// The output is allocated in the cache dtype with the rows cuDNN
	// writes; a float32 (or f16) caller gets it converted.
	oBuf, err := rt.scratch(rows * cols * elemBytes(kv))
	if err != nil {
		return tensor.T{}, err
	}
	out := tensor.Device{Shape: []int{p.NumTokens, cols}, Ptr: uintptr(oBuf.Ptr), DType: kv}.T()
	var ws, stats cuda.DevicePtr
	if plan.Workspace > 0 {
		if ws, err = alloc(int(plan.Workspace)); err != nil {
			rt.release(oBuf)
			return tensor.T{}, err
		}
	}
	if s.Stats {
		dims, _ := s.statsLayout()
		if stats, err = alloc(4 * int(dims[0]*dims[1]*dims[2])); err != nil {
			rt.release(oBuf)
			return tensor.T{}, err
		}
	}
	ptrs := cudnnBindings(s, p.Extra, qPtr, cuda.DevicePtr(pool.Device.K[layer.Index]), cuda.DevicePtr(pool.Device.V[layer.Index]), oBuf.Ptr, stats)
	if err := plan.Execute(rt.Stream, ptrs, ws); err != nil {
		rt.release(oBuf)
		return tensor.T{}, fmt.Errorf("cudnn attention layer %d: %w", layer.Index, err)
	}
	if q.DType == kv {
		if sinks != 0 {
			if err := be.sinkScale(p, s, out.DevPtr(), oBuf.Ptr, stats, sinks, kv); err != nil {
				rt.release(oBuf)
				return tensor.T{}, err
			}
		}
		return out, nil
	}
	defer rt.release(oBuf)
	conv, err := rt.allocOutput(p.NumTokens * cols * elemBytes(q.DType))
	if err != nil {
		return tensor.T{}, err
	}
	res := tensor.Device{Shape: []int{p.NumTokens, cols}, Ptr: uintptr(conv.Ptr), DType: q.DType}
	if sinks != 0 {
		err = be.sinkScale(p, s, res.Ptr, oBuf.Ptr, stats, sinks, q.DType)
	} else {
		err = rt.Kernels.Convert(rt.Stream, conv.Ptr, oBuf.Ptr, p.NumTokens*cols, kv, q.DType)
	}
	if err != nil {
		rt.FreeOutput(res)
		return tensor.T{}, err
	}
	return res.T(), nil
}

// sinkScale takes each head's sink share out of cuDNN's output rows o
// (bf16, normalised over the keys) into out (dtype to; o itself when
// bf16): row (token t, head h) times e^lse / (e^lse + e^sink[h]), lse the
// row's statistic, read at the layout the plan bound (statsLayout) for
// t's sequence and its query index in it.
func (be *cudnnBackend) sinkScale(p *Plan, s cudnnShape, out uintptr, o, stats, sinks cuda.DevicePtr, to tensor.DType) error {
	_, st := s.statsLayout()
	return be.rt.launchAttnSinkScale(cuda.LaunchConfig{Grid: cuda.Dim3{X: p.NumTokens, Y: s.Heads, Z: 1}, Block: cuda.D1(128)}, to,
		attnSinkScaleArgs{Out: cuda.DevicePtr(out), O: o, Stats: stats, StatsB: int(st[0]), StatsH: int(st[1]), StatsS: int(st[2]),
			Sinks: sinks, Req: p.Req, TokReq: p.TokReq, NHeads: s.Heads, Dv: s.DimV})
}

// Close frees the plans, the handle and the planner's buffers.
func (be *cudnnBackend) Close() error {
	be.mu.Lock()
	for s, p := range be.plans {
		p.Close()
		delete(be.plans, s)
	}
	be.mu.Unlock()
	be.planner.Close()
	return be.dnn.Close()
}
