// Package flash is a FlashAttention-2-style CPU attention backend.
//
// Work is cut into items of (request, KV heads, block of queries, key
// range). An item walks its keys in tiles read natively from the paged pool
// (one SeqKV.K/V call per page that the tile touches) and keeps a running
// max m and sum l per query row, rescaling its accumulator when the max
// grows; only one tile row of scores exists at a time. Every query head of
// a GQA group and every query of the block reuses the same K/V tile, which
// is where the speed over the reference comes from. When there are fewer
// items than workers (decode of a small batch) the key range is split and
// the partial results are merged (flash-decoding).
package flash

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// Entry registers the backend.
var Entry = attention.Entry{
	Name:        "flash",
	Description: "FlashAttention-2 tiling: paged K/V tiles, online softmax, GQA-shared tiles, split-KV decode",
	Caps:        attention.CPUCaps,
	New: func(opts attention.Options) (attention.Backend, error) {
		be := New(opts.Workers)
		be.opts = opts
		return be, nil
	},
}

// Tuning. A tile of tileKeys keys of one head (32 KiB at head dim 128) and
// an item of about rowsPerItem query rows keep the working set in L2;
// splitting the key range pays only when each part has at least
// minSplitKeys keys.
const (
	tileKeys     = 64
	rowsPerItem  = 64
	minSplitKeys = 256
	itemsPerCore = 4 // split the keys when there are fewer items than this per worker
)

// Backend holds per-worker scratch across calls; like every backend it
// serves one forward at a time.
type Backend struct {
	workers *cpu.Workers      // nil: run serially
	opts    attention.Options // Output: where layer outputs go
	scratch []*worker         // one per worker, never shared

	vis    []attention.Visibility // per new token of the batch
	items  []item
	merges []merge
	part   partials
	next   atomic.Int64
}

// New makes a backend that splits its work over workers (nil: serially).
func New(workers *cpu.Workers) *Backend {
	n := 1
	if workers != nil {
		n = workers.N()
	}
	be := &Backend{workers: workers}
	for range n {
		be.scratch = append(be.scratch, &worker{})
	}
	return be
}

func (*Backend) Name() string { return "flash" }

func (*Backend) Plan(b *forward.Batch) error { return nil }

// Extend and Decode share one path: a decode is an extend of length 1
// whose items are few, so its keys get split.
func (be *Backend) Extend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

func (be *Backend) Decode(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

// item is one unit of work: queries [t0, t1) of request req (new-token
// indices), KV heads [h0, h1) with all their query heads, keys [klo, khi).
type item struct {
	req, t0, t1, h0, h1 int32
	klo, khi            int32
	part                int32 // -1: write the output; else first row of its partial result
	cost                int64
}

// merge combines the splits of one (request, query block, heads) whose
// partial results lie at rows [part + s*rows, ...) for s < splits.
type merge struct {
	req, t0, t1, h0, h1 int32
	part, splits        int32
}

// partials are the unnormalised results of split items, per query row.
type partials struct {
	m, l []float32 // [rows]
	acc  []float32 // [rows, HeadDimV]
}

// job is what every item of one call shares (read-only while running).
type job struct {
	q, k, v      tensor.T
	out          tensor.T
	layer        *attention.Layer
	b            *forward.Batch
	vis          []attention.Visibility
	dk, dv       int
	group        int // query heads per KV head
	headsPerItem int // KV heads per item: 1, or all when tiles are decoded
	blockQueries int // queries per item
	kStride      int
	vStride      int
	views        bool // SeqKV.K/V return views that stay valid (float32 pool, Encode inputs)
	part         *partials
}

func (be *Backend) attend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	if err := attention.CheckShapes(q, k, v, layer, b); err != nil {
		return tensor.T{}, err
	}
	attention.StoreKVSplit(k, v, layer, b, be.workers.For)
	out := be.opts.NewOutput(b.NumTokens(), layer.NumHeads*layer.HeadDimV)
	if b.NumTokens() == 0 {
		return out, nil
	}
	j := &job{q: q, k: k, v: v, out: out, layer: layer, b: b, dk: layer.HeadDim, dv: layer.HeadDimV,
		group: layer.NumHeads / layer.NumKVHeads, headsPerItem: 1, kStride: layer.NumKVHeads * layer.HeadDim,
		vStride: layer.NumKVHeads * layer.HeadDimV, part: &be.part}
	if layer.MLA {
		j.vStride = j.kStride // V is the first HeadDimV values of the latent K row
	}
	// Converted storage (BF16, FP8) is decoded for all KV heads by one
	// SeqKV.K call, so an item then takes every head: each tile is decoded
	// once, not once per head.
	j.views = b.Mode == forward.Encode || b.KV.Pool.Spec.DType == tensor.F32
	if !j.views {
		j.headsPerItem = layer.NumKVHeads
	}
	j.blockQueries = max(1, rowsPerItem/(j.group*j.headsPerItem))
	be.plan(j)
	be.parallel(len(be.items), func(w *worker, i int) { w.run(j, &be.items[i]) })
	be.parallel(len(be.merges), func(_ *worker, i int) { j.merge(&be.merges[i]) })
	return out, nil
}

