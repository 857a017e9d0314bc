package cuda

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// The ModelOps methods of multi-head latent attention and mixtures of
// experts (DeepSeek), over kernels/moe.cu: ConcatHeads, LinearPerHead,
// Route and ScatterAddRows. As in modelops_forward.go, arguments are
// checked on the caller's goroutine and the kernels enqueued inside one
// Device.Do; only Route waits for the stream.

// ConcatHeads joins a [T, heads*da] and b [T, heads*db] head by head:
// [T, heads*(da+db)].
func (o *ModelOps) ConcatHeads(a, b tensor.T, heads int) tensor.T {
	const op = "ConcatHeads"
	must(op, checkActivation("a", a))
	must(op, checkActivation("b", b))
	da, db, err := concatShape(a, b, heads)
	must(op, err)
	var out tensor.T
	o.do(op, func() (err error) {
		if out, err = o.newTensor([]int{a.Rows(), heads * (da + db)}); err != nil {
			return err
		}
		return o.k.ConcatHeadsF32(o.stream, DevicePtr(out.DevPtr()), DevicePtr(a.DevPtr()), DevicePtr(b.DevPtr()), a.Rows(), heads, da, db)
	})
	return out
}

// concatShape is the per-head widths of a and b.
func concatShape(a, b tensor.T, heads int) (da, db int, err error) {
	switch {
	case heads <= 0:
		return 0, 0, fmt.Errorf("%d heads", heads)
	case a.Rows() != b.Rows():
		return 0, 0, fmt.Errorf("a %v and b %v differ in rows", a.Shape, b.Shape)
	case a.Cols()%heads != 0 || b.Cols()%heads != 0:
		return 0, 0, fmt.Errorf("a %v and b %v do not split into %d heads", a.Shape, b.Shape, heads)
	}
	return a.Cols() / heads, b.Cols() / heads, nil
}

// LinearPerHead is y_h = x_h·W_hᵀ for each head: x [T, heads*In], m
// [heads*outH, In] (float32, bf16 or f16; the bias is ignored) → [T, heads*outH].
// It runs one tiled kernel for all heads; x stays float32 even with bf16
// weights.
func (o *ModelOps) LinearPerHead(x tensor.T, mat device.Matrix, heads int) tensor.T {
	const op = "LinearPerHead"
	m := asMatrix(op, mat)
	must(op, checkActivation("x", x))
	must(op, checkPerHead(x, m, heads))
	var out tensor.T
	o.do(op, func() (err error) {
		if out, err = o.newTensor(withCols(x.Shape, m.out)); err != nil {
			return err
		}
		return o.k.HeadLinear(o.stream, DevicePtr(out.DevPtr()), DevicePtr(x.DevPtr()), m.ptr, x.Rows(), heads, m.in, m.out/heads, m.dtype)
	})
	return out
}

func checkPerHead(x tensor.T, m *Matrix, heads int) error {
	switch {
	case m.fp8 != nil:
		return errors.New("FP8 matrices are not applied per head")
	case m.quant != nil:
		return fmt.Errorf("%v matrices are not applied per head", m.dtype)
	case heads <= 0 || heads > maxGridYZ:
		return fmt.Errorf("%d heads (at most %d)", heads, maxGridYZ)
	case m.out%heads != 0:
		return fmt.Errorf("a [%d, %d] matrix does not stack %d heads", m.out, m.in, heads)
	case x.Cols() != heads*m.in:
		return fmt.Errorf("x %v does not fit %d heads of %d inputs", x.Shape, heads, m.in)
	case (x.Rows()+headLinearTile-1)/headLinearTile > maxGridYZ:
		return fmt.Errorf("%d rows, over %d", x.Rows(), maxGridYZ*headLinearTile)
	}
	return nil
}

// ScatterAddRows sets dst[rows[i]] += scales[i]·src[i] for each row of
// src [len(rows), width]; rows must be distinct rows of dst.
func (o *ModelOps) ScatterAddRows(dst, src tensor.T, rows []int32, scales []float32) {
	const op = "ScatterAddRows"
	must(op, checkActivation("dst", dst))
	must(op, checkActivation("src", src))
	must(op, checkScatter(dst, src, rows, scales))
	if len(rows) == 0 {
		return
	}
	o.do(op, func() error {
		dRows, err := o.uploadIndex(rows)
		if err != nil {
			return err
		}
		dScales, err := o.uploadFloats(scales)
		if err != nil {
			return err
		}
		return o.k.ScatterAddRowsF32(o.stream, DevicePtr(dst.DevPtr()), DevicePtr(src.DevPtr()), dRows, dScales, len(rows), dst.Cols())
	})
}

