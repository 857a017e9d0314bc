package cpu

import (
	"unsafe"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/internal/hugemem"
	"github.com/gosling-ai/gosling/tensor"
)

// The matrix product out = x · Wᵀ over packed weights (pack.go).
//
//	x: [m, k] float32, W: [n, k] packed in panels of 32 rows → out: [m, n]
//
// Tiling. The m tokens are cut into tiles of at most mrMax (12 with
// AVX-512) and packed once per call, shared by every linear that reads the
// same input (q, k, v; gate, up). A micro-kernel computes one tile against
// one panel with the whole tile × 32 block in registers, so each weight
// loaded from memory is used mr times. A task is a run of panels times a
// run of tiles; tasks are claimed dynamically by the workers.
//
//   - Decode (m ≤ mrMax): one tile; the weights stream once from memory,
//     split over the workers by panel runs (weight rows), so all cores
//     read memory together. Batched decode reads each weight once for the
//     whole batch.
//   - Prefill (many tiles): a task is a panel against all tiles, block of
//     k by block of k (kBlock): the block of the panel stays in L1 while
//     every tile's activations stream from L2/L3, and each weight still
//     comes from memory once. Packing (the x tiles here; the panels at
//     load) is what makes both operands contiguous streams; with few
//     panels the tiles are split over tasks too.

type workerScratch struct {
	tile []float32 // the micro-kernels' outputs: [tiles of a task][mr][32]
	wide []float32 // an I4 panel block widened to an F32 one (i4.go)
}

type tile struct {
	t0, mr int
	off    int // offset of its packed activations (floats, or bytes for Q8)
}

// tiles cuts m tokens into ceil(m/mrMax) tiles of nearly equal height,
// each size(mr) bytes (or floats) after the last.
func tiles(m, mrMax int, size func(mr int) int) []tile {
	out, _ := segmentTiles([]int{0, m}, mrMax, size)
	return out
}

// segmentTiles cuts the rows of each segment [bounds[s], bounds[s+1])
// as tiles does; starts[s] is the first tile of segment s (len(bounds)
// entries, the last len(out)).
func segmentTiles(bounds []int, mrMax int, size func(mr int) int) (out []tile, starts []int) {
	off := 0
	starts = make([]int, len(bounds))
	for s := range len(bounds) - 1 {
		starts[s] = len(out)
		t0, m := bounds[s], bounds[s+1]-bounds[s]
		n := (m + mrMax - 1) / mrMax
		for i := range n {
			mr := m / n
			if i < m%n {
				mr++
			}
			out = append(out, tile{t0: t0, mr: mr, off: off})
			t0 += mr
			off += size(mr)
		}
	}
	starts[len(bounds)-1] = len(out)
	return out, starts
}

type gemmTask struct {
	lin    int
	p0, p1 int // panels
	t0, t1 int // tiles
}

type gemm struct {
	ks    *kernelSet
	pool  *Workers // running the tasks (nil: serially)
	x     tensor.T
	k     int
	ls    []*Linear
	outs  []tensor.T
	float []tile // tiles of the float pack (nil when no linear needs it)
	q8    []tile
	qk    [2][]tile // per super-block size, qkSupers' order
	aF32  []float32
	aQ8   []byte
	aQK   [2][]byte
	tasks []gemmTask

	// Row segments (grouped experts, experts.go): linear i multiplies
	// only the rows of segment seg[i] (nil: every linear is segment 0,
	// all of x's rows). segTiles[set][s] is the first tile of segment s
	// in tile set set (float, q8, qk[0], qk[1]); no tile straddles two.
	seg      []int
	segTiles [4][]int
	// act, when set, pairs the linears: 2i is an expert's gate, 2i+1
	// its up over the same rows, and a task of the gate computes the
	// up's same panels too, then applies act to that block of outputs
	// (in gate's).
	act *device.ExpertActivation
	// parallel: the tasks run on the pool (plan's workers > 1).
	parallel bool

	// decodeQK's shares: units panels in all, cut into shares tasks;
	// shareFn is g.share, kept so that a reused gemm makes it once.
	units, shares int
	shareFn       func(worker, task int)
}

