package cuda

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// Mixtures of experts run grouped (device.ExpertOps): the step's
// (token, expert) pairs are sorted by expert on the host, which already
// holds the routing, and each projection of every chosen expert is one
// moe_linear launch over the sorted rows, the kernel finding each
// expert's matrix through an array of pointers. A MoE layer is then six
// launches (gather, gate, up, activation, down, combine) whatever the
// number of experts the step chose, instead of about six per expert.

// groupedExpertRows is the most rows of one expert a grouped step takes:
// one moe_linear tile. Past it (prefill, large batches) each expert's
// product has enough rows for cuBLASLt's tensor-core GEMMs, and the
// experts run one by one (ExpertsAdd declines the step).
const groupedExpertRows = headLinearTile

// expertGroup is a MoE layer's routed experts on the device: arrays of
// their matrices' (and biases') addresses, indexed by expert.
type expertGroup struct {
	o                          *ModelOps
	n, hidden, inter           int
	dtype                      DType
	gate, up, down             DevicePtr // [n] weight addresses
	gateBias, upBias, downBias DevicePtr // [n] bias addresses (0: none); 0 when no expert has one
	act                        device.ExpertActivation
}

func (g *expertGroup) Experts() int { return g.n }

var _ device.ExpertOps = (*ModelOps)(nil)

