package parallel

import (
	"fmt"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// NewOps wraps one rank's device ops so that an unmodified model, built
// with the plan's RankConfig over a Source, runs its share of a
// tensor-parallel forward: the collectives sit where the plan needs them.
//
//   - Matrix marks row-parallel weights (o, down) and cuts the rank's rows
//     of the vocabulary out of the embedding and LM head;
//   - a row-parallel Linear all-reduces its output, so LinearAdd and
//     GatedMLPAdd become the linear, the all-reduce and the residual add;
//   - Embed of the rank's vocabulary rows zeroes the tokens it does not
//     hold and all-reduces, and the LM head's Linear all-gathers the
//     logits into the whole vocabulary.
//
// A failed collective panics with a *CollectiveError (the device.Ops
// methods return no errors); Group's forward recovers it into an error.
func NewOps(inner device.Ops, plan *Plan, comm Communicator) (device.Ops, error) {
	if comm.Size() != plan.Size {
		return nil, fmt.Errorf("a plan for %d ranks with a group of %d", plan.Size, comm.Size())
	}
	o := &Ops{Ops: inner, plan: plan, comm: comm}
	if glu, ok := inner.(device.ClampedSwiGLUOps); ok {
		return &opsGLU{o, glu}, nil
	}
	return o, nil
}

// Ops is a rank's device ops with the tensor-parallel collectives.
type Ops struct {
	device.Ops
	plan *Plan
	comm Communicator
}

type opsGLU struct {
	*Ops
	glu device.ClampedSwiGLUOps
}

func (o *opsGLU) ClampedSwiGLU(gate, up tensor.T, alpha, limit float32) {
	o.glu.ClampedSwiGLU(gate, up, alpha, limit)
}

// CollectiveError is the panic value of a collective that failed inside
// a forward.
type CollectiveError struct{ Err error }

func (e *CollectiveError) Error() string { return "tensor parallelism: " + e.Err.Error() }
func (e *CollectiveError) Unwrap() error { return e.Err }

// rowMatrix is a row-parallel weight: its outputs are partial sums.
type rowMatrix struct{ device.Matrix }

// vocabMatrix is the rank's rows [start, start+rows) of a [vocab, hidden]
// table, rows past vocab zero.
type vocabMatrix struct {
	device.Matrix
	start, rows, vocab int
}

func (m *vocabMatrix) Out() int { return m.vocab }

func unwrap(m device.Matrix) device.Matrix {
	switch m := m.(type) {
	case *rowMatrix:
		return m.Matrix
	case *vocabMatrix:
		return m.Matrix
	}
	return m
}

func unwrapAll(ms []device.Matrix) []device.Matrix {
	out := make([]device.Matrix, len(ms))
	for i, m := range ms {
		out[i] = unwrap(m)
	}
	return out
}

func (o *Ops) Matrix(w tensor.Weight, bias []float32) (device.Matrix, error) {
	leaf, param := splitName(w.Name)
	switch {
	case leaf == "embed_tokens" || leaf == "lm_head":
		shard, err := o.plan.Shard(w, o.comm.Rank())
		if err != nil {
			return nil, err
		}
		m, err := o.Ops.Matrix(shard, nil)
		if err != nil {
			return nil, err
		}
		start, rows := o.plan.VocabShard(o.comm.Rank())
		return &vocabMatrix{Matrix: m, start: start, rows: rows, vocab: w.Shape[0]}, nil
	case rowParallel(leaf, param):
		m, err := o.Ops.Matrix(w, o.rowBias(bias))
		if err != nil {
			return nil, err
		}
		return &rowMatrix{m}, nil
	}
	return o.Ops.Matrix(w, bias)
}

// rowParallel reports whether a weight (leaf and param of its name) is
// split by its input columns, its products partial sums to all-reduce.
func rowParallel(leaf, param string) bool {
	return (leaf == "o_proj" || leaf == "down_proj" || leaf == "w2") && param != "bias"
}

// rowBias is a row-parallel layer's bias on this rank: rank 0 adds it,
// once, into the partial sums.
func (o *Ops) rowBias(bias []float32) []float32 {
	if o.comm.Rank() != 0 {
		return nil
	}
	return bias
}

// FP8Weights is the inner ops' (device.FP8Ops), false where they have
// no FP8 kernels.
func (o *Ops) FP8Weights() bool {
	fo, ok := o.Ops.(device.FP8Ops)
	return ok && fo.FP8Weights()
}

// FP8Matrix prepares the rank's slice of an e4m3 linear layer (quantised
// after the cut, so its scales are the slice's own: a row-parallel
// layer's per-row scales cover the rank's columns, and each rank's
// partial product is scaled before the all-reduce sums them), marked
// row-parallel as Matrix marks float ones.
func (o *Ops) FP8Matrix(w tensor.ScaledFP8, bias []float32) (device.Matrix, error) {
	fo, ok := o.Ops.(device.FP8Ops)
	if !ok {
		return nil, fmt.Errorf("the %s ops have no FP8 kernels", o.Ops.Name())
	}
	if leaf, param := splitName(w.Q.Name); rowParallel(leaf, param) {
		m, err := fo.FP8Matrix(w, o.rowBias(bias))
		if err != nil {
			return nil, err
		}
		return &rowMatrix{m}, nil
	}
	return fo.FP8Matrix(w, bias)
}

var _ device.FP8Ops = (*Ops)(nil)

func (o *Ops) allReduce(x tensor.T) {
	if err := o.comm.AllReduceSum(Of(x)); err != nil {
		panic(&CollectiveError{err})
	}
}

func (o *Ops) Embed(table device.Matrix, ids []int32) tensor.T {
	vm, ok := table.(*vocabMatrix)
	if !ok {
		return o.Ops.Embed(table, ids)
	}
	local := make([]int32, len(ids))
	all := make([]int32, len(ids))
	keep := make([]float32, len(ids)) // 0: the rank holds the token; -1: another does
	for i, id := range ids {
		all[i] = int32(i)
		if l := int(id) - vm.start; l >= 0 && l < vm.rows {
			local[i] = int32(l)
		} else {
			keep[i] = -1
		}
	}
	x := o.Ops.Embed(vm.Matrix, local)
	// x[i] += keep[i]·x[i]: exact zeros on the rows another rank holds,
	// the rows unchanged elsewhere. The launches and their shapes are the
	// same whichever tokens are foreign (only keep's values differ), so a
	// decode step stays one CUDA graph.
	o.Ops.ScatterAddRows(x, o.Ops.GatherRows(x, all), all, keep)
	o.allReduce(x)
	return x
}

func (o *Ops) Linear(x tensor.T, m device.Matrix) tensor.T {
	switch m := m.(type) {
	case *rowMatrix:
		y := o.Ops.Linear(x, m.Matrix)
		o.allReduce(y)
		return y
	case *vocabMatrix:
		return o.gatherVocab(o.Ops.Linear(x, m.Matrix), m)
	}
	return o.Ops.Linear(x, m)
}

// gatherVocab joins every rank's logits [T, rows] into [T, vocab] on
// every rank, where the logits are (host or device): an all-gather into
// [rank, T, rows], then one GatherRows that puts each token's shares side
// by side and drops the padding rows past the vocabulary, in units of
// g = gcd(rows, vocab) columns (the whole share when the vocabulary
// splits evenly).
//
// Every rank ends with the whole vocabulary although only rank 0 samples:
// NCCL has no gather to one rank, and the all-gather costs the same
// bytes into rank 0. A step whose requests all sample greedily or by
// top-k could instead gather each rank's k best (value, id) pairs and
// pick among n·k candidates, as the full logits are needed only for
// logprobs, penalties, grammar masks and top-p/min-p.
func (o *Ops) gatherVocab(y tensor.T, m *vocabMatrix) tensor.T {
	n, t := o.comm.Size(), y.Rows()
	var all tensor.T // [n·T, rows]
	if y.OnDevice() {
		mk, ok := o.Ops.(interface{ NewTensor(shape ...int) tensor.T })
		if !ok {
			panic(&CollectiveError{fmt.Errorf("vocabulary-parallel logits: the %s ops cannot allocate device memory", o.Ops.Name())})
		}
		all = mk.NewTensor(n*t, m.rows)
	} else {
		all = tensor.New(n*t, m.rows)
	}
	if err := o.comm.AllGather(Of(all), Of(y)); err != nil {
		panic(&CollectiveError{err})
	}
	g := gcd(m.rows, m.vocab)
	units := make([]int32, 0, t*m.vocab/g) // [T, vocab/g] units of g columns
	for i := range t {
		for c := 0; c < m.vocab; c += g {
			r, l := c/m.rows, c%m.rows
			units = append(units, int32(((r*t+i)*m.rows+l)/g))
		}
	}
	view := all
	view.Shape = []int{n * t * m.rows / g, g}
	out := o.Ops.GatherRows(view, units)
	out.Shape = []int{t, m.vocab}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (o *Ops) LinearGroup(x tensor.T, ms ...device.Matrix) []tensor.T {
	if !anyRow(ms) {
		return o.Ops.LinearGroup(x, unwrapAll(ms)...)
	}
	out := make([]tensor.T, len(ms))
	for i, m := range ms {
		out[i] = o.Linear(x, m)
	}
	return out
}

func (o *Ops) NormLinearGroup(x tensor.T, w device.Vector, eps float64, ms ...device.Matrix) []tensor.T {
	if !anyRow(ms) {
		return o.Ops.NormLinearGroup(x, w, eps, unwrapAll(ms)...)
	}
	return o.LinearGroup(o.Ops.RMSNorm(x, w, eps), ms...)
}

func anyRow(ms []device.Matrix) bool {
	for _, m := range ms {
		if _, ok := m.(*rowMatrix); ok {
			return true
		}
		if _, ok := m.(*vocabMatrix); ok {
			return true
		}
	}
	return false
}

// LinearAdd of a row-parallel matrix: rank 0 adds its partial product to
// the residual dst (which every rank holds the same), the other ranks
// overwrite dst with theirs (device.OverwriteOps), and the all-reduce of
// dst is then the residual plus the whole product, with no add of its
// own. Devices without OverwriteOps all-reduce the product and add it.
func (o *Ops) LinearAdd(dst, x tensor.T, m device.Matrix) {
	if _, ok := m.(*rowMatrix); !ok {
		o.Ops.LinearAdd(dst, x, unwrap(m))
		return
	}
	ow, ok := o.Ops.(device.OverwriteOps)
	switch {
	case !ok:
		o.Ops.Add(dst, o.Linear(x, m))
		return
	case o.comm.Rank() == 0:
		o.Ops.LinearAdd(dst, x, unwrap(m))
	default:
		ow.LinearInto(dst, x, unwrap(m))
	}
	o.allReduce(dst)
}

// GatedMLPAdd with a row-parallel down projection: the device's fused
// MLP on every rank, adding to the residual on rank 0 and overwriting it
// on the others, then one all-reduce (as LinearAdd).
func (o *Ops) GatedMLPAdd(x tensor.T, w device.Vector, eps float64, gate, up, down device.Matrix) {
	if _, ok := down.(*rowMatrix); !ok {
		o.Ops.GatedMLPAdd(x, w, eps, unwrap(gate), unwrap(up), unwrap(down))
		return
	}
	ow, ok := o.Ops.(device.OverwriteOps)
	switch {
	case !ok:
		gu := o.Ops.NormLinearGroup(x, w, eps, unwrap(gate), unwrap(up))
		o.Ops.SiLUMul(gu[0], gu[1])
		o.Ops.Add(x, o.Linear(gu[0], down))
		return
	case o.comm.Rank() == 0:
		o.Ops.GatedMLPAdd(x, w, eps, unwrap(gate), unwrap(up), unwrap(down))
	default:
		ow.GatedMLPInto(x, w, eps, unwrap(gate), unwrap(up), unwrap(down))
	}
	o.allReduce(x)
}

func (o *Ops) LinearPerHead(x tensor.T, m device.Matrix, heads int) tensor.T {
	return o.Ops.LinearPerHead(x, unwrap(m), heads)
}

// Release hands tensors back early where the device recycles memory
// within a forward (CUDA's arena; the MoE and MLP blocks ask for it).
func (o *Ops) Release(ts ...tensor.T) {
	if r, ok := o.Ops.(interface{ Release(...tensor.T) }); ok {
		r.Release(ts...)
	}
}