// qkSupers are the super-block sizes of the QK formats (qk.go), each
// with its own activation tiles.
var qkSupers = [2]int{32, 256}

func superIndex(super int) int {
	if super == qkSupers[0] {
		return 0
	}
	return 1
}

// ForwardGroup computes every linear layer of ls on the same input x,
// packing x once and running all of them as one parallel job:
//
//	x: [T, In] → outs[i]: [T, ls[i].Out()]
//
// All layers must have the same input width.
func ForwardGroup(w *Workers, x tensor.T, ls ...*Linear) []tensor.T {
	return forwardGroup(w, x, nil, ls)
}

// forwardGroup is ForwardGroup, writing into tensors of the arena a (nil:
// tensor.New). Every value of an output is written, so they need not be
// zeroed.
func forwardGroup(w *Workers, x tensor.T, a *arena, ls []*Linear) []tensor.T {
	outs := make([]tensor.T, len(ls))
	m, k := x.Rows(), x.Cols()
	for i, l := range ls {
		if l.In() != k {
			panic("cpu.ForwardGroup: linear layers of different input widths share an input")
		}
		if a != nil {
			outs[i] = a.new(m, l.Out())
		} else {
			outs[i] = tensor.New(m, l.Out())
		}
	}
	if m == 0 {
		return outs
	}
	owned := w.tryAcquire()
	if owned {
		defer w.release()
	}
	if m == 1 && owned {
		// One token's product: the pool's own gemm, reused from call to
		// call (a decode step makes about 50 of these calls; a fresh
		// gemm each time was a good part of its allocations, whose
		// memory the streamed weights have evicted from the caches).
		g := &w.dec
		g.reset(x, ls, outs)
		done := g.decodeQK(w)
		g.reset(tensor.T{}, nil, nil) // keep no tensors alive
		if done {
			return outs
		}
	}
	g := &gemm{ks: kernels(), x: x, k: k, ls: ls, outs: outs}
	g.layout([]int{0, m})
	g.pack(w, owned)
	g.plan(g.workers(w, owned))
	g.run(w)
	return g.outs
}

// decodeQK is one token's product over linears that are all QK with
// whole panels and a run kernel in the set (every linear of a K-quant
// file's decode on AVX-512), done without the general path's tiling and
// planning: the activations are quantised once per super-block size on
// the caller (768 inputs in 0.34 µs, BenchmarkPackQKTile; llama-3.2-1b's
// 8,192 of the down projection in about 4, where the general path split
// them over the workers in a job of their own), and the linears' panels, taken
// as one run, are cut into two equal shares per worker, each share one
// run-kernel call per linear it touches. The general path cut each
// linear by itself into tasks of a quarter of the group (q, k and v: a
// task and a third each, the thirds last) and packed a long row in a
// parallel job of its own. It returns false, having done nothing, when
// some linear does not qualify.
func (g *gemm) decodeQK(w *Workers) bool {
	var need [2]bool
	units := 0
	for _, l := range g.ls {
		pw := &l.packed
		if pw.kind != kindQK || g.ks.qkRun[pw.qk] == nil || pw.n%panelWidth != 0 || g.k%qkFormats[pw.qk].super != 0 {
			return false
		}
		need[superIndex(qkFormats[pw.qk].super)] = true
		units += pw.panels
	}
	var size [2]int
	for si, super := range qkSupers {
		if need[si] {
			size[si] = qkTileBytes(super, 1, g.k)
		}
	}
	if cap(w.shared) < size[0]+size[1] {
		w.shared = hugemem.Aligned(size[0] + size[1])
	}
	off := 0
	for si, super := range qkSupers {
		if need[si] {
			g.aQK[si] = w.shared[off : off+size[si]]
			packQKTile(g.aQK[si], g.x.HostData(), g.k, 0, 1, g.k, super)
			off += size[si]
		}
	}
	g.units, g.shares = units, 1
	if w.N() > 1 && units >= 2*w.N() && int64(units)*panelWidth*int64(g.k) >= 1<<17 {
		g.shares = 2 * w.N()
	}
	if g.shares == 1 {
		g.share(0, 0)
		return true
	}
	if g.shareFn == nil {
		g.shareFn = g.share // made once: the method value is a heap closure
	}
	w.run(g.shares, g.shareFn)
	return true
}