// ExpertGroup is device.ExpertOps: it groups float32, bf16 and f16
// matrices of one dtype (FP8 ones run one by one). GOSLING_MOE_UNGROUPED=1
// leaves every group to run one by one, to compare the two paths.
func (o *ModelOps) ExpertGroup(gate, up, down []device.Matrix, act device.ExpertActivation) (device.ExpertGroup, error) {
	n := len(gate)
	if n == 0 || len(up) != n || len(down) != n {
		return nil, fmt.Errorf("cuda: %d gate, %d up and %d down matrices for an expert group", len(gate), len(up), len(down))
	}
	if os.Getenv("GOSLING_MOE_UNGROUPED") == "1" {
		return nil, nil
	}
	first, ok := gate[0].(*Matrix)
	if !ok || first == nil {
		return nil, fmt.Errorf("cuda: expert matrix %T was not prepared by a cuda.ModelOps", gate[0])
	}
	g := &expertGroup{o: o, n: n, hidden: first.in, inter: first.out, dtype: first.dtype, act: act}
	ptrs := make([][]DevicePtr, 6) // gate, up, down weights; then their biases
	for i := range 6 {
		ptrs[i] = make([]DevicePtr, n)
	}
	anyBias := [3]bool{}
	for e := range n {
		for j, m := range []device.Matrix{gate[e], up[e], down[e]} {
			cm, ok := m.(*Matrix)
			if !ok || cm == nil {
				return nil, fmt.Errorf("cuda: expert matrix %T was not prepared by a cuda.ModelOps", m)
			}
			out, in := g.inter, g.hidden
			if j == 2 {
				out, in = g.hidden, g.inter
			}
			if cm.out != out || cm.in != in {
				return nil, fmt.Errorf("cuda: expert %d's matrix %d is [%d, %d], want [%d, %d]", e, j, cm.out, cm.in, out, in)
			}
			if cm.fp8 != nil || cm.dtype != g.dtype || !gemvWeights(cm.dtype) {
				return nil, nil
			}
			ptrs[j][e], ptrs[3+j][e] = cm.ptr, cm.bias
			anyBias[j] = anyBias[j] || cm.bias != 0
		}
	}
	dst := []*DevicePtr{&g.gate, &g.up, &g.down, &g.gateBias, &g.upBias, &g.downBias}
	for i, p := range ptrs {
		if i >= 3 && !anyBias[i-3] {
			continue
		}
		d, err := o.ownedAlloc(8 * n)
		if err == nil {
			if err = CopyHtoD(o.dev, d, p); err != nil {
				o.ownedFree(d)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("cuda: upload an expert group's addresses: %w", err)
		}
		*dst[i] = d
	}
	return g, nil
}

// expertPlan is a step's (token, expert) pairs sorted by expert.
type expertPlan struct {
	order   []int32 // [T·k] the token of each sorted row
	pos     []int32 // [T·k] the sorted row of pair t·k+j
	tiles   []int32 // [tiles][3] expert, first sorted row, rows
	maxRows int     // the most rows of one expert
}

// planExperts sorts the pairs by expert, tokens in order within each;
// ok is false when an expert has more than maxRows of them.
func planExperts(experts []int32, nExperts, k, maxRows int) (p expertPlan, ok bool, err error) {
	counts := make([]int32, nExperts+1)
	for i, e := range experts {
		if e < 0 || int(e) >= nExperts {
			return p, false, fmt.Errorf("pair %d chose expert %d of %d", i, e, nExperts)
		}
		counts[e+1]++
	}
	if p.maxRows = int(slices.Max(counts)); p.maxRows > maxRows {
		return p, false, nil
	}
	for e := range nExperts {
		if c := counts[e+1]; c > 0 {
			p.tiles = append(p.tiles, int32(e), counts[e], c)
		}
		counts[e+1] += counts[e] // now counts[e] is where expert e's rows start
	}
	p.order, p.pos = make([]int32, len(experts)), make([]int32, len(experts))
	for i, e := range experts {
		r := counts[e]
		counts[e]++
		p.order[r], p.pos[i] = int32(i/k), r
	}
	return p, true, nil
}

// ExpertsAdd is device.ExpertOps. It declines (false) a step in which an
// expert has more than groupedExpertRows rows.
func (o *ModelOps) ExpertsAdd(residual, x tensor.T, grp device.ExpertGroup, experts []int32, weights []float32) bool {
	const op = "ExpertsAdd"
	g, ok := grp.(*expertGroup)
	if !ok || g == nil || g.o != o {
		must(op, errors.New("an expert group this ModelOps did not prepare"))
	}
	must(op, checkActivation("x", x))
	must(op, checkSameShape("residual", residual, "x", x))
	rows := x.Rows()
	switch {
	case x.Cols() != g.hidden:
		must(op, fmt.Errorf("x %v for experts of %d inputs", x.Shape, g.hidden))
	case rows == 0:
		return true
	case len(experts) == 0 || len(experts)%rows != 0 || len(weights) != len(experts):
		must(op, fmt.Errorf("%d experts and %d weights for %d tokens", len(experts), len(weights), rows))
	}
	k := len(experts) / rows
	plan, ok, err := planExperts(experts, g.n, k, groupedExpertRows)
	must(op, err)
	if !ok {
		return false
	}
	nTiles, pairs := len(plan.tiles)/3, len(experts)
	if nTiles > maxGridYZ {
		return false
	}
	o.do(op, func() error {
		var held []tensor.T
		defer func() {
			for _, t := range held {
				_, _ = o.arena.release(DevicePtr(t.Dev))
			}
		}()
		newT := func(cols int) (tensor.T, error) {
			t, err := o.newTensor([]int{pairs, cols})
			if err == nil {
				held = append(held, t)
			}
			return t, err
		}
		xs, err := newT(g.hidden)
		if err != nil {
			return err
		}
		dOrder, err := o.uploadIndex(plan.order)
		if err != nil {
			return err
		}
		if err := o.k.Embedding(o.stream, DevicePtr(xs.Dev), DevicePtr(x.Dev), dOrder, pairs, g.hidden, rows, F32, F32, 1); err != nil {
			return err
		}
		dTiles, err := o.uploadIndex(plan.tiles)
		if err != nil {
			return err
		}
		gate, err := newT(g.inter)
		if err != nil {
			return err
		}
		up, err := newT(g.inter)
		if err != nil {
			return err
		}
		if err := o.k.MoELinear(o.stream, gate, xs, g.gate, g.gateBias, dTiles, nTiles, plan.maxRows, g.hidden, g.inter, g.dtype); err != nil {
			return err
		}
		if err := o.k.MoELinear(o.stream, up, xs, g.up, g.upBias, dTiles, nTiles, plan.maxRows, g.hidden, g.inter, g.dtype); err != nil {
			return err
		}
		if g.act.Clamped {
			err = o.k.launchClampedSwiGLU(o.stream, flatConfig(pairs*g.inter), clampedSwiGLUArgs{
				Gate: DevicePtr(gate.Dev), Up: DevicePtr(up.Dev), N: pairs * g.inter, Alpha: g.act.Alpha, Limit: g.act.Limit})
		} else {
			err = o.k.GatedAct(o.stream, SiLU, DevicePtr(gate.Dev), DevicePtr(gate.Dev), DevicePtr(up.Dev), pairs, g.inter, 0, F32)
		}
		if err != nil {
			return err
		}
		y, err := newT(g.hidden)
		if err != nil {
			return err
		}
		if err := o.k.MoELinear(o.stream, y, gate, g.down, g.downBias, dTiles, nTiles, plan.maxRows, g.inter, g.hidden, g.dtype); err != nil {
			return err
		}
		dPos, err := o.uploadIndex(plan.pos)
		if err != nil {
			return err
		}
		dW, err := o.uploadFloats(weights)
		if err != nil {
			return err
		}
		return o.k.MoECombineF32(o.stream, DevicePtr(residual.Dev), DevicePtr(y.Dev), dPos, dW, rows, k, g.hidden)
	})
	return true
}

// MoELinear is y = x·W_eᵀ + b_e over each tile's rows: moe_gemv_{w}, a
// warp per output streaming the weights, for tiles of at most GemvMaxRows
// rows (maxRows) and whole 16-byte groups of in; moe_linear_{w}'s 32×32
// tiles otherwise.
//
//	x: [rows, in] float32   w, bias: [n_experts] addresses (bias 0: none)
//	tiles: [nTiles][3] int32 (expert, first row, rows ≤ 32)   y: [rows, out] float32
func (k *Kernels) MoELinear(s Stream, y, x tensor.T, w, bias, tiles DevicePtr, nTiles, maxRows, in, out int, wdt DType) error {
	if nTiles == 0 || out == 0 {
		return nil
	}
	if !gemvWeights(wdt) {
		return fmt.Errorf("moe_linear: weights in %v (float32, bfloat16 or float16)", wdt)
	}
	if maxRows <= GemvMaxRows && in%8 == 0 {
		return k.launchMoEGemv(s, LaunchConfig{Grid: Dim3{(out + gemvWarps - 1) / gemvWarps, nTiles, 1}, Block: D1(32 * gemvWarps)}, wdt,
			moEGemvArgs{Y: DevicePtr(y.Dev), X: DevicePtr(x.Dev), W: w, Bias: bias, Tiles: tiles, In: in, Out: out})
	}
	grid := Dim3{(out + headLinearTile - 1) / headLinearTile, nTiles, 1}
	return k.launchMoELinear(s, LaunchConfig{Grid: grid, Block: Dim3{headLinearTile, 8, 1}}, wdt,
		moELinearArgs{Y: DevicePtr(y.Dev), X: DevicePtr(x.Dev), W: w, Bias: bias, Tiles: tiles, In: in, Out: out})
}

// MoECombineF32 sets dst[t] += Σ_j weights[t·k+j]·src[pos[t·k+j]].
//
//	dst: [tokens, width]   src: [tokens·k, width]   pos, weights: [tokens·k]
func (k *Kernels) MoECombineF32(s Stream, dst, src, pos, weights DevicePtr, tokens, topK, width int) error {
	if tokens == 0 || width == 0 {
		return nil
	}
	return k.launchMoECombineF32(s, LaunchConfig{Grid: D1(tokens), Block: D1(rowThreads(width))},
		moECombineF32Args{Dst: dst, Src: src, Pos: pos, Weights: weights, K: topK, Width: width})
}
