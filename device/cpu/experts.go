package cpu

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/internal/hugemem"
	"github.com/gosling-ai/gosling/tensor"
)

// Grouped experts (device.ExpertOps), as fused-MoE kernels run them on a
// CPU: a step's (token, expert) pairs are sorted by expert once, the
// chosen rows of x gathered in that order, and then two parallel passes
// over the pool:
//
//   - gate and up: a task is a run of one expert's row tiles against a
//     run of its gate's panels and the same panels of its up, the
//     activation applied to that block as soon as both are done, so the
//     block is still in cache (gemm.act);
//   - down and the combine: a task is a run of panels (hidden columns) of
//     every chosen expert's down over that expert's rows, then the
//     weighted sum of each token's rows into those columns of the
//     residual. A task owns its columns of every token, so the combine
//     needs no second pass and no atomics.
//
// Each is the matrix product of gemm.go over packed weights of any kind
// the CPU serves, with tiles cut per expert (gemm.seg), so the kernels
// and their numbers are those of one expert's Linear. Against running
// the experts one by one this saves the pool jobs, the activation pass
// and the scatter of each expert (a decode step of a Qwen3-30B-A3B
// layer, 8 experts of one token, runs 3 jobs instead of 16), packs the
// activations once per projection, and the per-expert products of a
// few rows that leave one of two cores idle become tasks of one queue.

// expertGroup is a MoE layer's routed experts as Ops.ExpertGroup took
// them.
type expertGroup struct {
	gate, up, down []*matrix
	hidden, inter  int
	act            device.ExpertActivation
}

func (g *expertGroup) Experts() int { return len(g.gate) }

var _ device.ExpertOps = (*Ops)(nil)

// ExpertGroup is device.ExpertOps: it groups the matrices Ops.Matrix
// made, of any dtype, whose gate and up share a dtype per expert (their
// panels are cut into the same tiles); FP8 matrices (their reference
// path, fp8.go) run one by one. GOSLING_MOE_UNGROUPED=1 leaves every
// group to run one by one, to compare the paths.
func (o *Ops) ExpertGroup(gate, up, down []device.Matrix, act device.ExpertActivation) (device.ExpertGroup, error) {
	n := len(gate)
	if n == 0 || len(up) != n || len(down) != n {
		return nil, fmt.Errorf("cpu: %d gate, %d up and %d down matrices for an expert group", len(gate), len(up), len(down))
	}
	if os.Getenv("GOSLING_MOE_UNGROUPED") == "1" {
		return nil, nil
	}
	g := &expertGroup{act: act, gate: make([]*matrix, n), up: make([]*matrix, n), down: make([]*matrix, n)}
	for e := range n {
		for j, m := range []device.Matrix{gate[e], up[e], down[e]} {
			cm, ok := m.(*matrix)
			if !ok || cm == nil {
				return nil, fmt.Errorf("cpu: expert matrix %T was not made by a cpu.Ops", m)
			}
			if e == 0 && j == 0 {
				g.hidden, g.inter = cm.In(), cm.Out()
			}
			out, in := g.inter, g.hidden
			if j == 2 {
				out, in = g.hidden, g.inter
			}
			if cm.Out() != out || cm.In() != in {
				return nil, fmt.Errorf("cpu: expert %d's matrix %s is [%d, %d], want [%d, %d]", e, cm.w.Name, cm.Out(), cm.In(), out, in)
			}
			if cm.fp8 != nil {
				return nil, nil
			}
			[...][]*matrix{g.gate, g.up, g.down}[j][e] = cm
		}
		if g.gate[e].w.DType != g.up[e].w.DType {
			return nil, nil
		}
	}
	return g, nil
}

// expertPairs is a step's (token, expert) pairs sorted by expert, tokens
// in order within each.
type expertPairs struct {
	active []int   // the experts chosen, ascending
	bounds []int   // [len(active)+1] the first sorted row of each, then the rows
	order  []int32 // [T·k] the token of each sorted row
	// rows and weights are each token's k sorted rows, ascending (so
	// its experts ascending, the order one-by-one adds them in), and
	// their router weights: [T·k].
	rows    []int32
	weights []float32
}

// sortPairs sorts Route's choices (token-major, k per token) by expert.
func sortPairs(experts []int32, weights []float32, nExperts, k int) expertPairs {
	start := make([]int, nExperts+1)
	for i, e := range experts {
		if e < 0 || int(e) >= nExperts {
			panic(fmt.Sprintf("cpu.ExpertsAdd: pair %d chose expert %d of %d", i, e, nExperts))
		}
		start[e+1]++
	}
	p := expertPairs{order: make([]int32, len(experts)), rows: make([]int32, len(experts)), weights: make([]float32, len(experts))}
	for e := range nExperts {
		if start[e+1] > 0 {
			p.active = append(p.active, e)
			p.bounds = append(p.bounds, start[e])
		}
		start[e+1] += start[e]
	}
	p.bounds = append(p.bounds, len(experts))
	for i, e := range experts {
		r := start[e]
		start[e]++
		p.order[r] = int32(i / k)
		// Insert the pair among its token's earlier ones by row.
		j := i
		for j > i/k*k && p.rows[j-1] > int32(r) {
			p.rows[j], p.weights[j] = p.rows[j-1], p.weights[j-1]
			j--
		}
		p.rows[j], p.weights[j] = int32(r), weights[i]
	}
	return p
}