// share is decodeQK's share t of the group's panels, taken as one run.
func (g *gemm) share(_, t int) {
	p0, p1 := t*g.units/g.shares, (t+1)*g.units/g.shares
	base := 0
	for i, l := range g.ls {
		if lo, hi := max(p0-base, 0), min(p1-base, l.packed.panels); lo < hi {
			g.runQK(l, g.outs[i], tile{mr: 1}, lo, hi)
		}
		base += l.packed.panels
	}
}

// reset makes g (a pool's reused decode gemm) one over x and ls, writing
// outs, keeping its shareFn; the zero x leaves it holding no tensors.
func (g *gemm) reset(x tensor.T, ls []*Linear, outs []tensor.T) {
	k := 0
	if len(x.Shape) > 0 {
		k = x.Cols()
	}
	*g = gemm{ks: kernels(), x: x, k: k, ls: ls, outs: outs, shareFn: g.shareFn}
}

// layout cuts x's rows into the tiles of each kind of packing the
// linears need, segment by segment (bounds: the first row of each, then
// x's rows).
func (g *gemm) layout(bounds []int) {
	needFloat, needQ8, needI4 := false, false, false
	var needQK [2]bool
	for _, l := range g.ls {
		switch l.packed.kind {
		case kindQ8:
			needQ8 = true
		case kindQK:
			needQK[superIndex(qkFormats[l.packed.qk].super)] = true
		case kindI4:
			needI4 = true
		default:
			needFloat = true
		}
	}
	tallest := 0
	for s := range len(bounds) - 1 {
		tallest = max(tallest, bounds[s+1]-bounds[s])
	}
	if needFloat || needI4 {
		// One float pack serves F32, BF16, F16 and I4 panels alike, in
		// tiles no higher than the kernels of every kind it serves take.
		mr := maxMR
		if needFloat {
			mr = min(g.ks.mrMax[kindF32], g.ks.mrMax[kindBF16], g.ks.mrMax[kindF16])
		}
		if needI4 {
			// One tile goes through the I4 kernels; several go through
			// the F32 kernels over I4 blocks widened once (execI4).
			if tallest <= g.ks.mrMax[kindI4] {
				mr = min(mr, g.ks.mrMax[kindI4])
			} else {
				mr = min(mr, g.ks.mrMax[kindF32])
			}
		}
		g.float, g.segTiles[0] = segmentTiles(bounds, mr, func(mr int) int { return mr * g.k })
	}
	if needQ8 {
		g.q8, g.segTiles[1] = segmentTiles(bounds, g.ks.mrMax[kindQ8], func(mr int) int { return q8TileBytes(mr, g.k) })
	}
	for si, super := range qkSupers {
		if needQK[si] {
			g.qk[si], g.segTiles[2+si] = segmentTiles(bounds, g.ks.mrMax[kindQK], func(mr int) int { return qkTileBytes(super, mr, g.k) })
		}
	}
}

// workers is how many workers the product takes: all of them when the
// call owns the pool and has enough arithmetic to share.
func (g *gemm) workers(w *Workers, owned bool) int {
	var macs int64
	for i, l := range g.ls {
		rows := 0
		for _, t := range g.tilesFor(i) {
			rows += t.mr
		}
		macs += int64(rows) * int64(l.Out()) * int64(g.k)
	}
	if owned && macs >= 1<<17 {
		return w.N()
	}
	return 1
}

// run executes the planned tasks, on the pool when there are several
// workers' worth.
func (g *gemm) run(w *Workers) {
	if len(g.tasks) <= 1 || w.N() == 1 || !g.parallel {
		var scratch workerScratch
		for t := range g.tasks {
			g.exec(&scratch, t)
		}
		return
	}
	g.pool = w
	w.run(len(g.tasks), func(worker, t int) { g.exec(&w.scratch[worker], t) })
}

