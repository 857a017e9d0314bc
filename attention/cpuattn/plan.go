package cpuattn

import (
	"slices"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// Policy is how a plan cuts each request's keys into chunks.
type Policy int

const (
	// SplitPrefix cuts the cached prefix (in Decode the whole sequence)
	// into as many chunks as make itemsPerWorker items per worker; in
	// Extend the new tokens' keys are one more chunk.
	SplitPrefix Policy = iota
	// SplitWhenIdle gives each query block one range over all the keys it
	// sees, cut into chunks of at least minSplit keys only when the batch
	// has fewer than itemsPerWorker items per worker: a merge costs a pass
	// over the partials, so it is paid only where workers would idle.
	SplitWhenIdle
)

// plan is the split-KV decision for one batch, shared by every layer of the
// forward. It depends only on the batch's mode and lengths (and the KV
// pool's layout), so a layer can check cheaply that it still applies.
//
// Each request's keys are cut into chunks:
//
//	keys:   [ lo ........................ split ) [ split ...... seqLen )
//	chunks:   0        1      ...    nSplit-1         nSplit (SplitPrefix extend only)
//	          prefix chunks: the cached prefix         the new tokens, with
//	          (decode, SplitWhenIdle: every key)       causality/masks/spans
//
// A work item is (task, group of KV heads); a task is (request, block of
// query tokens, chunk). Every item writes, for each query row it owns, a
// partial output and its log-sum-exp; a request with one chunk writes its
// normalised output straight into the layer output instead.
type plan struct {
	// The key: a batch with the same mode and lengths gets the same plan.
	mode       forward.Mode
	prefixLens []int32
	extendLens []int32

	allHeads   bool // an item covers every KV head, else one (see kvHeadsPerItem)
	queryBlock int  // query tokens per task
	reqs       []reqPlan
	tasks      []task    // most expensive first, for the dynamic scheduler
	partUnits  int       // (token, chunk) pairs whose partials go through the merge
	merges     []mergeAt // the new tokens whose output is merged
}

// reqPlan is one request's chunking.
type reqPlan struct {
	start   int // row of its first new token in q and out
	seqLen  int
	split   int // keys [lo, split) are cut into nSplit prefix chunks
	nSplit  int
	chunks  int // nSplit, plus one for the new tokens' keys in Extend
	partOff int // first (token, chunk) unit in the partial buffers; -1: one chunk, no merge

	// Set per layer (a sliding window moves lo): prefix chunk c covers keys
	// [lo + c·chunkLen, min(split, lo + (c+1)·chunkLen)), possibly empty.
	lo, chunkLen int
}

// chunkKeys is the key range of chunk c.
func (rp *reqPlan) chunkKeys(c int) (lo, hi int) {
	if c == rp.nSplit {
		return rp.split, rp.seqLen
	}
	lo = rp.lo + c*rp.chunkLen
	return min(lo, rp.split), min(rp.split, lo+rp.chunkLen)
}

// task is one (request, query-token block, chunk); cost orders the queue.
type task struct {
	req, t0, t1, chunk int32
	cost               int64
}

// mergeAt names one new token whose chunks are merged.
type mergeAt struct{ req, t int32 }

// matches reports whether b has the lengths this plan was made for.
func (p *plan) matches(b *forward.Batch) bool {
	return p.reqs != nil && p.mode == b.Mode &&
		slices.Equal(p.prefixLens, b.PrefixLens) && slices.Equal(p.extendLens, b.ExtendLens)
}

// kvHeadsPerItem: an item that covers every KV head reads each token's K
// and V rows whole and in order (contiguous memory, and for BF16/FP8 one
// decode per row rather than one per head); one that covers a single head
// strides over them, which halves the bandwidth a decode gets. So Decode
// and converted dtypes take all heads per item and find their parallelism
// in more chunks. A float32 Extend takes one head per item, so that a
// query block of many tokens reuses each K row it loads.
func kvHeadsPerItem(b *forward.Batch, numKVHeads int) int {
	if b.Mode == forward.Decode || b.KV != nil && b.KV.Pool.Spec.DType != tensor.F32 {
		return numKVHeads
	}
	return 1
}

// tuning is what the plan is chosen from; the tests shrink it to force many
// chunks, tiles and query blocks on small sequences.
type tuning struct {
	quantum        int // a chunk is a multiple of this many keys
	itemsPerWorker int // aim for this many items per worker (the queue is dynamic, so a few extra balance ragged batches)
	queryBlock     int // query tokens per extend task (divided among KV heads per item)
	keyTile        int // keys per online-softmax step inside a chunk
	minSplit       int // SplitWhenIdle's shortest chunk
}

var defaultTuning = tuning{quantum: 64, itemsPerWorker: 4, queryBlock: 16, keyTile: 64, minSplit: 256}

// make fills p for b. Work is counted in items: the new-token chunks of
// extend requests give one item per query block and KV group; the prefix
// (the whole sequence in Decode) is then cut just finely enough that the
// items reach itemsPerWorker·workers, in chunks of a multiple of quantum
// (SplitWhenIdle: only when the items fall short, and never below minSplit).
func (p *plan) make(b *forward.Batch, policy Policy, tn tuning, workers int) {
	n := b.NumReqs()
	p.mode = b.Mode
	p.prefixLens = append(p.prefixLens[:0], b.PrefixLens...)
	p.extendLens = append(p.extendLens[:0], b.ExtendLens...)
	p.reqs = slices.Grow(p.reqs[:0], n)[:n]
	p.tasks = p.tasks[:0]
	p.merges = p.merges[:0]
	p.partUnits = 0

	kvHeads := 1
	if b.KV != nil {
		kvHeads = b.KV.Pool.Spec.NumKVHeads
	}
	perItem := kvHeadsPerItem(b, kvHeads)
	p.allHeads = perItem > 1
	groups := int64(kvHeads / perItem)
	p.queryBlock = max(1, tn.queryBlock/perItem)

	var baseItems, items, prefixWork int64
	start := 0
	for r := range n {
		prefix, ext := int(b.PrefixLens[r]), int(b.ExtendLens[r])
		rp := &p.reqs[r]
		*rp = reqPlan{start: start, seqLen: prefix + ext, split: prefix, partOff: -1}
		start += ext
		if b.Mode == forward.Decode || policy == SplitWhenIdle {
			rp.split = rp.seqLen
		}
		blocks := int64(ceilDiv(ext, p.queryBlock))
		items += blocks * groups
		if rp.split < rp.seqLen {
			baseItems += blocks * groups
		}
		prefixWork += blocks * groups * int64(rp.split)
	}

	// chunkLen 0: one prefix chunk per request, the items are plentiful.
	target := int64(tn.itemsPerWorker * workers)
	chunkLen := 0
	switch {
	case workers <= 1 || prefixWork == 0:
	case policy == SplitPrefix && target > baseItems:
		chunkLen = roundUp(int(ceilDiv64(prefixWork, target-baseItems)), tn.quantum)
	case policy == SplitWhenIdle && target > items:
		chunkLen = roundUp(max(tn.minSplit, int(ceilDiv64(prefixWork, target))), tn.quantum)
	}

	for r := range n {
		rp := &p.reqs[r]
		ext := int(b.ExtendLens[r])
		if ext == 0 { // in the batch with nothing to compute: no chunks
			continue
		}
		if rp.split > 0 {
			rp.nSplit = 1
			if chunkLen > 0 {
				rp.nSplit = ceilDiv(rp.split, chunkLen)
			}
		}
		rp.chunks = rp.nSplit
		if rp.split < rp.seqLen {
			rp.chunks++
		}
		if rp.chunks > 1 {
			rp.partOff = p.partUnits
			p.partUnits += ext * rp.chunks
			for t := range ext {
				p.merges = append(p.merges, mergeAt{int32(r), int32(t)})
			}
		}
		prefix := rp.seqLen - ext
		for t0 := 0; t0 < ext; t0 += p.queryBlock {
			t1 := min(ext, t0+p.queryBlock)
			q := int64(t1 - t0)
			// The block sees about min(split, prefix+t1) keys of the prefix
			// chunks (causal under SplitWhenIdle), shared among them.
			prefixChunk := int64(ceilDiv(min(rp.split, prefix+t1), max(rp.nSplit, 1)))
			for c := range rp.chunks {
				cost := q * prefixChunk
				if c == rp.nSplit { // new tokens: causal, so the block sees about t1 of them
					cost = q * int64(t1)
				}
				p.tasks = append(p.tasks, task{req: int32(r), t0: int32(t0), t1: int32(t1), chunk: int32(c), cost: cost})
			}
		}
	}
	slices.SortStableFunc(p.tasks, func(a, b task) int {
		switch {
		case a.cost > b.cost:
			return -1
		case a.cost < b.cost:
			return 1
		}
		return 0
	})
}

func ceilDiv(a, b int) int        { return (a + b - 1) / b }
func ceilDiv64(a, b int64) int64  { return (a + b - 1) / b }
func roundUp(a, multiple int) int { return ceilDiv(max(a, 1), multiple) * multiple }