// checkScatter accepts distinct rows of dst, one per row of src, each
// with a scale. Distinct rows are what lets the kernel add without atomics.
func checkScatter(dst, src tensor.T, rows []int32, scales []float32) error {
	if src.Rows() != len(rows) || len(scales) != len(rows) {
		return fmt.Errorf("src %v, %d rows and %d scales disagree", src.Shape, len(rows), len(scales))
	}
	if len(rows) > 0 && src.Cols() != dst.Cols() {
		return fmt.Errorf("src %v and dst %v differ in width", src.Shape, dst.Shape)
	}
	if err := checkRows(rows, dst.Rows()); err != nil {
		return err
	}
	// Sorting a copy costs O(len(rows)), not O(dst rows), per call: an
	// MoE layer makes one call per expert.
	sorted := slices.Clone(rows)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return fmt.Errorf("dst row %d appears twice; rows must be distinct", sorted[i])
		}
	}
	return nil
}

// uploadFloats copies float32 values into the arena through pinned staging.
func (o *ModelOps) uploadFloats(vals []float32) (DevicePtr, error) {
	b, err := o.arena.alloc(4 * len(vals))
	if err != nil {
		return 0, err
	}
	if err := o.stageCopy(b.Ptr, vals); err != nil {
		return 0, err
	}
	return b.Ptr, nil
}

// maxRouteSharedBytes is the dynamic shared memory moe_route_f32 may use
// without opting in to more (48 KiB on every architecture).
const maxRouteSharedBytes = 48 << 10

// Route chooses each token's experts from logits [T, experts] by r's rule
// on the device, then waits for the stream and returns the choice on the
// host: experts and weights [T*r.TopK], token-major. A forward that routes
// cannot become a CUDA graph (RunGraph runs it eagerly).
func (o *ModelOps) Route(logits tensor.T, r *device.Router) (experts []int32, weights []float32) {
	const op = "Route"
	must(op, checkActivation("logits", logits))
	nExp, nTok := logits.Cols(), logits.Rows()
	must(op, r.Check(nExp))
	p := routeParams(r, nTok, nExp)
	must(op, p.check())
	experts, weights = make([]int32, nTok*r.TopK), make([]float32, nTok*r.TopK)
	if nTok == 0 {
		return experts, weights
	}
	o.do(op, func() error {
		if o.dev.Recording() {
			// A graph cannot hold a read-back, and in a dry run nothing
			// runs to read: refuse the recording (the forward then runs
			// eagerly) and hand back a placeholder the rest of the forward
			// can dispatch (the first TopK experts, weight 0).
			o.dev.rec.refuse("MoE routing reads its choice back to the host")
			for i := range experts {
				experts[i] = int32(i % r.TopK)
			}
			return nil
		}
		dExp, err := o.arena.alloc(4 * len(experts))
		if err != nil {
			return err
		}
		dW, err := o.arena.alloc(4 * len(weights))
		if err != nil {
			return err
		}
		p.Logits, p.Experts, p.Weights = DevicePtr(logits.DevPtr()), dExp.Ptr, dW.Ptr
		if err := o.k.MoERoute(o.stream, p); err != nil {
			return err
		}
		if err := CopyDtoHAsync(o.dev, experts, dExp.Ptr, o.stream); err != nil {
			return err
		}
		if err := CopyDtoHAsync(o.dev, weights, dW.Ptr, o.stream); err != nil {
			return err
		}
		return o.dev.StreamSync(o.stream)
	})
	for i, e := range experts {
		if e < 0 || int(e) >= nExp {
			must(op, fmt.Errorf("token %d: no expert could be chosen (NaN router logits?)", i/r.TopK))
		}
	}
	return experts, weights
}

// routeParams is r's rule for nTok tokens' logits over nExp experts, its
// buffers left to the caller but the bias.
func routeParams(r *device.Router, nTok, nExp int) RouteParams {
	p := RouteParams{NTokens: nTok, NExperts: nExp, TopK: r.TopK, Softmax: r.Softmax, NormTopK: r.NormTopK, Scale: r.Scale}
	if r.Bias != nil {
		p.Bias = asVector("Route", r.Bias).ptr
	}
	if r.Grouped() {
		p.Groups, p.TopKGroups, p.GroupByMaxScore = r.Groups, r.TopKGroups, r.GroupByMaxScore
	}
	return p
}

// Go wrappers of kernels/moe.cu.

// ConcatHeadsF32 joins a and b head by head.
//
//	a: [rows, heads*da]   b: [rows, heads*db]   out: [rows, heads*(da+db)], float32, dense
func (k *Kernels) ConcatHeadsF32(s Stream, out, a, b DevicePtr, rows, heads, da, db int) error {
	n := rows * heads * (da + db)
	if n == 0 {
		return nil
	}
	return k.launchConcatHeadsF32(s, flatConfig(n), concatHeadsF32Args{Out: out, A: a, B: b, Rows: rows, Heads: heads, Da: da, Db: db})
}