// pack fills the activation tiles, in the pool's shared buffer when this
// call owns the pool.
func (g *gemm) pack(w *Workers, owned bool) {
	m, k := g.x.Rows(), g.k
	floatBytes, q8Bytes := 0, 0
	if g.float != nil {
		floatBytes = 4 * m * k
	}
	if g.q8 != nil {
		q8Bytes = q8TileBytes(m, k)
	}
	var qkBytes [2]int
	for si, super := range qkSupers {
		if g.qk[si] != nil {
			qkBytes[si] = qkTileBytes(super, m, k)
			q8Bytes += qkBytes[si]
		}
	}
	var buf []byte
	if owned {
		if cap(w.shared) < floatBytes+q8Bytes {
			w.shared = hugemem.Aligned(floatBytes + q8Bytes + floatBytes/4)
		}
		buf = w.shared[:floatBytes+q8Bytes]
	} else {
		buf = hugemem.Aligned(floatBytes + q8Bytes)
	}
	if floatBytes > 0 {
		g.aF32 = unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), m*k)
	}
	g.aQ8 = buf[floatBytes:]
	for si := range qkBytes {
		if qkBytes[si] > 0 {
			end := len(buf) - qkBytes[1]*(1-si)
			g.aQK[si] = buf[end-qkBytes[si] : end]
		}
	}
	// A task packs one tile's inputs [k0, k0+packK): a few tasks per
	// tile, so that even the three tiles of a batch-32 decode split evenly
	// over the workers (packing serially left the other core idle for 4-5%
	// of the step).
	const packK = 256 // a multiple of the Q8 block and of the QK super-blocks
	kParts := (k + packK - 1) / packK
	packTile := func(i int) {
		tl, k0 := i/kParts, i%kParts*packK
		kn := min(packK, k-k0)
		if tl < len(g.float) {
			t := g.float[tl]
			packFloatTile(g.aF32[t.off+k0*t.mr:], g.x.HostData()[k0:], k, t.t0, t.mr, kn)
			return
		}
		tl -= len(g.float)
		if tl < len(g.q8) {
			t := g.q8[tl]
			packQ8Tile(g.aQ8[t.off+k0/tensor.Q8_0BlockSize*40*t.mr:], g.x.HostData()[k0:], k, t.t0, t.mr, kn)
			return
		}
		tl -= len(g.q8)
		si := 0
		if tl >= len(g.qk[0]) {
			si, tl = 1, tl-len(g.qk[0])
		}
		t, super := g.qk[si][tl], qkSupers[si]
		packQKTile(g.aQK[si][t.off+k0/super*qkSuperTileBytes(super, t.mr):], g.x.HostData()[k0:], k, t.t0, t.mr, kn, super)
	}
	n := (len(g.float) + len(g.q8) + len(g.qk[0]) + len(g.qk[1])) * kParts
	if owned && n > 1 && m*k >= 1<<13 {
		w.run(n, func(_, i int) { packTile(i) })
		return
	}
	for i := range n {
		packTile(i)
	}
}

