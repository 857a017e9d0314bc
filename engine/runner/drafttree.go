package runner

import (
	"cmp"
	"slices"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// Tree expansion, shared by the model drafters (a STANDALONE draft model,
// an EAGLE head): a request's tree grows a level per draft forward. The
// root's children come from the catch-up forward's last row; then, per
// level, the TopK best nodes of the level before (the frontier) are
// forwarded, each is given its TopK most likely children, and the TopK
// best of those by cumulative log-probability form the next frontier.
// Pick keeps the NumDraftTokens−1 best nodes of all levels: a node never
// scores above its parent, so the set keeps every kept node's ancestors.
//
// The frontier's nodes sit in the drafter's KV at scratch slots past the
// request's tokens: node n at sequence index base+n−1 (the root, the
// request's newest token, at base−1), at position base+level−2 for the
// nodes of level level−1 forwarded to grow level level.

// DraftNode is a node of a growing tree with its score, the sum of the
// drafter's log-probabilities along its path.
type DraftNode struct {
	Parent, Token int
	Score         float64
	Row           int // the logits row it was drawn from (an EAGLE head feeds that row's state to it)
}

// DraftTree is one request's tree as a drafter grows it: Nodes[0] is the
// root; Frontier the nodes the next level expands (consecutive, in
// order), empty before the root is expanded and once the tree is done.
type DraftTree struct {
	Nodes    []DraftNode
	Frontier []int
}

// NewDraftTree is a tree of root alone.
func NewDraftTree(root int) *DraftTree {
	return &DraftTree{Nodes: []DraftNode{{Parent: -1, Token: root}}}
}

// DraftLogits are a drafter forward's logits as Expand reads them: the
// rows on the host, or, for a drafter that expands one child per node
// (TopK 1) on a device, each row's argmax alone, drawn there. A chain
// needs no scores: Pick keeps all of its nodes.
type DraftLogits struct {
	Host tensor.Host
	IDs  []int // per row, its argmax; nil: read Host
}

// ExpandRoot gives the root its children from logits row row.
func (t *DraftTree) ExpandRoot(logits DraftLogits, row, topK int, id func(int) int) {
	t.Frontier = []int{0}
	t.Expand(logits, []int{row}, topK, id)
}

// Expand gives each frontier node (logits row rows[k]) its topK most
// likely children and makes the topK best of all of them the next
// frontier, appended to Nodes. id maps a logits column to a target token
// id (nil: the same). With logits as argmax ids (topK 1), each child
// keeps its parent's score.
func (t *DraftTree) Expand(logits DraftLogits, rows []int, topK int, id func(int) int) {
	var cands []DraftNode
	add := func(n, tok int, logprob float64, row int) {
		if id != nil {
			tok = id(tok)
		}
		cands = append(cands, DraftNode{Parent: n, Token: tok, Score: t.Nodes[n].Score + logprob, Row: row})
	}
	var lp []float32
	for k, n := range t.Frontier {
		if logits.IDs != nil {
			add(n, logits.IDs[rows[k]], 0, rows[k])
			continue
		}
		if lp == nil {
			lp = make([]float32, logits.Host.Cols())
		}
		sample.LogSoftmax(logits.Host.Row(rows[k]), lp)
		for _, c := range sample.TopN(lp, topK) {
			add(n, c.ID, float64(c.Logprob), rows[k])
		}
	}
	// Best first; ties to the earlier candidate, so greedy ties follow
	// the lowest id as the target's argmax does.
	slices.SortStableFunc(cands, func(a, b DraftNode) int { return cmp.Compare(b.Score, a.Score) })
	t.Frontier = t.Frontier[:0:0]
	for _, c := range cands[:min(len(cands), topK)] {
		t.Nodes = append(t.Nodes, c)
		t.Frontier = append(t.Frontier, len(t.Nodes)-1)
	}
}

// Pick is the tree of the numDraftTokens−1 best-scoring nodes (ancestors
// score at least as high, and win ties by coming first), in node order.
func (t *DraftTree) Pick(numDraftTokens int) spec.Tree {
	nodes := t.Nodes
	order := make([]int, len(nodes)-1)
	for i := range order {
		order[i] = i + 1
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(nodes[b].Score, nodes[a].Score) })
	keep := make([]bool, len(nodes))
	keep[0] = true
	for _, n := range order[:min(len(order), numDraftTokens-1)] {
		keep[n] = true
	}
	tree := spec.NewTree(nodes[0].Token)
	index := make([]int, len(nodes))
	for n := 1; n < len(nodes); n++ {
		if keep[n] && keep[nodes[n].Parent] {
			index[n] = tree.Add(index[nodes[n].Parent], nodes[n].Token)
		} else {
			keep[n] = false
		}
	}
	return tree
}

// Path is the tokens from the first level down to node n.
func (t *DraftTree) Path(n int) []int {
	var out []int
	for ; n > 0; n = t.Nodes[n].Parent {
		out = append(out, t.Nodes[n].Token)
	}
	slices.Reverse(out)
	return out
}

// AppendDraftLevel appends t's frontier (the nodes of level−1) to b as one
// request of a DraftExtend over table row row (slots: that row's),
// whose root sits at sequence index base−1: node n at slot base+n−1 and
// position base+level−2, a logits row each.
func AppendDraftLevel(b *forward.Batch, row int, slots []int32, base, level int, t *DraftTree) {
	first := t.Frontier[0]
	b.ReqRows = append(b.ReqRows, int32(row))
	b.PrefixLens = append(b.PrefixLens, int32(base+first-1))
	b.ExtendLens = append(b.ExtendLens, int32(len(t.Frontier)))
	for _, n := range t.Frontier {
		b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
		b.InputIDs = append(b.InputIDs, int32(t.Nodes[n].Token))
		b.Positions = append(b.Positions, int32(base+level-2))
		b.OutSlots = append(b.OutSlots, slots[base+n-1])
	}
}

// AttachDraftMasks gives b's requests (trees[r] is request r's, appended
// by AppendDraftLevel) their masks: a frontier node attends the
// request's tokens and its own ancestors in the tree, not its siblings'.
func AttachDraftMasks(b *forward.Batch, trees []*DraftTree) {
	b.CustomMask = []bool{}
	b.MaskStarts = b.MaskStarts[:0]
	for r, t := range trees {
		b.MaskStarts = append(b.MaskStarts, int32(len(b.CustomMask)))
		seqLen := b.SeqLen(r)
		prefix := int(b.PrefixLens[r]) - (t.Frontier[0] - 1) // the request's own tokens: base
		for _, n := range t.Frontier {
			row := make([]bool, seqLen)
			for j := range prefix {
				row[j] = true
			}
			for m := n; m > 0; m = t.Nodes[m].Parent {
				row[prefix+m-1] = true
			}
			b.CustomMask = append(b.CustomMask, row...)
		}
	}
}
