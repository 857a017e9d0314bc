package cuda

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// Mixtures of experts run grouped, routed on the device
// (device.RoutedExpertOps) when the step is small enough for the
// streaming kernels: the router (moe_route_f32), the sort of the step's
// (token, expert) pairs by expert (moe_sort), gate and up with x gathered
// and the activation applied (moe_gemv_glu), down (moe_gemv) and the
// weighted combine, five launches whose grids depend only on the step's
// shape and which read nothing back, so that a decode step is one CUDA
// graph. A step too large for them (prefill, large batches) is routed
// and sorted on the device too (moe_align: tiles of at most moeGemmRows
// rows of one expert), and each projection of every chosen expert is one
// launch over the tiles: moe_gemm's tensor-core tiles for 16-bit
// weights (gate, up and the activation in one; then down), moe_linear's
// float32 tiles otherwise; then the combine. Where RoutedExpertsAdd
// declines (compact experts, the environment switches below), the
// choice is read back (device.ExpertOps) and sorted on the host, and
// each projection of every chosen expert is one
// moe_linear launch over the sorted rows, the kernel finding each
// expert's matrix through an array of pointers: six launches (gather,
// gate, up, activation, down, combine) whatever the number of experts
// the step chose, instead of about six per expert. That path is the
// reference the device routing is tested against.

// groupedExpertRows is the most rows of one expert a host-routed grouped
// step takes: one moe_linear tile. Past it ExpertsAdd declines the step
// and the experts run one by one (each expert's product has enough rows
// for cuBLASLt's tensor-core GEMMs); routed on the device, such a step
// runs the grouped GEMMs (RoutedExpertsAdd).
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
	hostRouting                bool // GOSLING_MOE_HOST_ROUTING=1: RoutedExpertsAdd declines
	// prefillLoop (GOSLING_MOE_PREFILL_LOOP=1): RoutedExpertsAdd declines
	// the steps too large for the streaming kernels, which then run each
	// expert's own GEMMs after Route (the path before the grouped GEMMs).
	prefillLoop bool
	// quant: the experts are compact matrices (quant.go), gate and up of
	// dtype and down of downDType (a GGUF Q4_K_M layer may keep its down
	// projections in Q6_K), run by moe_qgemv in host-routed decode-sized
	// steps (RoutedExpertsAdd declines them).
	quant                         bool
	downDType                     DType
	gateScale, upScale, downScale DevicePtr // [n] scale-plane addresses (entries 0 for Q4_K, Q5_K)
}

func (g *expertGroup) Experts() int { return g.n }

var _ device.ExpertOps = (*ModelOps)(nil)