// plan cuts the work into about tasksPerWorker tasks per worker, none
// smaller than minTaskMACs, each a run of panels of one layer against a
// run of its tiles (with act, of a gate and its up together).
func (g *gemm) plan(workers int) {
	const minTaskMACs = 1 << 16
	// Several tasks per worker so a core slowed by another process takes
	// fewer; each is still hundreds of kilobytes of weights in decode
	// (batch 1 takes fewer, below).
	const tasksPerWorker = 8
	g.parallel = workers > 1
	var units int64 // panel × tile pairs
	for i, l := range g.ls {
		units += int64(l.packed.panels * len(g.tilesFor(i)))
	}
	nTiles := len(g.float) + len(g.q8) + len(g.qk[0]) + len(g.qk[1])
	mrAvg := max(1, g.x.Rows()/max(1, nTiles))
	perTask := max((units+int64(tasksPerWorker*workers)-1)/int64(tasksPerWorker*workers), minTaskMACs/int64(panelWidth*g.k*mrAvg)+1)
	if nTiles == 1 {
		// One tile: the decode streams the weights from memory, each
		// task's panels as one run that the hardware prefetchers follow
		// and restart at every task. Two tasks per worker: Q8_0 panels
		// are a quarter of float32's, and its batch-1 products measured
		// 28.6 GB/s (six runs' mean, BenchmarkDecodeStep) against 26.8
		// with eight; float32 30.0 against 30.5, within the noise.
		perTask = max(perTask, (units+int64(2*workers)-1)/int64(2*workers))
	}
	if workers == 1 {
		perTask = units
	}
	if g.act != nil {
		// A task of a pair does the units of both.
		perTask = max(1, perTask/2)
	}
	for i, l := range g.ls {
		if g.act != nil && i%2 == 1 {
			continue // the gate's tasks do it
		}
		nt := len(g.tilesFor(i))
		if int64(nt) >= perTask {
			step := int(perTask)
			for p := range l.packed.panels {
				for t := 0; t < nt; t += step {
					g.tasks = append(g.tasks, gemmTask{lin: i, p0: p, p1: p + 1, t0: t, t1: min(nt, t+step)})
				}
			}
			continue
		}
		step := int((perTask + int64(nt) - 1) / int64(nt))
		for p := 0; p < l.packed.panels; p += step {
			g.tasks = append(g.tasks, gemmTask{lin: i, p0: p, p1: min(l.packed.panels, p+step), t0: 0, t1: nt})
		}
	}
}

// tilesOf is the tile set a linear's kind multiplies, and where each
// segment's tiles start in it.
func (g *gemm) tilesOf(l *Linear) ([]tile, []int) {
	switch l.packed.kind {
	case kindQ8:
		return g.q8, g.segTiles[1]
	case kindQK:
		si := superIndex(qkFormats[l.packed.qk].super)
		return g.qk[si], g.segTiles[2+si]
	}
	return g.float, g.segTiles[0]
}

// tilesFor is the tiles linear i multiplies: its segment's.
func (g *gemm) tilesFor(i int) []tile {
	ts, starts := g.tilesOf(g.ls[i])
	s := 0
	if g.seg != nil {
		s = g.seg[i]
	}
	return ts[starts[s]:starts[s+1]]
}

// kBlock is the inner length of one micro-kernel call when more than
// kBlockTiles tiles share a panel (prefill): its slice of the panel
// (16-17 KiB) then stays in L1 while every tile of the task passes over
// it, and each tile's activations stream from L2 (twice the speed of
// unblocked panels at 512 tokens). With a few tiles (decode of a batch)
// the whole panel (≤ 256 KiB) stays in L2 instead, and streams from memory
// without a restart at every block (5-10% faster at 32 tokens).
const kBlockTiles = 4

func kBlock(kind int) int {
	switch kind {
	case kindF32:
		return 128
	case kindBF16, kindF16:
		return 256
	}
	return 512
}

// panelRowBytes is the bytes of one input's 32 weights in a panel (Q8:
// per input, averaged over a block).
func panelRowBytes(kind int) int {
	switch kind {
	case kindF32:
		return 4 * panelWidth
	case kindBF16, kindF16:
		return 2 * panelWidth
	}
	return q8PanelBlock / tensor.Q8_0BlockSize
}

// exec runs one task (with act, the gate's panels, the up's, then the
// activation): for each panel, every tile, block by block of k
// when there are many tiles, so the panel is read from memory once. The
// kernels accumulate into a scratch tile, copied to the output per panel:
// accumulating in the output itself, whose rows are a power of two apart,
// measured up to twice slower (L1 set conflicts and 4 KiB aliasing
// between the tile's stores and the next loads). Unblocked panels (decode,
// up to kBlockTiles tiles) are the exception where the set has storing
// kernels: each tile is then written once, at the end of its one call, so
// the kernel stores straight into the output and the scratch's clearing
// and copy (5-7% of a batch-32 decode) go away.
func (g *gemm) exec(s *workerScratch, ti int) {
	t := g.tasks[ti]
	g.execPanels(s, t)
	if g.act != nil {
		up := t
		up.lin++
		g.execPanels(s, up)
		g.activate(t)
	}
}

