// Package device is the contract between model code and a device's
// non-attention kernels. A model prepares its weights once through Ops
// (Matrix, Vector) and runs every forward through the same calls, whether
// the tensors are host slices (device/cpu) or GPU memory (device/cuda).
// Attention is not here: it goes through the attention.Backend contract.
package device

import (
	"fmt"

	"github.com/gosling-ai/gosling/tensor"
)

// Matrix is a linear layer's weight [Out, In] (plus an optional bias),
// prepared for one device: possibly converted, quantised or uploaded.
type Matrix interface {
	Out() int
	In() int
}

// Vector is a prepared 1-D weight (a norm's scale).
type Vector interface {
	Len() int
}

// Rope is a rotary embedding: the first rot = 2·len(InvFreq) values of
// each head of HeadDim values rotate by position·InvFreq[i], pairs
// (i, i+rot/2), or (2i, 2i+1) when Interleaved; the other HeadDim-rot
// values pass through (partial rotary; rot = HeadDim for most models).
type Rope struct {
	HeadDim     int
	InvFreq     []float32 // [rot/2], rot ≤ HeadDim
	Interleaved bool
}

// MatrixGrouper is Ops that can place matrices sharing an input (q, k
// and v; gate and up) side by side, so that a product of several rows
// can compute them in one GEMM, as SGLang's merged QKV and gate_up
// layers do. Each result behaves exactly as Matrix's would.
type MatrixGrouper interface {
	// MatrixGroup prepares ws[i] with biases[i] (nil, or a nil entry: no
	// bias), as Matrix does.
	MatrixGroup(ws []tensor.Weight, biases [][]float32) ([]Matrix, error)
}

// Ops are one device's kernels as a model uses them. Tensors are float32
// activations, row-major: [T, width] for T tokens. Results are new tensors
// unless the method says "in place"; a device may recycle them after
// EndForward, so a model must not keep them across forwards.
type Ops interface {
	// Name is the device: "cpu" or "cuda".
	Name() string

	// Matrix prepares w ([out, in], any stored dtype) and bias ([out] or nil).
	Matrix(w tensor.Weight, bias []float32) (Matrix, error)
	// Vector prepares a 1-D weight.
	Vector(v []float32) (Vector, error)

	// BeginForward and EndForward bracket one forward pass; tensors made
	// in between may be recycled by the next BeginForward.
	BeginForward()
	EndForward()

	// Embed gathers rows of table (a Matrix of [vocab, hidden]): [len(ids), hidden].
	Embed(table Matrix, ids []int32) tensor.T
	// Linear is x·Wᵀ + b: [T, In] → [T, Out].
	Linear(x tensor.T, m Matrix) tensor.T
	// LinearGroup applies several matrices with the same input (q, k, v;
	// gate, up), letting a device share the input's preparation.
	LinearGroup(x tensor.T, ms ...Matrix) []tensor.T
	// RMSNorm returns x / rms(x) · w over rows of w.Len() values; with
	// w.Len() smaller than the row it normalises each head of that width.
	RMSNorm(x tensor.T, w Vector, eps float64) tensor.T
	// NormLinearGroup is LinearGroup(RMSNorm(x, w, eps), ms...) with the
	// norm over whole rows (w.Len() == x's row width): a device may
	// normalise x as it reads it, never writing the normalised rows.
	NormLinearGroup(x tensor.T, w Vector, eps float64, ms ...Matrix) []tensor.T
	// LinearAdd sets dst += x·Wᵀ + b in place (the residual add after a
	// projection, which a device may do in the linear's store).
	LinearAdd(dst, x tensor.T, m Matrix)
	// GatedMLPAdd sets x += down(silu(gate(xn))·up(xn)) in place, with
	// xn = RMSNorm(x, w, eps): a SwiGLU MLP with its norm and residual add,
	// which a device may run as two launches for a decode batch.
	GatedMLPAdd(x tensor.T, w Vector, eps float64, gate, up, down Matrix)
	// Rope rotates every head of every row of x in place; positions: [T].
	Rope(x tensor.T, positions []int32, r *Rope)
	// RopeQK is Rope of q and of k by the same positions and rope (one
	// launch on a GPU).
	RopeQK(q, k tensor.T, positions []int32, r *Rope)
	// SiLUMul sets gate = silu(gate)·up in place; GeLUTanhMul likewise.
	SiLUMul(gate, up tensor.T)
	GeLUTanhMul(gate, up tensor.T)
	// Add sets dst += src in place.
	Add(dst, src tensor.T)
	// Scale multiplies x by s in place.
	Scale(x tensor.T, s float32)
	// Softcap sets x = cap·tanh(x/cap) in place.
	Softcap(x tensor.T, cap float32)
	// GatherRows picks rows of x: [len(rows), width].
	GatherRows(x tensor.T, rows []int32) tensor.T
	// ToHost returns x's values on the host (x itself on the CPU).
	ToHost(x tensor.T) tensor.T
	// Adopt takes a tensor made outside Ops on this device (an attention
	// backend's output) into the forward's memory, to be recycled with the
	// rest; a no-op where memory is garbage collected.
	Adopt(x tensor.T)

	// ConcatHeads joins a [T, heads*da] and b [T, heads*db] head by head:
	// [T, heads*(da+db)], head h being a's head h then b's (with heads 1,
	// the two rows side by side).
	ConcatHeads(a, b tensor.T, heads int) tensor.T
	// LinearPerHead applies one matrix per head: m stacks heads matrices
	// W_h [m.Out()/heads, m.In()] row-wise (its bias is ignored), x is
	// [T, heads*m.In()], and head h of the result [T, m.Out()] is x_h·W_hᵀ.
	LinearPerHead(x tensor.T, m Matrix, heads int) tensor.T
	// Route picks each token's experts from router logits [T, experts]
	// by r's rule: r.TopK experts per token and their weights, token-major
	// ([T*r.TopK] each), on the host. It waits for the device, since the
	// dispatch that follows (GatherRows, ScatterAddRows) takes host rows.
	Route(logits tensor.T, r *Router) (experts []int32, weights []float32)
	// ScatterAddRows sets dst[rows[i]] += scales[i]·src[i] in place for
	// every row i of src [len(rows), width]; rows are distinct rows of dst.
	ScatterAddRows(dst, src tensor.T, rows []int32, scales []float32)
}

