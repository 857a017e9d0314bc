package engine

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	modelregistry "github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// draftModel is STANDALONE speculative decoding's drafter: a smaller model
// with the target's vocabulary, its own KV cache (no prefix sharing) and
// its own attention backend of the target's choice, on the target's
// device (drafterDevice). Each step it catches
// up on the tokens the target accepted (one DraftExtend forward over every
// request), then expands a tree for NumSteps levels: at each level the
// TopK best nodes of the level before are each given their TopK most
// likely children, and the TopK best of those by cumulative log-probability
// form the next level. The NumDraftTokens−1 best nodes over all levels are
// drafted (a node never scores above its parent, so the set keeps every
// kept node's ancestors).
//
// The draft cache holds, per request, Tokens[:draftLen]; the tree's
// own KV past it is scratch, overwritten by the next step's catch-up. The
// draft sees token ids only: an image's placeholder tokens reach it as
// text, which costs acceptance, never correctness (the target verifies).
type draftModel struct {
	drafterModel
	model model.Runnable
	cfg   spec.Config
	// swa: the draft has windowed layers, so trees are verified as chains
	// (speculator.chainOnly).
	swa bool
}

func (e *Engine) newDraftModel(sc spec.Config) (*draftModel, error) {
	// --load-format applies to the draft as to the target (as in SGLang):
	// with dummy, a config.json gives the draft random weights of its
	// shapes, drawn from the tensors' names, so a draft of the target's
	// config is the target (self-drafting on a benchmark's dummy model).
	ck, err := openCheckpoint(Config{ModelPath: sc.DraftModelPath, LoadFormat: e.cfg.LoadFormat, DType: e.cfg.DType})
	if err != nil {
		return nil, fmt.Errorf("--speculative-draft-model-path: %w", err)
	}
	d := &draftModel{drafterModel: drafterModel{ck: ck}, cfg: sc}
	if err := e.openDrafter(&d.drafterModel, func() error { return d.init(e) }); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *draftModel) init(e *Engine) error {
	m, err := modelregistry.Build(d.ck, d.dev.ops)
	if err != nil {
		return fmt.Errorf("draft model %s: %w", d.ck.Path, err)
	}
	d.model = m
	if err := checkDraftVocabulary(e, d.ck, m.Config()); err != nil {
		return err
	}
	plan, need, err := e.draftAttention(m.AttentionLayers())
	if err != nil {
		return fmt.Errorf("draft model: %w", err)
	}
	d.swa = need.SlidingWindow
	kvSpec := m.KVSpec()
	kvSpec.DType = plan.KVDType
	kvSpec.SWATokens = 0 // windowed layers keep every token: no window region to manage
	// As many tokens as the target's cache: every running request may
	// keep its whole context in the draft cache too. On a GPU, at most
	// what half the memory left after the draft's weights holds (the
	// rest is the forwards'): a request the draft cache has no room for
	// is verified without drafts (propose).
	tokens := e.cfg.KVCacheTokens + e.cfg.MaxRunningRequests*d.cfg.NumDraftTokens
	if mi, ok := d.dev.rt.(device.MemoryInfo); ok {
		free, _, err := mi.MemInfo()
		if err != nil {
			return fmt.Errorf("draft model KV cache: %w", err)
		}
		if fit := int(free / 2 / int64(max(kvSpec.BytesPerToken(), 1))); fit < tokens {
			if fit < e.cfg.ContextLength {
				return fmt.Errorf("draft model KV cache: the GPU has %d MiB free after the draft's weights, room for %d tokens, fewer than --context-length %d; lower --mem-fraction-static",
					free>>20, fit, e.cfg.ContextLength)
			}
			e.log.Warn("draft model KV cache smaller than the target's", "tokens", fit, "target_tokens", e.cfg.KVCacheTokens)
			tokens = fit
		}
	}
	if d.kv, err = kvcache.NewCacheWithPool(kvSpec, e.cfg.PageSize, tokens, e.cfg.MaxRunningRequests, e.cfg.ContextLength, d.dev.pool); err != nil {
		return fmt.Errorf("draft model KV cache: %w", err)
	}
	if err := d.setRunner(plan, m.AttentionLayers()); err != nil {
		return fmt.Errorf("draft model: %w", err)
	}
	e.log.Info("draft model loaded", "path", d.ck.Path, "architecture", m.Config().Architecture,
		"layers", m.Config().NumLayers, "hidden", m.Config().HiddenSize, "device", d.dev.rt.Name(),
		"kv_cache_tokens", tokens, "attention_backend", d.rn.Attention().Name())
	return nil
}