// execPanels runs task t's panels of its one linear.
func (g *gemm) execPanels(s *workerScratch, t gemmTask) {
	l := g.ls[t.lin]
	pw := &l.packed
	out := g.outs[t.lin]
	tl := g.tilesFor(t.lin)[t.t0:t.t1]
	kb := g.k
	if len(tl) > kBlockTiles {
		kb = kBlock(pw.kind)
	}
	rowBytes := panelRowBytes(pw.kind)
	// Unblocked float panels go straight into the output when the set has
	// storing kernels: no scratch to zero and copy out of (the last panel
	// may be partial, and takes the scratch).
	var store *[maxMR + 1]storeKernel
	if kb == g.k && pw.kind < kindQ8 && g.ks.floatStore[pw.kind][1] != nil {
		store = &g.ks.floatStore[pw.kind]
	}
	n := out.Cols()
	if pw.kind == kindQK && len(tl) == 1 && tl[0].mr == 1 && kb == g.k {
		t.p0 = g.runQK(l, out, tl[0], t.p0, t.p1)
	}
	for p := t.p0; p < t.p1; p++ {
		panel := pw.panel(p)
		n0 := p * panelWidth
		if store != nil && n0+panelWidth <= pw.n {
			next, nextBytes := g.nextPanel(t, p)
			for i, tile := range tl {
				c := unsafe.Pointer(&out.HostData()[tile.t0*n+n0])
				// With two or more tiles the arithmetic takes longer
				// than reading the panel: the tiles' calls prefetch
				// the next panel in turn, 64 bytes per k each, so it
				// streams in under the arithmetic instead of stalling
				// the first tile of every panel (the batch-32 step's
				// products measured 7-10% faster). One tile is the
				// memory-bound decode, which the hardware prefetchers
				// stream alone.
				var pf unsafe.Pointer
				if len(tl) > 1 && next != nil && i*64*g.k < nextBytes {
					pf = unsafe.Add(next, i*64*g.k)
				}
				store[tile.mr](unsafe.Pointer(&g.aF32[tile.off]), panel, g.k, c, 4*n, pf)
				if l.Bias != nil {
					for r := range tile.mr {
						dst := out.HostData()[(tile.t0+r)*n+n0:][:panelWidth]
						for j, b := range l.Bias[n0 : n0+panelWidth] {
							dst[j] += b
						}
					}
				}
			}
			continue
		}
		scratch := s.scratchFor(tl)
		if pw.kind == kindI4 {
			g.execI4(s, pw, tl, panel, kb, scratch)
			g.finishPanel(l, out, tl, scratch, n0, min(panelWidth, pw.n-n0))
			continue
		}
		if pw.kind == kindQK {
			g.execQK(pw, tl, panel, kb, scratch)
			g.finishPanel(l, out, tl, scratch, n0, min(panelWidth, pw.n-n0))
			continue
		}
		for k0 := 0; k0 < g.k; k0 += kb {
			kn := min(kb, g.k-k0)
			b := unsafe.Add(panel, k0*rowBytes)
			off := 0
			for _, tile := range tl {
				c := unsafe.Pointer(&scratch[off])
				off += tile.mr * panelWidth
				if pw.kind == kindQ8 {
					a := unsafe.Pointer(&g.aQ8[tile.off+k0/tensor.Q8_0BlockSize*40*tile.mr])
					g.ks.q8[tile.mr](a, b, kn/tensor.Q8_0BlockSize, c, 4*panelWidth)
				} else {
					g.ks.float[pw.kind][tile.mr](unsafe.Pointer(&g.aF32[tile.off+k0*tile.mr]), b, kn, c, 4*panelWidth)
				}
			}
		}
		g.finishPanel(l, out, tl, scratch, n0, min(panelWidth, pw.n-n0))
	}
}