// ExpertGroup is device.ExpertOps: it groups float32, bf16 and f16
// matrices of one dtype, and compact ones (gate and up of one format, down
// of one), while FP8 ones run one by one. GOSLING_MOE_UNGROUPED=1
// leaves every group to run one by one, GOSLING_MOE_HOST_ROUTING=1
// routes every step on the host (Route, then ExpertsAdd), and
// GOSLING_MOE_PREFILL_LOOP=1 the steps past the streaming kernels (so
// their experts run one by one), to compare the paths.
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
	g := &expertGroup{o: o, n: n, hidden: first.in, inter: first.out, dtype: first.dtype, act: act,
		hostRouting: os.Getenv("GOSLING_MOE_HOST_ROUTING") == "1", prefillLoop: os.Getenv("GOSLING_MOE_PREFILL_LOOP") == "1",
		quant: first.quant != nil}
	g.downDType = g.dtype
	if d, ok := down[0].(*Matrix); ok && d != nil && g.quant {
		g.downDType = d.dtype
	}
	ptrs := make([][]DevicePtr, 9) // gate, up, down weights; their biases; their scale planes
	for i := range 9 {
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
			want := g.dtype
			if j == 2 {
				want = g.downDType
			}
			if cm.fp8 != nil || cm.dtype != want || (cm.quant != nil) != g.quant || (!g.quant && !gemvWeights(cm.dtype)) {
				return nil, nil
			}
			ptrs[j][e], ptrs[3+j][e] = cm.ptr, cm.bias
			if g.quant {
				ptrs[6+j][e] = cm.quant.scale
			}
			anyBias[j] = anyBias[j] || cm.bias != 0
		}
	}
	dst := []*DevicePtr{&g.gate, &g.up, &g.down, &g.gateBias, &g.upBias, &g.downBias, &g.gateScale, &g.upScale, &g.downScale}
	for i, p := range ptrs {
		if (i >= 3 && i < 6 && !anyBias[i-3]) || (i >= 6 && !g.quant) {
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
// expert has more than groupedExpertRows rows (GemvMaxRows for compact
// experts, whose larger steps widen each expert for the GEMM one by one).
func (o *ModelOps) ExpertsAdd(residual, x tensor.T, grp device.ExpertGroup, experts []int32, weights []float32) bool {
	const op = "ExpertsAdd"
	g := o.expertGroupOf(op, grp)
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
	maxRows := groupedExpertRows
	if g.quant {
		maxRows = GemvMaxRows
	}
	plan, ok, err := planExperts(experts, g.n, k, maxRows)
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
				_, _ = o.arena.release(DevicePtr(t.DevPtr()))
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
		if err := o.k.Embedding(o.stream, DevicePtr(xs.DevPtr()), DevicePtr(x.DevPtr()), dOrder, pairs, g.hidden, rows, F32, F32, 1); err != nil {
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
		if err := g.linear(0, gate, xs, dTiles, nTiles, plan.maxRows); err != nil {
			return err
		}
		if err := g.linear(1, up, xs, dTiles, nTiles, plan.maxRows); err != nil {
			return err
		}
		if err := g.activate(DevicePtr(gate.DevPtr()), DevicePtr(up.DevPtr()), pairs); err != nil {
			return err
		}
		y, err := newT(g.hidden)
		if err != nil {
			return err
		}
		if err := g.linear(2, y, gate, dTiles, nTiles, plan.maxRows); err != nil {
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
		return o.k.MoECombineF32(o.stream, DevicePtr(residual.DevPtr()), DevicePtr(y.DevPtr()), dPos, dW, rows, k, g.hidden)
	})
	return true
}

// expertGroupOf is grp as this ModelOps prepared it.
func (o *ModelOps) expertGroupOf(op string, grp device.ExpertGroup) *expertGroup {
	g, ok := grp.(*expertGroup)
	if !ok || g == nil || g.o != o {
		must(op, errors.New("an expert group this ModelOps did not prepare"))
	}
	return g
}

var _ device.RoutedExpertOps = (*ModelOps)(nil)

// routedRows is the most rows per expert, on average over the experts,
// of a step RoutedExpertsAdd runs through the streaming kernels for
// experts in dt: they read an expert's weights once per GemvMaxRows of its
// rows and multiply on the CUDA cores, re-reading x for every row, so
// past one row the tensor-core GEMMs of 16-bit experts are faster (at
// batch 64, 4 rows an expert, they took 37.5 ms a step of qwen3-30b-a3b
// on an H100 where the streaming kernels took 58); float32 experts, whose
// GEMMs run on the CUDA cores too, switch past a few tiles (prefill).
// GOSLING_MOE_GEMM_ROWS (1..) overrides it, to measure the crossing.
func routedRows(dt DType) int {
	if moeGemmRowsEnv > 0 {
		return moeGemmRowsEnv
	}
	if dt != F32 {
		return 1
	}
	return 2 * GemvMaxRows
}

// moeGemmRowsEnv is GOSLING_MOE_GEMM_ROWS, read once (0: unset).
var moeGemmRowsEnv = func() int {
	if v, err := strconv.Atoi(os.Getenv("GOSLING_MOE_GEMM_ROWS")); err == nil && v >= 1 {
		return v
	}
	return 0
}()

// moeSortThreads is moe_sort's block: the pairs it places at a time.
const moeSortThreads = 512

// moeAlignThreads is moe_align's block.
const moeAlignThreads = 1024

// RoutedExpertsAdd is device.RoutedExpertOps: Route's choice and
// ExpertsAdd's sum with no read-back, in launches whose grids depend only
// on the step's shape (T tokens, k choices, the group's experts), so a
// step can be captured in a graph and replayed whatever the router
// chooses. A step of at most routedRows rows per expert runs the
// streaming kernels (five launches), a larger one the grouped GEMMs
// (expertsGEMM). It declines compact experts (ExpertsAdd's moe_qgemv
// serves them after Route), a streaming step whose widths are no multiple
// of 8 (its loads), a GEMM step whose tile list is past the grid's
// bound, every step under GOSLING_MOE_HOST_ROUTING=1 and the GEMM steps
// under GOSLING_MOE_PREFILL_LOOP=1.
func (o *ModelOps) RoutedExpertsAdd(residual, x, logits tensor.T, r *device.Router, grp device.ExpertGroup) bool {
	const op = "RoutedExpertsAdd"
	g := o.expertGroupOf(op, grp)
	must(op, checkActivation("x", x))
	must(op, checkSameShape("residual", residual, "x", x))
	must(op, checkActivation("logits", logits))
	rows := x.Rows()
	switch {
	case x.Cols() != g.hidden:
		must(op, fmt.Errorf("x %v for experts of %d inputs", x.Shape, g.hidden))
	case logits.Rows() != rows || logits.Cols() != g.n:
		must(op, fmt.Errorf("logits %v for %d tokens and %d experts", logits.Shape, rows, g.n))
	}
	must(op, r.Check(g.n))
	p := routeParams(r, rows, g.n)
	must(op, p.check())
	k := r.TopK
	pairs, nTiles := rows*k, min(g.n, rows*k)
	sortSmem := 4 * (g.n + moeSortThreads)
	gemm := pairs > routedRows(g.dtype)*g.n
	var plan gemmPlan
	switch {
	case rows == 0:
		return true
	case g.hostRouting, g.quant:
		return false
	case gemm:
		var ok bool
		if plan, ok = o.planGEMM(g, pairs, DevicePtr(x.DevPtr())); !ok || g.prefillLoop {
			return false
		}
	case g.hidden%8 != 0, g.inter%8 != 0, nTiles > maxGridYZ, sortSmem > maxRouteSharedBytes:
		return false
	}
	o.do(op, func() error {
		var sc scratch
		defer sc.release(o)
		var err error
		if p.Experts, err = sc.alloc(o, 4*pairs); err != nil {
			return err
		}
		if p.Weights, err = sc.alloc(o, 4*pairs); err != nil {
			return err
		}
		p.Logits = DevicePtr(logits.DevPtr())
		if err := o.k.MoERoute(o.stream, p); err != nil {
			return err
		}
		if gemm {
			return o.expertsGEMM(&sc, g, plan, DevicePtr(residual.DevPtr()), DevicePtr(x.DevPtr()), p.Experts, p.Weights, rows, k)
		}
		b, err := sc.allocs(o, 4*pairs, 4*pairs, 4*3*nTiles)
		if err != nil {
			return err
		}
		order, pos, tiles := b[0], b[1], b[2]
		if err := o.k.launchMoESort(o.stream, LaunchConfig{Grid: D1(1), Block: D1(moeSortThreads), SharedMem: sortSmem},
			moESortArgs{Experts: p.Experts, Order: order, Pos: pos, Tiles: tiles, Pairs: pairs, NExperts: g.n, K: k, NTiles: nTiles}); err != nil {
			return err
		}
		h, err := sc.alloc(o, 4*pairs*g.inter)
		if err != nil {
			return err
		}
		if err := o.k.launchMoEGemvGLU(o.stream, LaunchConfig{Grid: Dim3{(g.inter + gemvWarps - 1) / gemvWarps, nTiles, 1}, Block: D1(32 * gemvWarps)}, g.dtype,
			moEGemvGLUArgs{H: h, X: DevicePtr(x.DevPtr()), Order: order, Wg: g.gate, Wu: g.up, Bg: g.gateBias, Bu: g.upBias, Tiles: tiles,
				In: g.hidden, Inter: g.inter, Act: g.actCode(), Alpha: g.act.Alpha, Limit: g.act.Limit}); err != nil {
			return err
		}
		y, err := sc.alloc(o, 4*pairs*g.hidden)
		if err != nil {
			return err
		}
		if err := o.k.launchMoEGemv(o.stream, moeGemvConfig(g.hidden, nTiles), g.dtype,
			moEGemvArgs{Y: y, X: h, W: g.down, Bias: g.downBias, Tiles: tiles, In: g.inter, Out: g.hidden}); err != nil {
			return err
		}
		return o.k.MoECombineF32(o.stream, DevicePtr(residual.DevPtr()), y, pos, p.Weights, rows, k, g.hidden)
	})
	return true
}

// scratch is arena buffers an op holds while it enqueues its launches,
// released together (newest first) when it is done: work on the one
// stream reads them before anything allocated later can write them.
type scratch struct{ held []DevicePtr }

func (s *scratch) alloc(o *ModelOps, n int) (DevicePtr, error) {
	b, err := o.arena.alloc(n)
	if err == nil {
		s.held = append(s.held, b.Ptr)
	}
	return b.Ptr, err
}

// allocs is alloc of each size in turn.
func (s *scratch) allocs(o *ModelOps, sizes ...int) ([]DevicePtr, error) {
	ps := make([]DevicePtr, len(sizes))
	for i, n := range sizes {
		var err error
		if ps[i], err = s.alloc(o, n); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

func (s *scratch) release(o *ModelOps) {
	for _, p := range slices.Backward(s.held) {
		_, _ = o.arena.release(p)
	}
	s.held = nil
}

// gemmPlan is how expertsGEMM runs a step: moe_gemm's tensor-core tiles
// (mma: 16-bit weights in whole 16-byte chunks, x 16-byte aligned, sm_80
// and newer) or
// moe_linear's float32 ones, tiles of at most tileRows rows of one
// expert, nTiles the list's bound for the step's shape.
type gemmPlan struct {
	mma              bool
	tileRows, nTiles int
}

// planGEMM is the plan of a step of pairs (token, expert) rows of x; ok
// is false when its tile list is past the grid's bound or moe_align's
// shared memory.
func (o *ModelOps) planGEMM(g *expertGroup, pairs int, x DevicePtr) (p gemmPlan, ok bool) {
	p.mma = g.dtype != F32 && g.hidden%8 == 0 && g.inter%8 == 0 && x%16 == 0 && o.dev.Info.Arch() >= 80
	p.tileRows = headLinearTile
	if p.mma {
		p.tileRows = moeGemmRows
	}
	// Σ_e ceil(rows_e / tileRows) over the experts with rows, at most
	// min(n, pairs) of them, is at most this whatever the routing.
	p.nTiles = (pairs + min(g.n, pairs)*(p.tileRows-1)) / p.tileRows
	return p, p.nTiles <= maxGridYZ && 12*g.n <= maxRouteSharedBytes
}

// expertsGEMM enqueues residual[t] += Σ_j weights[t·k+j]·expert_e(x[t]),
// e = experts[t·k+j], for rows tokens and device arrays experts and
// weights [rows·k]: the pairs sorted by expert into plan's tiles
// (moe_align), each projection of every expert one launch over the tiles,
// and the weighted combine. Nothing is read back, and every grid depends
// only on the step's shape.
func (o *ModelOps) expertsGEMM(sc *scratch, g *expertGroup, plan gemmPlan, residual, x, experts, weights DevicePtr, rows, k int) error {
	pairs := rows * k
	b, err := sc.allocs(o, 4*pairs, 4*pairs, 4*3*plan.nTiles, 4*pairs*g.inter, 4*pairs*g.hidden)
	if err != nil {
		return err
	}
	order, pos, tiles, h, y := b[0], b[1], b[2], b[3], b[4]
	if err := o.k.launchMoEAlign(o.stream, LaunchConfig{Grid: D1(1), Block: D1(moeAlignThreads), SharedMem: 12 * g.n},
		moEAlignArgs{Experts: experts, Order: order, Pos: pos, Tiles: tiles, Pairs: pairs, NExperts: g.n, K: k,
			NTiles: plan.nTiles, TileRows: plan.tileRows}); err != nil {
		return err
	}
	if plan.mma {
		gemm := func(out, in DevicePtr, order DevicePtr, w, w2, b, b2 DevicePtr, nIn, nOut int) error {
			return o.k.launchMoEGemm(o.stream, LaunchConfig{Grid: Dim3{(nOut + moeGemmCols - 1) / moeGemmCols, plan.nTiles, 1}, Block: D1(moeGemmThreads)},
				g.dtype, moEGemmArgs{Y: out, X: in, Order: order, W: w, W2: w2, Bias: b, Bias2: b2, Tiles: tiles, In: nIn, Out: nOut,
					Act: g.actCode(), Alpha: g.act.Alpha, Limit: g.act.Limit})
		}
		if err := gemm(h, x, order, g.gate, g.up, g.gateBias, g.upBias, g.hidden, g.inter); err != nil {
			return err
		}
		if err := gemm(y, h, 0, g.down, 0, g.downBias, 0, g.inter, g.hidden); err != nil {
			return err
		}
	} else {
		// x gathered into sorted rows, then moe_linear's tiles for gate,
		// up and down with the activation between: six launches.
		b, err := sc.allocs(o, 4*pairs*g.hidden, 4*pairs*g.inter)
		if err != nil {
			return err
		}
		xs, up := b[0], b[1]
		if err := o.k.Embedding(o.stream, xs, x, order, pairs, g.hidden, rows, F32, F32, 1); err != nil {
			return err
		}
		linear := func(out, in, w, b DevicePtr, nIn, nOut int) error {
			return o.k.launchMoELinear(o.stream, LaunchConfig{Grid: Dim3{(nOut + headLinearTile - 1) / headLinearTile, plan.nTiles, 1}, Block: Dim3{headLinearTile, 8, 1}},
				g.dtype, moELinearArgs{Y: out, X: in, W: w, Bias: b, Tiles: tiles, In: nIn, Out: nOut})
		}
		if err := linear(h, xs, g.gate, g.gateBias, g.hidden, g.inter); err != nil {
			return err
		}
		if err := linear(up, xs, g.up, g.upBias, g.hidden, g.inter); err != nil {
			return err
		}
		if err := g.activate(h, up, pairs); err != nil {
			return err
		}
		if err := linear(y, h, g.down, g.downBias, g.inter, g.hidden); err != nil {
			return err
		}
	}
	return o.k.MoECombineF32(o.stream, residual, y, pos, weights, rows, k, g.hidden)
}

// actCode is the group's activation as the kernels name it (MOE_ACT_*).
func (g *expertGroup) actCode() int {
	if g.act.Clamped {
		return moeActClamped
	}
	return moeActSiLU
}

// activate sets gate = act(gate, up) over [pairs, inter] float32, in place.
func (g *expertGroup) activate(gate, up DevicePtr, pairs int) error {
	if g.act.Clamped {
		return g.o.k.launchClampedSwiGLU(g.o.stream, flatConfig(pairs*g.inter), clampedSwiGLUArgs{
			Gate: gate, Up: up, N: pairs * g.inter, Alpha: g.act.Alpha, Limit: g.act.Limit})
	}
	return g.o.k.GatedAct(g.o.stream, SiLU, gate, gate, up, pairs, g.inter, 0, F32)
}

// SigmoidGatedAdd is device.RoutedExpertOps: dst[t] += sigmoid(logit[t])·src[t].
func (o *ModelOps) SigmoidGatedAdd(dst, src, logit tensor.T) {
	const op = "SigmoidGatedAdd"
	must(op, checkSameShape("dst", dst, "src", src))
	must(op, checkActivation("logit", logit))
	if logit.Rows() != dst.Rows() || logit.Cols() != 1 {
		must(op, fmt.Errorf("logit %v for %d rows", logit.Shape, dst.Rows()))
	}
	if dst.Rows() == 0 || dst.Cols() == 0 {
		return
	}
	o.do(op, func() error {
		return o.k.launchSigmoidGateAddF32(o.stream, LaunchConfig{Grid: D1(dst.Rows()), Block: D1(rowThreads(dst.Cols()))},
			sigmoidGateAddF32Args{Dst: DevicePtr(dst.DevPtr()), Src: DevicePtr(src.DevPtr()), Gate: DevicePtr(logit.DevPtr()), Width: dst.Cols()})
	})
}

// linear enqueues projection j (gate, up, down) of the tiles' experts:
// y = x·W_eᵀ + b_e.
func (g *expertGroup) linear(j int, y, x tensor.T, tiles DevicePtr, nTiles, maxRows int) error {
	w := [3]DevicePtr{g.gate, g.up, g.down}[j]
	bias := [3]DevicePtr{g.gateBias, g.upBias, g.downBias}[j]
	in, out := g.hidden, g.inter
	if j == 2 {
		in, out = g.inter, g.hidden
	}
	if !g.quant {
		return g.o.k.MoELinear(g.o.stream, y, x, w, bias, tiles, nTiles, maxRows, in, out, g.dtype)
	}
	dt, sc := g.dtype, [3]DevicePtr{g.gateScale, g.upScale, g.downScale}[j]
	if j == 2 {
		dt = g.downDType
	}
	return g.o.k.MoEQGemv(g.o.stream, y, x, w, sc, bias, tiles, nTiles, maxRows, in, out, dt)
}

// MoEQGemv is MoELinear over compact experts of format dt (moe_qgemv_<q>,
// a warp an output) for tiles of 1 to GemvMaxRows rows (maxRows the
// most); w and sc are the experts' body and scale-plane addresses.
func (k *Kernels) MoEQGemv(s Stream, y, x tensor.T, w, sc, bias, tiles DevicePtr, nTiles, maxRows, in, out int, dt DType) error {
	if nTiles == 0 || out == 0 {
		return nil
	}
	if _, err := planQuant(dt, out, in); err != nil {
		return fmt.Errorf("moe_qgemv: %w", err)
	}
	if maxRows > GemvMaxRows || uintptr(x.DevPtr())%16 != 0 {
		return fmt.Errorf("moe_qgemv: tiles of %d rows (at most %d), x at %#x (16-byte aligned)", maxRows, GemvMaxRows, x.DevPtr())
	}
	return k.launchMoEQGemv(s, LaunchConfig{Grid: Dim3{(out + gemvWarps - 1) / gemvWarps, nTiles, 1}, Block: D1(32 * gemvWarps)}, quantName(dt),
		moEQGemvArgs{Y: DevicePtr(y.DevPtr()), X: DevicePtr(x.DevPtr()), W: w, S: sc, Bias: bias, Tiles: tiles, In: in, Out: out})
}

// MoELinear is y = x·W_eᵀ + b_e over each tile's rows: moe_gemv_{w}, a
// warp per moeGemvOuts outputs streaming the weights, for tiles of at most GemvMaxRows
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
		return k.launchMoEGemv(s, moeGemvConfig(out, nTiles), wdt,
			moEGemvArgs{Y: DevicePtr(y.DevPtr()), X: DevicePtr(x.DevPtr()), W: w, Bias: bias, Tiles: tiles, In: in, Out: out})
	}
	grid := Dim3{(out + headLinearTile - 1) / headLinearTile, nTiles, 1}
	return k.launchMoELinear(s, LaunchConfig{Grid: grid, Block: Dim3{headLinearTile, 8, 1}}, wdt,
		moELinearArgs{Y: DevicePtr(y.DevPtr()), X: DevicePtr(x.DevPtr()), W: w, Bias: bias, Tiles: tiles, In: in, Out: out})
}

// moeGemvOuts is the outputs one warp of moe_gemv takes (MOE_GEMV_OUTS
// in kernels/gemv.cu).
const moeGemvOuts = 2

// moeGemvConfig is moe_gemv's launch for out outputs and nTiles tiles.
func moeGemvConfig(out, nTiles int) LaunchConfig {
	per := gemvWarps * moeGemvOuts
	return LaunchConfig{Grid: Dim3{(out + per - 1) / per, nTiles, 1}, Block: D1(32 * gemvWarps)}
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