// ExpertsAdd is device.ExpertOps (see the top of this file). It runs
// every step grouped.
func (o *Ops) ExpertsAdd(residual, x tensor.T, grp device.ExpertGroup, experts []int32, weights []float32) bool {
	g, ok := grp.(*expertGroup)
	if !ok || g == nil {
		panic(fmt.Sprintf("cpu.ExpertsAdd: an expert group %T this package did not make", grp))
	}
	rows := x.Rows()
	switch {
	case x.Cols() != g.hidden || residual.Rows() != rows || residual.Cols() != g.hidden:
		panic(fmt.Sprintf("cpu.ExpertsAdd: x %v and residual %v for experts of %d inputs", x.Shape, residual.Shape, g.hidden))
	case rows == 0:
		return true
	case len(experts) == 0 || len(experts)%rows != 0 || len(weights) != len(experts):
		panic(fmt.Sprintf("cpu.ExpertsAdd: %d experts and %d weights for %d tokens", len(experts), len(weights), rows))
	}
	k := len(experts) / rows
	p := sortPairs(experts, weights, len(g.gate), k)
	pairs := len(experts)
	buf := o.expertScratch(pairs * (g.hidden + 2*g.inter))
	xs := tensor.From(buf[:pairs*g.hidden], pairs, g.hidden)
	gate := tensor.From(buf[pairs*g.hidden:][:pairs*g.inter], pairs, g.inter)
	up := tensor.From(buf[pairs*(g.hidden+g.inter):][:pairs*g.inter], pairs, g.inter)
	y := xs // down's output takes the gathered rows' place, dead by then

	o.Workers.For(pairs, max(1, (64<<10)/g.hidden), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			copy(xs.Row(r), x.Row(int(p.order[r])))
		}
	})
	ls := make([]*Linear, 0, 2*len(p.active))
	outs := make([]tensor.T, 0, 2*len(p.active))
	seg := make([]int, 0, 2*len(p.active))
	downs := make([]*Linear, len(p.active))
	for s, e := range p.active {
		ls = append(ls, g.gate[e].linear(), g.up[e].linear())
		outs = append(outs, gate, up)
		seg = append(seg, s, s)
		downs[s] = g.down[e].linear()
	}

	w := o.Workers
	owned := w.tryAcquire()
	if owned {
		defer w.release()
	}
	gu := &gemm{ks: kernels(), x: xs, k: g.hidden, ls: ls, outs: outs, seg: seg, act: &g.act}
	gu.layout(p.bounds)
	gu.pack(w, owned)
	gu.plan(gu.workers(w, owned))
	gu.run(w)

	dseg := make([]int, len(downs))
	douts := make([]tensor.T, len(downs))
	for s := range downs {
		dseg[s], douts[s] = s, y
	}
	dn := &gemm{ks: kernels(), x: gate, k: g.inter, ls: downs, outs: douts, seg: dseg}
	dn.layout(p.bounds)
	dn.pack(w, owned)
	panels := downs[0].packed.panels
	tasks := 1
	if workers := dn.workers(w, owned); workers > 1 {
		// Tasks of at least minDownMACs, about eight per worker (as
		// plan's), of whole panels.
		const minDownMACs = 1 << 16
		macs := int64(pairs) * int64(g.hidden) * int64(g.inter)
		tasks = int(min(int64(panels), int64(8*workers), max(1, macs/minDownMACs)))
	}
	step := (panels + tasks - 1) / tasks
	tasks = (panels + step - 1) / step
	task := func(s *workerScratch, i int) {
		p0, p1 := i*step, min(panels, (i+1)*step)
		for e := range downs {
			dn.execPanels(s, gemmTask{lin: e, p0: p0, p1: p1, t0: 0, t1: len(dn.tilesFor(e))})
		}
		c0, c1 := p0*panelWidth, min(p1*panelWidth, g.hidden)
		for t := range rows {
			dst := residual.Row(t)[c0:c1]
			for j := t * k; j < (t+1)*k; j++ {
				Axpy(dst, p.weights[j], y.Row(int(p.rows[j]))[c0:c1])
			}
		}
	}
	if tasks == 1 {
		var s workerScratch
		task(&s, 0)
		return true
	}
	w.run(tasks, func(worker, i int) { task(&w.scratch[worker], i) })
	return true
}

// activate applies the experts' activation to the block of a gate/up
// task's outputs: its tiles' rows, its panels' columns (gemm.act).
func (g *gemm) activate(t gemmTask) {
	tl := g.tilesFor(t.lin)[t.t0:t.t1]
	gate, up := g.outs[t.lin], g.outs[t.lin+1]
	n := gate.Cols()
	c0, c1 := t.p0*panelWidth, min(t.p1*panelWidth, n)
	last := tl[len(tl)-1]
	for r := tl[0].t0; r < last.t0+last.mr; r++ {
		gr, ur := gate.HostData()[r*n+c0:r*n+c1], up.HostData()[r*n+c0:r*n+c1]
		if g.act.Clamped {
			ClampedSwiGLU(gr, ur, g.act.Alpha, g.act.Limit)
		} else {
			siluMul(gr, ur)
		}
	}
}

// expertScratch is n floats for a grouped step's gathered rows and
// products, reused by every layer and step: they are dead when
// ExpertsAdd returns.
func (o *Ops) expertScratch(n int) []float32 {
	if len(o.experts) < n {
		o.experts = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(hugemem.Aligned(4*n)))), n)
	}
	return o.experts[:n]
}