// runQK computes one token's outputs of the whole panels among [p0,
// p1) of a QK linear with the set's run kernel, in one call straight
// into out, and returns the first panel it left (a partial last panel,
// or p0 where the set has no run kernel).
func (g *gemm) runQK(l *Linear, out tensor.T, tile tile, p0, p1 int) int {
	pw := &l.packed
	run := g.ks.qkRun[pw.qk]
	full := min(p1, pw.n/panelWidth)
	if run == nil || full <= p0 {
		return p0
	}
	f := &qkFormats[pw.qk]
	c := out.HostData()[tile.t0*out.Cols()+p0*panelWidth:][:(full-p0)*panelWidth]
	a := unsafe.Pointer(&g.aQK[superIndex(f.super)][tile.off])
	run(a, pw.panel(p0), g.k/f.super, unsafe.Pointer(&c[0]), full-p0)
	if l.Bias != nil {
		for j, b := range l.Bias[p0*panelWidth:][:len(c)] {
			c[j] += b
		}
	}
	return full
}

// execQK runs one QK panel against the tiles, kb inputs at a time, into
// scratch. The active set's kernel serves each tile where it has one for
// the panel's format, else the Go kernel does.
func (g *gemm) execQK(pw *packedWeight, tl []tile, panel unsafe.Pointer, kb int, scratch []float32) {
	f := &qkFormats[pw.qk]
	as := g.aQK[superIndex(f.super)]
	for k0 := 0; k0 < g.k; k0 += kb {
		kn := min(kb, g.k-k0)
		b := unsafe.Add(panel, k0/f.super*f.superBytes())
		off := 0
		for _, tile := range tl {
			kernel := g.ks.qk[pw.qk][tile.mr]
			if kernel == nil {
				kernel = goKernels.qk[pw.qk][tile.mr]
			}
			a := unsafe.Pointer(&as[tile.off+k0/f.super*qkSuperTileBytes(f.super, tile.mr)])
			kernel(a, b, kn/f.super, unsafe.Pointer(&scratch[off]), 4*panelWidth)
			off += tile.mr * panelWidth
		}
	}
}

// nextPanel is the panel this worker will most likely compute after
// task t's panel p, and its bytes (nil at the end): the next of the task,
// else the first of the next task still unclaimed. Workers claim tasks in
// order, and the one finishing a task claims the next; the other is
// mid-task.
func (g *gemm) nextPanel(t gemmTask, p int) (unsafe.Pointer, int) {
	if p+1 < t.p1 {
		pw := &g.ls[t.lin].packed
		return pw.panel(p + 1), pw.stride
	}
	if g.act != nil && t.lin%2 == 0 {
		pw := &g.ls[t.lin+1].packed // the up's panels of the same task
		return pw.panel(t.p0), pw.stride
	}
	if g.pool == nil {
		return nil, 0
	}
	if ti := g.pool.unclaimed(); ti < len(g.tasks) {
		nt := g.tasks[ti]
		pw := &g.ls[nt.lin].packed
		return pw.panel(nt.p0), pw.stride
	}
	return nil, 0
}

// scratchFor returns zeroed scratch for the tiles' [mr][32] outputs.
func (s *workerScratch) scratchFor(tl []tile) []float32 {
	n := 0
	for _, t := range tl {
		n += t.mr * panelWidth
	}
	if cap(s.tile) < n {
		s.tile = make([]float32, n)
	}
	s.tile = s.tile[:n]
	clear(s.tile)
	return s.tile
}

// finishPanel copies a panel's columns [n0, n0+nn) out of scratch, adding
// the bias.
func (g *gemm) finishPanel(l *Linear, out tensor.T, tl []tile, scratch []float32, n0, nn int) {
	n := out.Cols()
	off := 0
	for _, tile := range tl {
		for r := range tile.mr {
			dst := out.HostData()[(tile.t0+r)*n+n0:][:nn]
			if nn == panelWidth { // inline moves: the compiler makes a memmove call of a 128-byte array copy
				src := scratch[off+r*panelWidth:][:panelWidth]
				dst := dst[:panelWidth]
				for j := 0; j < panelWidth; j += 2 {
					*(*uint64)(unsafe.Pointer(&dst[j])) = *(*uint64)(unsafe.Pointer(&src[j]))
				}
			} else {
				copy(dst, scratch[off+r*panelWidth:][:nn])
			}
			if l.Bias != nil {
				for j, b := range l.Bias[n0 : n0+nn] {
					dst[j] += b
				}
			}
		}
		off += tile.mr * panelWidth
	}
}
