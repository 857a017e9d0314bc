// Package cpuattn is the CPU attention core that the flash and splitkv
// backends are entries over, as gpu.Fused is on the GPU: work items of
// (request, block of query tokens, key chunk, KV heads) pulled from a
// dynamic queue by the worker pool; in each, an online softmax over tiles
// of keys read from the paged pool through attention.SeqKV (any page size,
// any KV dtype), with the assembly head kernels of device/cpu on every
// tile; then a merge of a query's chunks through their log-sum-exps.
//
// A Policy decides only how the keys are cut into chunks (plan.go):
// SplitPrefix cuts the cached prefix into as many chunks as fill the
// workers and keeps the new tokens' keys (causal, masks, spans) apart, as
// SGLang's Triton backend does; SplitWhenIdle keeps one key range per
// query block and cuts it only when the items are too few for the workers
// (flash-decoding only where it pays).
package cpuattn

import (
	"math"
	"sync/atomic"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// Backend holds the current plan, the partial buffers it sizes and one
// scratch per worker; none of it is shared between concurrent forwards.
type Backend struct {
	name    string
	workers device.Workers    // nil: serial
	opts    attention.Options // Output: where layer outputs go
	policy  Policy
	tune    tuning
	plan    plan

	// Partials of the merged requests, reused by every layer:
	//	partOut: [partUnits, NumHeads, HeadDimV]
	//	partLSE: [partUnits, NumHeads]
	// A unit is (new token t of request r, chunk c) = partOff + t·chunks + c.
	partOut []float32
	partLSE []float32
	// The last layer's geometry, so that Plan can size the partials before
	// layer 0 (the contract gives Plan the batch, not the model).
	lastHeads, lastDimV int

	scratch []*workerScratch // one per worker: SeqKV keeps conversion scratch
	next    atomic.Int64     // the dynamic work queue's cursor
}

// New is a backend named name that cuts keys by policy and splits its work
// over opts.Workers() (none: serially).
func New(name string, opts attention.Options, policy Policy) *Backend {
	be := newBackend(name, opts.Workers(), policy, defaultTuning)
	be.opts = opts
	return be
}

func newBackend(name string, workers device.Workers, policy Policy, tn tuning) *Backend {
	n := 1
	if workers != nil {
		n = workers.N()
	}
	be := &Backend{name: name, workers: workers, policy: policy, tune: tn, scratch: make([]*workerScratch, n)}
	for i := range be.scratch {
		be.scratch[i] = &workerScratch{}
	}
	return be
}

func (be *Backend) Name() string { return be.name }

// Plan chooses the chunks for b; every layer of the forward reuses them.
func (be *Backend) Plan(b *forward.Batch) error {
	be.plan.make(b, be.policy, be.tune, len(be.scratch))
	if be.lastHeads > 0 {
		be.sizePartials(be.lastHeads, be.lastDimV)
	}
	return nil
}

// Extend and Decode share the chunk kernel; only the plan tells them apart.
func (be *Backend) Extend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

func (be *Backend) Decode(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

// layerRun is what every item of one layer call reads; workers share it
// read-only.
type layerRun struct {
	in           attention.HostArgs
	out          tensor.Host
	layer        *attention.Layer
	b            *forward.Batch
	group        int  // query heads per KV head
	headsPerItem int  // KV heads per item
	kvGroups     int  // items per task
	vViews       bool // K and V rows are views that stay valid (float32 pool, or Encode inputs)
	warmsRows    bool // views of separate K and V rows of one width: each pass warms the next's rows (scoreTile)
	bf16Rows     bool // a bfloat16 pool of separate K and V rows: one-token items read them in place (item.bf16)
}

// bf16InPlace lets one-token items read a bfloat16 pool's rows in place
// (item.bf16); the tests turn it off to compare with the decoded path.
var bf16InPlace = true

func (be *Backend) attend(qt, kt, vt tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	in, err := attention.HostQKV(qt, kt, vt, layer, b)
	if err != nil {
		return tensor.T{}, err
	}
	var split func(n, minChunk int, fn func(lo, hi int))
	if be.workers != nil {
		split = be.workers.For
	}
	attention.StoreKVSplit(&in, layer, b, split)
	// Plan is optional for callers (attention.Run alone works): plan here
	// when the batch is not the one planned for.
	if !be.plan.matches(b) {
		be.plan.make(b, be.policy, be.tune, len(be.scratch))
	}
	p := &be.plan
	lr := &layerRun{in: in, out: be.opts.NewOutput(b.NumTokens(), layer.NumHeads*layer.HeadDimV), layer: layer, b: b,
		group: layer.NumHeads / layer.NumKVHeads, headsPerItem: 1}
	if p.allHeads {
		lr.headsPerItem = layer.NumKVHeads
	}
	lr.kvGroups = layer.NumKVHeads / lr.headsPerItem
	lr.vViews = b.KV == nil || b.KV.Pool.Spec.DType == tensor.F32
	lr.warmsRows = lr.vViews && !layer.MLA && layer.HeadDimV == layer.HeadDim
	lr.bf16Rows = bf16InPlace && b.KV != nil && b.KV.Pool.Spec.DType == tensor.BF16 && !layer.MLA
	vStride := layer.NumKVHeads * layer.HeadDimV
	if layer.MLA {
		vStride = layer.HeadDim
	}

	for r := range p.reqs {
		rp := &p.reqs[r]
		if rp.nSplit == 0 { // no prefix, or no new tokens
			continue
		}
		// Visibility only narrows from the left through the window, and
		// least for the request's first new token.
		rp.lo = min(attention.Visible(b, layer, r, 0).Lo, rp.split)
		rp.chunkLen = roundUp(ceilDiv(rp.split-rp.lo, rp.nSplit), be.tune.quantum)
	}
	be.sizePartials(layer.NumHeads, layer.HeadDimV)
	rows := p.queryBlock * lr.group * lr.headsPerItem
	for _, ws := range be.scratch {
		ws.size(rows, p.queryBlock, be.tune.keyTile, layer.HeadDim, layer.NumKVHeads*layer.HeadDim, layer.HeadDimV, vStride)
	}

	be.parallel(len(p.tasks)*lr.kvGroups, func(ws *workerScratch, i int) {
		be.attendChunk(ws, lr, i)
	})
	if len(p.merges) > 0 {
		be.mergeAll(lr)
	}
	return lr.out.T(), nil
}

// sizePartials grows the partial buffers for the current plan; they are
// never shrunk, so steady decoding allocates nothing.
func (be *Backend) sizePartials(heads, dimV int) {
	be.lastHeads, be.lastDimV = heads, dimV
	units := be.plan.partUnits * heads
	if cap(be.partLSE) < units {
		be.partLSE = make([]float32, units)
	}
	if cap(be.partOut) < units*dimV {
		be.partOut = make([]float32, units*dimV)
	}
	be.partLSE, be.partOut = be.partLSE[:units], be.partOut[:units*dimV]
}

// parallel runs fn(i) for i in [0, n) from a shared queue: each worker
// takes the next item when it finishes one, so chunks of uneven cost
// (causal blocks, ragged lengths, windows) still balance. Worker p always
// gets scratch p.
func (be *Backend) parallel(n int, fn func(ws *workerScratch, i int)) {
	be.next.Store(0)
	drain := func(part int) {
		ws := be.scratch[part]
		for {
			i := int(be.next.Add(1) - 1)
			if i >= n {
				return
			}
			fn(ws, i)
		}
	}
	parts := min(len(be.scratch), n)
	if be.workers == nil || parts <= 1 {
		drain(0)
		return
	}
	be.workers.For(parts, 1, func(lo, hi int) {
		for part := lo; part < hi; part++ {
			drain(part)
		}
	})
}

// mergeAll combines the chunk partials of every merged (token, head) into
// the layer output. Every pair costs the same, so a static split suffices;
// splitting by head too keeps a single long decode parallel here as well.
func (be *Backend) mergeAll(lr *layerRun) {
	heads, dv := lr.layer.NumHeads, lr.layer.HeadDimV
	merge := func(lo, hi int) {
		for x := lo; x < hi; x++ {
			m, h := be.plan.merges[x/heads], x%heads
			rp := &be.plan.reqs[m.req]
			u := (rp.partOff+int(m.t)*rp.chunks)*heads + h
			dst := lr.out.Row(rp.start + int(m.t))[h*dv : (h+1)*dv]
			mergeStates(dst, be.partOut[u*dv:], be.partLSE[u:], rp.chunks, heads*dv, heads, lr.layer.Sink(h))
		}
	}
	n := len(be.plan.merges) * heads
	if be.workers == nil {
		merge(0, n)
		return
	}
	be.workers.For(n, 8, merge)
}

// mergeStates writes to dst (zeroed, [Dv]) the combination of n partial
// outputs, the i-th at parts[i·partStride:][:Dv] with log-sum-exp
// lses[i·lseStride], and an attention sink of logit sink (−Inf: none),
// which adds to the denominator only:
//
//	m = max(lse_i, sink);  dst = Σ exp(lse_i − m)·o_i / (Σ exp(lse_i − m) + exp(sink − m))
//
// An empty chunk (lse = −Inf, o = 0) weighs 0; if every chunk is empty dst
// stays 0 rather than NaN.
func mergeStates(dst, parts, lses []float32, n, partStride, lseStride int, sink float32) {
	m := negInf
	for i := range n {
		m = max(m, lses[i*lseStride])
	}
	if m == negInf {
		return
	}
	m = max(m, sink)
	total := float32(math.Exp(float64(sink - m)))
	for i := range n {
		w := float32(math.Exp(float64(lses[i*lseStride] - m)))
		if w == 0 {
			continue
		}
		total += w
		axpy(dst, w, parts[i*partStride:i*partStride+len(dst)])
	}
	scaleInPlace(dst, 1/total)
}

var negInf = float32(math.Inf(-1))
