package runner

import (
	"slices"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/spec"
)

// addImageInputs adds request r's image embeddings and bidirectional
// spans for its new tokens [from, from+n), which sit at batch rows
// start.. of batch request req.
func addImageInputs[R Request](b *forward.Batch, r R, req, start, from, n int) {
	for i := range r.NumImages() {
		span, embeds := r.Image(i)
		lo, hi := max(from, span.Start), min(from+n, span.Start+span.Len)
		if lo >= hi {
			continue
		}
		width := len(embeds) / span.Len
		for t := lo; t < hi; t++ {
			b.EmbedRows = append(b.EmbedRows, int32(start+t-from))
			off := (t - span.Start) * width
			b.EmbedData = append(b.EmbedData, embeds[off:off+width]...)
		}
	}
	for _, s := range r.Sched().Spans {
		if s[1] > from && s[0] < from+n {
			b.Spans = append(b.Spans, forward.Span{Req: int32(req), Start: int32(s[0]), End: int32(s[1])})
		}
	}
}

// fillMRope gives every token of a batch that holds an M-RoPE request its
// three position streams (text-only requests: three equal ones). plans
// are (request, first new token, count) in batch order.
func fillMRope[R Request](b *forward.Batch, reqs []R, froms, counts []int) {
	need := false
	for _, r := range reqs {
		streams, _ := r.MRope()
		need = need || streams != nil
	}
	if !need {
		return
	}
	total := len(b.InputIDs)
	b.MRopePositions = make([]int32, 3*total)
	row := 0
	for k, r := range reqs {
		nPrompt := r.Sched().NumPrompt
		mrope, delta := r.MRope()
		for i := froms[k]; i < froms[k]+counts[k]; i++ {
			for s := range 3 {
				p := int32(i + delta)
				if mrope != nil && i < nPrompt {
					p = mrope[s*nPrompt+i]
				}
				b.MRopePositions[s*total+row] = p
			}
			row++
		}
	}
}

// AppendTree adds a request's tree to a verify batch: node i is the token
// at sequence index computed+i (its KV slot) and RoPE position
// computed+depth(i); every node gets a logits row, in order.
func AppendTree(b *forward.Batch, slots []int32, computed int, t *spec.Tree) {
	depth := make([]int, t.Len())
	for i, tok := range t.Tokens {
		if i > 0 {
			depth[i] = depth[t.Parents[i]] + 1
		}
		b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
		b.InputIDs = append(b.InputIDs, int32(tok))
		b.Positions = append(b.Positions, int32(computed+depth[i]))
		b.OutSlots = append(b.OutSlots, slots[computed+i])
	}
}

// AttachTreeMasks gives each branching tree its mask (trees[r] is batch
// request r's, nil for a request without one); chains and plain requests
// stay causal (MaskStarts -1), which for a chain is the same.
func AttachTreeMasks(b *forward.Batch, trees []*spec.Tree) {
	if !slices.ContainsFunc(trees, func(t *spec.Tree) bool { return t != nil && !t.IsChain() }) {
		return
	}
	b.CustomMask = []bool{}
	for r, t := range trees {
		if t == nil || t.IsChain() {
			b.MaskStarts = append(b.MaskStarts, -1)
			continue
		}
		b.MaskStarts = append(b.MaskStarts, int32(len(b.CustomMask)))
		b.CustomMask = t.AppendMask(b.CustomMask, int(b.PrefixLens[r]))
	}
}