// OverwriteOps is an optional power of a device (found by type
// assertion): LinearAdd and GatedMLPAdd writing their destination instead
// of adding to it. Tensor parallelism runs them on every rank but the
// first, so that the all-reduce of a row-parallel product adds rank 0's
// residual once and no rank runs a separate add.
type OverwriteOps interface {
	// LinearInto sets dst = x·Wᵀ + b (LinearAdd without the add).
	LinearInto(dst, x tensor.T, m Matrix)
	// GatedMLPInto sets x = down(silu(gate(xn))·up(xn)), xn = RMSNorm(x,
	// w, eps) (GatedMLPAdd without the add).
	GatedMLPInto(x tensor.T, w Vector, eps float64, gate, up, down Matrix)
}

// Scoped is Ops that can take back at once every tensor a forward made
// since a mark (cuda.ModelOps): a model marks before a layer and
// releases after it, once the layer's output is in the residual stream,
// so a forward holds one layer's activations at a time, not every
// layer's. Tensors made before the mark (the residual stream) stay.
type Scoped interface {
	Mark() int
	ReleaseSince(mark int)
}

// ClampedSwiGLUOps is an optional power of a device (found by type
// assertion): GPT-OSS's expert activation. Models that need it check for
// it at load and refuse a device without it.
type ClampedSwiGLUOps interface {
	// ClampedSwiGLU sets, in place, gate = (clamp(up, −limit, limit) + 1) ·
	// g·sigmoid(alpha·g) with g = min(gate, limit); both are [T, width].
	ClampedSwiGLU(gate, up tensor.T, alpha, limit float32)
}

// ExpertActivation is a mixture's expert activation: silu(gate)·up, or,
// when Clamped, GPT-OSS's clamped SwiGLU (ClampedSwiGLUOps) with Alpha
// and Limit.
type ExpertActivation struct {
	Clamped      bool
	Alpha, Limit float32
}

// ExpertGroup is a mixture's routed experts as an ExpertOps device
// prepared them.
type ExpertGroup interface{ Experts() int }