// draftAttention resolves a drafter's attention (on the target's device)
// as the target's flags choose it.
func (e *Engine) draftAttention(layers []attention.Layer) (*attention.Resolution, attention.Need, error) {
	need := attentionNeed(e.cfg.Device, e.cfg.PageSize, layers, true)
	plan, err := registry.Resolve(attention.Choice{
		Backend: e.cfg.AttentionBackend, Prefill: e.cfg.PrefillBackend, Decode: e.cfg.DecodeBackend,
		SpeculativeMode: e.cfg.SpeculativeAttentionMode, PageSize: e.cfg.PageSize, PageSizeSet: true, KVDType: e.cfg.KVCacheDType,
	}, need)
	return plan, need, err
}

// checkDraftVocabulary: the draft's token ids must mean the target's.
func checkDraftVocabulary(e *Engine, ck *model.Checkpoint, mc *model.Config) error {
	if want := e.model.Config().VocabSize; mc.VocabSize != want {
		return fmt.Errorf("the draft model's vocabulary has %d tokens, the target's %d: --speculative-draft-model-path needs a model with the target's tokenizer", mc.VocabSize, want)
	}
	tok, err := LoadTokenizer(ck, "")
	if err != nil {
		return err
	}
	if tok == nil || e.tok == nil {
		e.log.Warn("the draft model's and the target's tokenizers cannot be compared (one has none); only the vocabulary sizes match",
			"draft", ck.Path)
		return nil
	}
	for id := range min(tok.VocabSize(), e.tok.VocabSize()) {
		if tok.TokenString(id) != e.tok.TokenString(id) {
			return fmt.Errorf("token %d is %q in the draft model's tokenizer but %q in the target's: --speculative-draft-model-path needs a model with the target's tokenizer",
				id, tok.TokenString(id), e.tok.TokenString(id))
		}
	}
	return nil
}

// release frees r's draft sequence (when r finishes or is retracted).
func (d *draftModel) release(r *request) {
	if r.spec.draftSeq != nil {
		d.kv.Release(r.spec.draftSeq)
		r.spec.draftSeq, r.spec.draftLen = nil, 0
	}
}

// draftNode is a node of a request's growing tree with its score, the
// sum of the draft's log-probabilities along its path.
type draftNode struct {
	parent, token int
	score         float64
	row           int // the logits row it was drawn from (EAGLE feeds that row's state to it)
}