// plan computes every new token's visible keys (j.vis) and cuts the batch
// into items, splitting key ranges when there are too few items to keep
// the workers busy.
func (be *Backend) plan(j *job) {
	b, layer := j.b, j.layer
	be.vis = be.vis[:0]
	for r := range b.NumReqs() {
		for t := range int(b.ExtendLens[r]) {
			be.vis = append(be.vis, attention.Visible(b, layer, r, t))
		}
	}
	be.items, be.merges = be.items[:0], be.merges[:0]
	for r := range b.NumReqs() {
		start, n := int(b.ExtendStarts[r]), int(b.ExtendLens[r])
		for t0 := 0; t0 < n; t0 += j.blockQueries {
			t1 := min(n, t0+j.blockQueries)
			klo, khi := b.SeqLen(r), 0
			for _, vis := range be.vis[start+t0 : start+t1] {
				klo, khi = min(klo, vis.Lo), max(khi, vis.Hi)
			}
			if klo >= khi {
				continue // nothing visible: the output stays zero
			}
			for h0 := 0; h0 < layer.NumKVHeads; h0 += j.headsPerItem {
				h1 := h0 + j.headsPerItem
				be.items = append(be.items, item{req: int32(r), t0: int32(t0), t1: int32(t1), h0: int32(h0), h1: int32(h1),
					klo: int32(klo), khi: int32(khi), part: -1, cost: int64((t1-t0)*(h1-h0)) * int64(khi-klo)})
			}
		}
	}
	j.vis = be.vis
	be.split(j)
	// Largest first: workers pull items in this order, which balances
	// causal prefill whose later query blocks see more keys.
	slices.SortStableFunc(be.items, func(a, b item) int { return cmp.Compare(b.cost, a.cost) })
}

// split cuts each item's key range into parts of about minSplitKeys or
// more, at tile boundaries, when there are fewer than itemsPerCore items per worker.
func (be *Backend) split(j *job) {
	workers := len(be.scratch)
	n := len(be.items)
	if workers == 1 || n >= itemsPerCore*workers {
		return
	}
	want := (itemsPerCore*workers + n - 1) / n // parts per item
	rows := 0
	for i := range n {
		whole := be.items[i]
		span := int(whole.khi - whole.klo)
		parts := min(want, span/minSplitKeys)
		if parts <= 1 {
			continue
		}
		chunk := (span + parts - 1) / parts
		itemRows := int(whole.t1-whole.t0) * int(whole.h1-whole.h0) * j.group
		m := merge{req: whole.req, t0: whole.t0, t1: whole.t1, h0: whole.h0, h1: whole.h1, part: int32(rows)}
		for lo := int(whole.klo); lo < int(whole.khi); {
			// Cut at a tile boundary so that no tile is read twice.
			hi := min(int(whole.khi), (lo+chunk)/tileKeys*tileKeys)
			piece := whole
			piece.klo, piece.khi, piece.part = int32(lo), int32(hi), int32(rows)
			piece.cost = whole.cost / int64(span) * int64(hi-lo)
			if lo == int(whole.klo) {
				be.items[i] = piece
			} else {
				be.items = append(be.items, piece)
			}
			rows += itemRows
			m.splits++
			lo = hi
		}
		be.merges = append(be.merges, m)
	}
	p := &be.part
	p.m, p.l, p.acc = grow(p.m, rows), grow(p.l, rows), grow(p.acc, rows*j.dv)
}

// parallel runs fn(w, i) for i in [0, n), each worker with its own scratch
// pulling the next index, so uneven items balance themselves.
func (be *Backend) parallel(n int, fn func(w *worker, i int)) {
	workers := min(len(be.scratch), n)
	if workers <= 1 {
		for i := range n {
			fn(be.scratch[0], i)
		}
		return
	}
	be.next.Store(0)
	be.workers.For(workers, 1, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			w := be.scratch[p]
			for {
				i := int(be.next.Add(1)) - 1
				if i >= n {
					break
				}
				fn(w, i)
			}
		}
	})
}

// merge combines the partial results of one split item into the output:
// with M the largest partial max, out = Σ acc_s·e^(m_s-M) / Σ l_s·e^(m_s-M).
func (j *job) merge(mg *merge) {
	nq, nh := int(mg.t1-mg.t0), int(mg.h1-mg.h0)
	rows := nq * nh * j.group
	p := j.part
	for row := range rows {
		o := j.outRow(int(mg.req), int(mg.t0), nq, int(mg.h0), row)
		m := negInf
		for s := range int(mg.splits) {
			m = max(m, p.m[int(mg.part)+s*rows+row])
		}
		if m == negInf {
			continue // no key visible: zero, as the reference gives
		}
		var l float32
		for s := range int(mg.splits) {
			at := int(mg.part) + s*rows + row
			if p.m[at] == negInf {
				continue
			}
			w := exp(p.m[at] - m)
			l += w * p.l[at]
			axpy(o, w, p.acc[at*j.dv:(at+1)*j.dv])
		}
		scale(o, j.layer.Normalizer(j.rowHead(nq, int(mg.h0), row), m, l))
	}
}

// outRow is the output slice of an item's query row: rows are ordered
// (KV head, query, head within the group).
func (j *job) outRow(req, t0, nq, h0, row int) []float32 {
	qi := row % (nq * j.group) / j.group
	token := int(j.b.ExtendStarts[req]) + t0 + qi
	at := (token*j.layer.NumHeads + j.rowHead(nq, h0, row)) * j.dv
	return j.out.Data[at : at+j.dv]
}

// rowHead is the query head of an item's row (see outRow).
func (j *job) rowHead(nq, h0, row int) int {
	return (h0+row/(nq*j.group))*j.group + row%j.group
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