// ExpertOps is an optional power of a device (found by type assertion):
// running a mixture's routed experts grouped, the tokens sorted by expert
// and each projection of every chosen expert in one launch, instead of a
// gather, three products and a scatter per expert.
type ExpertOps interface {
	// ExpertGroup prepares experts whose gate[i] and up[i] ([inter,
	// hidden]) and down[i] ([hidden, inter]) this device's Matrix made,
	// biases included. It returns nil (and no error) for matrices it does
	// not group; the experts then run one by one.
	ExpertGroup(gate, up, down []Matrix, act ExpertActivation) (ExpertGroup, error)
	// ExpertsAdd sets residual[t] += Σ_j weights[t·k+j]·expert_e(x[t]) in
	// place, e = experts[t·k+j], for x and residual [T, hidden] and Route's
	// k choices per token. It returns false, having done nothing, for a
	// step the device runs faster one expert at a time.
	ExpertsAdd(residual, x tensor.T, g ExpertGroup, experts []int32, weights []float32) bool
}

// RoutedExpertOps is an optional power of an ExpertOps device (found by
// type assertion): a mixture's routing and dispatch on the device, with
// nothing read back to the host, so that a step that routes can be
// captured in a graph. Route followed by ExpertsAdd is its reference.
type RoutedExpertOps interface {
	// RoutedExpertsAdd chooses each token's experts from router logits
	// [T, experts] by r's rule (Route's) and adds their weighted outputs
	// to residual as ExpertsAdd does, on the device. It returns false,
	// having done nothing, for a step it leaves to Route and ExpertsAdd.
	RoutedExpertsAdd(residual, x, logits tensor.T, r *Router, g ExpertGroup) bool
	// SigmoidGatedAdd sets dst[t] += sigmoid(logit[t])·src[t] in place,
	// for dst and src [T, width] and logit [T, 1].
	SigmoidGatedAdd(dst, src, logit tensor.T)
}

// Router is how a mixture-of-experts layer chooses each token's experts
// from its router logits (the DeepSeek V2/V3 rules):
//
//   - score = sigmoid(logit), or the softmax over the experts when Softmax;
//   - choice = score + Bias (the bias steers selection only; weights come
//     from the unbiased scores);
//   - grouped selection, when Groups > 1 and TopKGroups < Groups: the
//     experts form Groups equal groups in order; a group ranks by the sum
//     of its two best choice values (its one value for a group of one), or
//     by its best score when GroupByMaxScore; only the TopKGroups best
//     groups compete (experts outside them can never win);
//   - the TopK highest choice values win, ties to the lower expert; their
//     weights are their scores, divided by the scores' sum (+1e-20) when
//     NormTopK, then multiplied by Scale.
type Router struct {
	TopK            int
	Softmax         bool
	Bias            Vector // [experts], or nil
	Groups          int    // 0 or 1: no grouped selection
	TopKGroups      int
	GroupByMaxScore bool
	NormTopK        bool
	Scale           float32
}

// Grouped reports whether selection is limited to the best groups.
func (r *Router) Grouped() bool { return r.Groups > 1 && r.TopKGroups < r.Groups }

// Check reports a rule that cannot route among experts experts.
func (r *Router) Check(experts int) error {
	switch {
	case experts <= 0:
		return fmt.Errorf("router: %d experts", experts)
	case r.TopK <= 0 || r.TopK > experts:
		return fmt.Errorf("router: top-k %d must be in [1, %d experts]", r.TopK, experts)
	case r.Bias != nil && r.Bias.Len() != experts:
		return fmt.Errorf("router: bias of %d values for %d experts", r.Bias.Len(), experts)
	case !r.Grouped():
		return nil
	case experts%r.Groups != 0:
		return fmt.Errorf("router: %d groups do not divide %d experts", r.Groups, experts)
	case r.TopKGroups <= 0:
		return fmt.Errorf("router: top-k groups %d must be positive", r.TopKGroups)
	case r.TopKGroups*(experts/r.Groups) < r.TopK:
		return fmt.Errorf("router: %d of %d groups leave fewer than top-k %d experts", r.TopKGroups, r.Groups, r.TopK)
	}
	return nil
}
