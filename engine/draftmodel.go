package engine

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	modelregistry "github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/spec"
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
	if err := d.setRunner(plan, m.AttentionLayers(), e.log); err != nil {
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

// propose drafts a tree for each request within its limit; a request for
// which the draft cache has no room gets a root-only tree. The trees grow
// in the runner (runner.DraftTree); this schedules the forwards.
func (d *draftModel) propose(e *Engine, reqs []*request, limits []spec.Limit) ([]spec.Tree, error) {
	trees := make([]spec.Tree, len(reqs))
	grow := make([]*runner.DraftTree, len(reqs))
	var active []int // requests with room in the draft cache
	for i, r := range reqs {
		all := r.Tokens
		trees[i] = spec.NewTree(all[len(all)-1])
		grow[i] = runner.NewDraftTree(all[len(all)-1])
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
	for k, i := range active {
		grow[i].ExpandRoot(logits, k, d.cfg.TopK, nil)
	}
	for level := 2; ; level++ {
		var batch []int
		for _, i := range active {
			if level <= limits[i].MaxDepth && len(grow[i].Frontier) > 0 {
				batch = append(batch, i)
			}
		}
		if len(batch) == 0 {
			break
		}
		// Forward the frontier (nodes of level-1) at scratch slots past
		// the request's draft tokens (runner.AppendDraftLevel).
		b := &forward.Batch{Mode: forward.DraftExtend, KV: d.kv}
		batchTrees := make([]*runner.DraftTree, len(batch))
		for k, i := range batch {
			r := reqs[i]
			runner.AppendDraftLevel(b, r.spec.draftSeq.Row, d.kv.Table.Row(r.spec.draftSeq.Row), r.spec.draftLen, level, grow[i])
			batchTrees[k] = grow[i]
		}
		if d.cfg.TopK > 1 {
			runner.AttachDraftMasks(b, batchTrees)
		} else if len(b.InputIDs) == len(batch) {
			b.Mode = forward.Decode // a chain: one token each, causal
		}
		logits, err := d.forward(b)
		if err != nil {
			return nil, err
		}
		row := 0
		for _, i := range batch {
			rows := rowRange(row, len(grow[i].Frontier))
			row += len(rows)
			grow[i].Expand(logits, rows, d.cfg.TopK, nil)
		}
	}
	for _, i := range active {
		trees[i] = grow[i].Pick(d.cfg.NumDraftTokens)
	}
	return trees, nil
}

// forward runs the draft model on b through its runner, which returns
// the logits where runner.DraftTree.Expand reads them.
func (d *draftModel) forward(b *forward.Batch) (runner.DraftLogits, error) {
	logits, _, err := d.rn.Forward(b, d.cfg.TopK, func(attn attention.Backend) (runner.DraftOut, error) {
		l, err := d.model.Forward(b, attn)
		return runner.DraftOut{Logits: l}, err
	})
	return logits, err
}