// propose drafts a tree for each request within its limit; a request for
// which the draft cache has no room gets a root-only tree.
func (d *draftModel) propose(e *Engine, reqs []*request, limits []spec.Limit) ([]spec.Tree, error) {
	trees := make([]spec.Tree, len(reqs))
	nodes := make([][]draftNode, len(reqs)) // node 0: the root
	var active []int                        // requests with room in the draft cache
	for i, r := range reqs {
		all := r.Tokens
		trees[i] = spec.NewTree(all[len(all)-1])
		nodes[i] = []draftNode{{parent: -1, token: all[len(all)-1]}}
		if r.spec.draftSeq == nil {
			seq, ok := d.kv.NewSeq()
			if !ok {
				continue
			}
			r.spec.draftSeq, r.spec.draftLen = seq, 0
		}
		// The catch-up tokens plus the levels that are forwarded.
		if ok, err := d.kv.Grow(r.spec.draftSeq, len(all)+(limits[i].MaxDepth-1)*d.cfg.TopK); err != nil || !ok {
			d.release(r) // start over when there is room again
			continue
		}
		active = append(active, i)
	}
	if len(active) == 0 {
		return trees, nil
	}
	// Catch-up: the accepted tokens and the root, one DraftExtend.
	b := &forward.Batch{Mode: forward.DraftExtend, KV: d.kv}
	for _, i := range active {
		r := reqs[i]
		all := r.Tokens
		slots := d.kv.Table.Row(r.spec.draftSeq.Row)
		b.ReqRows = append(b.ReqRows, int32(r.spec.draftSeq.Row))
		b.PrefixLens = append(b.PrefixLens, int32(r.spec.draftLen))
		b.ExtendLens = append(b.ExtendLens, int32(len(all)-r.spec.draftLen))
		for j := r.spec.draftLen; j < len(all); j++ {
			b.InputIDs = append(b.InputIDs, int32(all[j]))
			b.Positions = append(b.Positions, int32(j))
			b.OutSlots = append(b.OutSlots, slots[j])
		}
		b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)-1))
		r.spec.draftLen = len(all)
	}
	logits, err := d.forward(b)
	if err != nil {
		return nil, err
	}
	frontier := make([][]int, len(reqs)) // per request, the nodes to expand next
	for k, i := range active {
		frontier[i] = expandNodes(&nodes[i], []int{0}, logits, []int{k}, d.cfg.TopK, nil)
	}
	for level := 2; ; level++ {
		var batch []int
		for _, i := range active {
			if level <= limits[i].MaxDepth && len(frontier[i]) > 0 {
				batch = append(batch, i)
			}
		}
		if len(batch) == 0 {
			break
		}
		// Forward the frontier (nodes of level-1): node n sits at draft
		// sequence index base+n-1, after the root at base-1.
		b := &forward.Batch{Mode: forward.DraftExtend, KV: d.kv}
		for _, i := range batch {
			r := reqs[i]
			base := r.spec.draftLen
			slots := d.kv.Table.Row(r.spec.draftSeq.Row)
			first := frontier[i][0] // frontier nodes are consecutive
			b.ReqRows = append(b.ReqRows, int32(r.spec.draftSeq.Row))
			b.PrefixLens = append(b.PrefixLens, int32(base+first-1))
			b.ExtendLens = append(b.ExtendLens, int32(len(frontier[i])))
			for _, n := range frontier[i] {
				b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
				b.InputIDs = append(b.InputIDs, int32(nodes[i][n].token))
				b.Positions = append(b.Positions, int32(base-1+level-1))
				b.OutSlots = append(b.OutSlots, slots[base+n-1])
			}
		}
		if d.cfg.TopK > 1 {
			attachDraftMasks(b, batch, frontier, nodes)
		} else if len(b.InputIDs) == len(batch) {
			b.Mode = forward.Decode // a chain: one token each, causal
		}
		logits, err := d.forward(b)
		if err != nil {
			return nil, err
		}
		row := 0
		for _, i := range batch {
			rows := make([]int, len(frontier[i]))
			for k := range rows {
				rows[k] = row + k
			}
			row += len(rows)
			frontier[i] = expandNodes(&nodes[i], frontier[i], logits, rows, d.cfg.TopK, nil)
		}
	}
	for _, i := range active {
		trees[i] = pickTree(nodes[i], d.cfg.NumDraftTokens)
	}
	return trees, nil
}

// forward runs the draft model on b through its runner, and returns
// the logits where expandNodes reads them (draftLogitsOf).
func (d *draftModel) forward(b *forward.Batch) (logits draftLogits, err error) {
	err = d.rn.Forward(b, func(attn attention.Backend) error {
		l, err := d.model.Forward(b, attn)
		if err == nil {
			logits, err = d.dev.draftLogitsOf(l, d.cfg.TopK)
		}
		return err
	})
	return logits, err
}

// draftLogits are a drafter forward's logits as expandNodes reads them:
// the rows on the host, or, for a drafter that expands one child per node
// (TopK 1) on a device, each row's argmax alone, drawn there. A chain
// needs no scores: pickTree keeps all of its NumSteps nodes.
type draftLogits struct {
	host tensor.Host
	ids  []int // per row, its argmax; nil: read host
}