// headLinearTile is head_linear's tile of tokens and of outputs.
const headLinearTile = 32

// HeadLinear is y_h = x_h·W_hᵀ per head, W in wdt (F32, BF16 or F16).
//
//	x: [rows, heads*in] float32   w: [heads*outH, in]   y: [rows, heads*outH] float32
func (k *Kernels) HeadLinear(s Stream, y, x, w DevicePtr, rows, heads, in, outH int, wdt DType) error {
	if rows == 0 || heads == 0 || outH == 0 {
		return nil
	}
	if !gemvWeights(wdt) {
		return fmt.Errorf("head_linear: weights in %v (float32, bfloat16 or float16)", wdt)
	}
	grid := Dim3{(outH + headLinearTile - 1) / headLinearTile, (rows + headLinearTile - 1) / headLinearTile, heads}
	return k.launchHeadLinear(s, LaunchConfig{Grid: grid, Block: Dim3{headLinearTile, 8, 1}}, wdt,
		headLinearArgs{Y: y, X: x, W: w, Rows: rows, Heads: heads, In: in, OutH: outH})
}

// ScatterAddRowsF32 sets dst[rows[i]] += scales[i]·src[i] for n distinct rows.
//
//	dst: [*, width]   src: [n, width]   rows: [n] int32   scales: [n] float32
func (k *Kernels) ScatterAddRowsF32(s Stream, dst, src, rows, scales DevicePtr, n, width int) error {
	if n == 0 || width == 0 {
		return nil
	}
	return k.launchScatterAddRowsF32(s, LaunchConfig{Grid: D1(n), Block: D1(rowThreads(width))},
		scatterAddRowsF32Args{Dst: dst, Src: src, Rows: rows, Scales: scales, Width: width})
}

// RouteParams describes one moe_route_f32 launch (device.Router's rule;
// Groups 0 when selection is not grouped).
//
//	Logits: [NTokens, NExperts] float32   Bias: [NExperts] float32 or 0
//	Experts: [NTokens, TopK] int32        Weights: [NTokens, TopK] float32
type RouteParams struct {
	Logits, Bias, Experts, Weights DevicePtr
	NTokens, NExperts, TopK        int
	Softmax, NormTopK              bool
	Groups, TopKGroups             int
	GroupByMaxScore                bool
	Scale                          float32
}

// Flags of moe_route_f32, as kernels/moe.cu defines them.
const (
	routeSoftmax  = 1
	routeGrouped  = 2
	routeGroupMax = 4
	routeNorm     = 8
)

func (p RouteParams) sharedBytes() int { return 4 * (3*p.NExperts + 2*p.Groups) }

func (p RouteParams) check() error {
	switch {
	case p.NExperts <= 0 || p.TopK <= 0 || p.TopK > p.NExperts:
		return fmt.Errorf("route: top-%d of %d experts", p.TopK, p.NExperts)
	case p.Groups > 0 && (p.NExperts%p.Groups != 0 || p.TopKGroups <= 0 || p.TopKGroups > p.Groups):
		return fmt.Errorf("route: top-%d of %d groups over %d experts", p.TopKGroups, p.Groups, p.NExperts)
	case p.sharedBytes() > maxRouteSharedBytes:
		return fmt.Errorf("route: %d experts need %d bytes of shared memory, over %d", p.NExperts, p.sharedBytes(), maxRouteSharedBytes)
	}
	return nil
}

// MoERoute launches moe_route_f32: one warp per token.
func (k *Kernels) MoERoute(s Stream, p RouteParams) error {
	if err := p.check(); err != nil {
		return err
	}
	if p.NTokens == 0 {
		return nil
	}
	flags := 0
	if p.Softmax {
		flags |= routeSoftmax
	}
	if p.Groups > 0 {
		flags |= routeGrouped
		if p.GroupByMaxScore {
			flags |= routeGroupMax
		}
	}
	if p.NormTopK {
		flags |= routeNorm
	}
	return k.launchMoERouteF32(s, LaunchConfig{Grid: D1(p.NTokens), Block: D1(32), SharedMem: p.sharedBytes()},
		moERouteF32Args{Logits: p.Logits, Bias: p.Bias, Experts: p.Experts, Weights: p.Weights, NExperts: p.NExperts,
			TopK: p.TopK, NGroups: p.Groups, TopkGroups: p.TopKGroups, Flags: flags, Scale: p.Scale})
}