// draftLogitsOf brings logits l where expandNodes reads them (on the
// device's thread): greedy ids from the device sampler (the lowest id on
// ties, as on the host) when l is on a device and topK is 1, else the
// rows on the host.
func (dd *drafterDevice) draftLogitsOf(l tensor.T, topK int) (draftLogits, error) {
	s, ok := dd.rt.(device.Sampler)
	if _, err := l.Device(); !ok || err != nil || topK != 1 {
		h, err := dd.toHost(l)
		return draftLogits{host: h}, err
	}
	rows := make([]device.SampleRow, l.Rows()) // temperature 0: argmax
	for i := range rows {
		rows[i].Row = i
	}
	got, err := s.Sample(l, rows)
	if err != nil {
		return draftLogits{}, err
	}
	ids := make([]int, len(got))
	for i, id := range got {
		ids[i] = int(id)
	}
	return draftLogits{ids: ids}, nil
}

// expandNodes gives each frontier node (logits row rows[k]) its topK
// most likely children and keeps the topK best of all of them as the next
// level, appended to nodes; it returns their indices. id maps a logits
// column to a target token id (nil: the same). With logits as argmax ids
// (topK 1), each child keeps its parent's score.
func expandNodes(nodes *[]draftNode, frontier []int, logits draftLogits, rows []int, topK int, id func(int) int) []int {
	var cands []draftNode
	add := func(n, tok int, logprob float64, row int) {
		if id != nil {
			tok = id(tok)
		}
		cands = append(cands, draftNode{parent: n, token: tok, score: (*nodes)[n].score + logprob, row: row})
	}
	var lp []float32
	for k, n := range frontier {
		if logits.ids != nil {
			add(n, logits.ids[rows[k]], 0, rows[k])
			continue
		}
		if lp == nil {
			lp = make([]float32, logits.host.Cols())
		}
		sample.LogSoftmax(logits.host.Row(rows[k]), lp)
		for _, t := range sample.TopN(lp, topK) {
			add(n, t.ID, float64(t.Logprob), rows[k])
		}
	}
	// Best first; ties to the earlier candidate, so greedy ties follow
	// the lowest id as the target's argmax does.
	slices.SortStableFunc(cands, func(a, b draftNode) int { return cmp.Compare(b.score, a.score) })
	next := make([]int, 0, topK)
	for _, c := range cands[:min(len(cands), topK)] {
		*nodes = append(*nodes, c)
		next = append(next, len(*nodes)-1)
	}
	return next
}

// pickTree keeps the numDraftTokens−1 best-scoring nodes (ancestors score
// at least as high, and win ties by coming first) as a tree in node order.
func pickTree(nodes []draftNode, numDraftTokens int) spec.Tree {
	order := make([]int, len(nodes)-1)
	for i := range order {
		order[i] = i + 1
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(nodes[b].score, nodes[a].score) })
	keep := make([]bool, len(nodes))
	keep[0] = true
	for _, n := range order[:min(len(order), numDraftTokens-1)] {
		keep[n] = true
	}
	tree := spec.NewTree(nodes[0].token)
	index := make([]int, len(nodes))
	for n := 1; n < len(nodes); n++ {
		if keep[n] && keep[nodes[n].parent] {
			index[n] = tree.Add(index[nodes[n].parent], nodes[n].token)
		} else {
			keep[n] = false
		}
	}
	return tree
}

// attachDraftMasks: a frontier node attends the request's tokens and its
// own ancestors in the draft tree (node m at key base+m−1).
func attachDraftMasks(b *forward.Batch, batch []int, frontier [][]int, nodes [][]draftNode) {
	b.CustomMask = []bool{}
	for r, i := range batch {
		b.MaskStarts = append(b.MaskStarts, int32(len(b.CustomMask)))
		seqLen := b.SeqLen(r)
		prefix := int(b.PrefixLens[r]) - (frontier[i][0] - 1) // the request's own tokens: base
		for _, n := range frontier[i] {
			row := make([]bool, seqLen)
			for j := range prefix {
				row[j] = true
			}
			for m := n; m > 0; m = nodes[i][m].parent {
				row[prefix+m-1] = true
			}
			b.CustomMask = append(b.CustomMask, row...)
		}
	}
}
