package engine

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/eagle"
	"github.com/gosling-ai/gosling/spec"
	"github.com/gosling-ai/gosling/tensor"
)

// eagleDrafter is EAGLE and EAGLE-3 speculative decoding's drafter: a
// head (model/eagle) fed the target's hidden states. Entry j of a
// request in the head's cache pairs the target's features of token j
// with token j+1 and sits at position j; its output drafts token j+2 and
// is the state a next draft step feeds back in place of the features.
//
// The head's KV lives under the target's own slots (SGLang's layout): its
// pool has the target's slots and page size and the cache shares the
// target's allocator and request table, so entry j is at the slot of
// token j. A prefix the radix cache hands a request brings the head's
// entries with it (its last entry may pair the prefix with the token
// that followed it in the request that cached it; that costs acceptance,
// never output, since the target verifies every draft), and compaction
// needs nothing: the accepted path's entries are recomputed from the
// verify step's features at the next catch-up.
//
// Per step: catch-up, one DraftExtend over every request's features not
// yet in the cache (r.spec.eagleFeat, positions r.spec.eagleFrom on; the target's
// prefill chunks, decode steps and verified paths append to them), whose
// last row gives the first level of the tree; then levels 2..NumSteps as
// the draft model's: the TopK best nodes of a level, each fed its
// parent's output state, at scratch slots past the request's tokens.
type eagleDrafter struct {
	// drafterModel's device is the target's: the head reads its
	// embedding and lm_head.
	drafterModel
	head   *eagle.Head
	target model.HiddenCapture
	cfg    spec.Config
	width  int // the target's features per token
	// keeps are the step's rows of the target's features to keep (flush).
	keeps []featKeep
	// caughtUp and drafted, when set (tests), see each request's
	// catch-up logits row, and each tree node's with the tokens of its
	// path from the first level down to it.
	caughtUp func(r *request, logits []float32)
	drafted  func(r *request, path []int, logits []float32)
}

func (e *Engine) newEagleDrafter(sc spec.Config) (*eagleDrafter, error) {
	target, ok := e.model.(model.HiddenCapture)
	if !ok {
		return nil, fmt.Errorf("--speculative-algorithm %s: the target's architecture %s cannot hand its hidden states to a head; EAGLE heads need a Llama-family target",
			sc.Algorithm, e.model.Config().Architecture)
	}
	ck, err := model.Open(sc.DraftModelPath)
	if err != nil {
		return nil, fmt.Errorf("--speculative-draft-model-path: %w", err)
	}
	want := map[spec.Algorithm]string{spec.Eagle: eagle.ArchEagle, spec.Eagle3: eagle.ArchEagle3}[sc.Algorithm]
	if ck.Config.Architecture != want {
		ck.Close()
		return nil, fmt.Errorf("--speculative-algorithm %s needs a %s head, but --speculative-draft-model-path %s is %s (config.json architectures)",
			sc.Algorithm, want, sc.DraftModelPath, ck.Config.Architecture)
	}
	d := &eagleDrafter{drafterModel: drafterModel{ck: ck}, target: target, cfg: sc}
	if err := e.openDrafter(&d.drafterModel, func() error { return d.init(e) }); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *eagleDrafter) init(e *Engine) error {
	var err error
	if d.head, err = eagle.Load(d.ck, d.dev.ops, struct {
		model.HiddenCapture
		configOf
	}{d.target, configOf{e.model}}); err != nil {
		return fmt.Errorf("--speculative-draft-model-path: %w", err)
	}
	if err := d.target.SetCapture(d.head.CapturePoints()); err != nil {
		return fmt.Errorf("--speculative-draft-model-path %s: %w", d.ck.Path, err)
	}
	d.width = d.head.FeatureWidth()
	plan, _, err := e.draftAttention(d.head.AttentionLayers())
	if err != nil {
		return fmt.Errorf("EAGLE head: %w", err)
	}
	kvSpec := d.head.KVSpec()
	kvSpec.DType = plan.KVDType
	pool, err := d.dev.pool(kvSpec, e.kv.Pool.NumSlots, e.cfg.PageSize)
	if err != nil {
		return fmt.Errorf("EAGLE head KV cache: %w", err)
	}
	d.kv = &kvcache.Cache{Alloc: e.kv.Alloc, Table: e.kv.Table, Pool: pool}
	if err := d.setRunner(plan, d.head.AttentionLayers(), e.log); err != nil {
		return fmt.Errorf("EAGLE head: %w", err)
	}
	e.log.Info("EAGLE head loaded", "path", d.ck.Path, "architecture", d.ck.Config.Architecture, "device", d.dev.rt.Name(),
		"target_capture_points", d.head.CapturePoints(), "draft_vocab", d.head.DraftVocab(), "attention_backend", d.rn.Attention().Name())
	return nil
}

// configOf gives eagle.Target the target's Config beside its capture.
type configOf struct{ m model.Runnable }

func (c configOf) Config() *model.Config { return c.m.Config() }

// release drops r's pending features (r finished or was retracted; a
// re-admitted request's prefill captures them again).
func (d *eagleDrafter) release(r *request) { r.spec.eagleFeat, r.spec.eagleFrom = nil, 0 }

// featKeep is a request's rows of the target's latest features to keep:
// they hold its tokens from position pos on.
type featKeep struct {
	r    *request
	pos  int
	rows []int
}

// keep records that rows of the target's features of this step hold r's
// tokens from position pos on; flush copies them.
func (d *eagleDrafter) keep(r *request, pos int, rows ...int) {
	d.keeps = append(d.keeps, featKeep{r: r, pos: pos, rows: rows})
}

// flush appends the rows keep recorded, out of the target's latest
// features, to each request's pending ones. On a device the rows are
// gathered there and only they cross to the host: the accepted paths of a
// verify step, not its rejected and padding nodes. It runs after the
// step's acceptances, before any other forward recycles the features'
// memory. Features that do not follow a request's pending ones (one
// re-admitted from the radix cache) replace them.
func (d *eagleDrafter) flush() error {
	keeps := d.keeps
	d.keeps = d.keeps[:0]
	var rows []int32
	for _, k := range keeps {
		for _, row := range k.rows {
			rows = append(rows, int32(row))
		}
	}
	if len(rows) == 0 {
		return nil
	}
	var feats tensor.Host
	err := d.dev.rt.Run(func() (err error) {
		c := d.target.Captured()
		if feats, err = c.Host(); err == nil {
			return nil
		}
		feats, err = d.dev.ops.ToHost(d.dev.ops.GatherRows(c, rows)).Host()
		for i := range rows {
			rows[i] = int32(i)
		}
		return err
	})
	if err != nil {
		return err
	}
	at := 0
	for _, k := range keeps {
		r := k.r
		if r.Seq == nil { // finished in this step
			at += len(k.rows)
			continue
		}
		if len(r.spec.eagleFeat) == 0 || r.spec.eagleFrom+len(r.spec.eagleFeat)/d.width != k.pos {
			r.spec.eagleFeat, r.spec.eagleFrom = r.spec.eagleFeat[:0], k.pos
		}
		for range k.rows {
			r.spec.eagleFeat = append(r.spec.eagleFeat, feats.Row(int(rows[at]))...)
			at++
		}
	}
	return nil
}

// catchUp runs every request's pending features through the head and
// returns, for each request of reqs that had any, the row of its last
// entry (the tree's first level; -1 for none) in logits and hidden.
func (d *eagleDrafter) catchUp(reqs []*request) (logits runner.DraftLogits, hidden tensor.Host, rows []int, err error) {
	rows = make([]int, len(reqs))
	b := &forward.Batch{Mode: forward.DraftExtend, KV: d.kv}
	var feats []float32
	for i, r := range reqs {
		rows[i] = -1
		n := len(r.spec.eagleFeat) / d.width
		// Entry j needs token j+1: a prefill's features end before the
		// next chunk's first token, a decoder's at its newest token.
		if n == 0 || r.spec.eagleFrom+n >= len(r.Tokens) || r.Seq == nil {
			continue
		}
		slots := d.kv.Table.Row(r.Seq.Row)
		b.ReqRows = append(b.ReqRows, int32(r.Seq.Row))
		b.PrefixLens = append(b.PrefixLens, int32(r.spec.eagleFrom))
		b.ExtendLens = append(b.ExtendLens, int32(n))
		for j := r.spec.eagleFrom; j < r.spec.eagleFrom+n; j++ {
			b.InputIDs = append(b.InputIDs, int32(r.Tokens[j+1]))
			b.Positions = append(b.Positions, int32(j))
			b.OutSlots = append(b.OutSlots, slots[j])
		}
		rows[i] = len(b.LogitRows)
		b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)-1))
		feats = append(feats, r.spec.eagleFeat...)
		r.spec.eagleFrom, r.spec.eagleFeat = r.spec.eagleFrom+n, r.spec.eagleFeat[:0]
	}
	if b.NumReqs() == 0 {
		return runner.DraftLogits{}, tensor.Host{}, rows, nil
	}
	logits, hidden, err = d.forward(b, feats, d.width)
	return logits, hidden, rows, err
}

// forward runs the head on b with feats (host, width values per token)
// beside its tokens through its runner, which returns the logits where
// runner.DraftTree.Expand reads them and the output states on the host.
// Padding tokens (a batch padded for a graph) get zero features.
func (d *eagleDrafter) forward(b *forward.Batch, feats []float32, width int) (runner.DraftLogits, tensor.Host, error) {
	return d.rn.Forward(b, d.cfg.TopK, func(attn attention.Backend) (runner.DraftOut, error) {
		n := b.NumTokens()
		padded := append(feats, make([]float32, n*width-len(feats))...)
		l, h, err := d.head.Forward(b, attn, tensor.From(padded, n, width))
		return runner.DraftOut{Logits: l, Hidden: h}, err
	})
}

// propose catches every running request up, then drafts a tree for each
// of reqs within its limit. Scratch slots for the tree's levels are
// reserved in the target's sequence; a request without room (or without
// features) gets a root-only tree.
func (d *eagleDrafter) propose(e *Engine, running, reqs []*request, limits []spec.Limit) ([]spec.Tree, error) {
	var all []*request // every request with features to catch up on
	for _, r := range running {
		if len(r.spec.eagleFeat) > 0 {
			all = append(all, r)
		}
	}
	logits, hidden, rows, err := d.catchUp(all)
	if err != nil {
		return nil, err
	}
	rowOf := make(map[*request]int, len(all))
	for i, r := range all {
		rowOf[r] = rows[i]
		if d.caughtUp != nil && rows[i] >= 0 && logits.IDs == nil {
			d.caughtUp(r, logits.Host.Row(rows[i]))
		}
	}
	trees := make([]spec.Tree, len(reqs))
	grow := make([]*runner.DraftTree, len(reqs))
	state := make([][][]float32, len(reqs)) // per node, the output state it is fed
	id := d.head.TargetToken
	for i, r := range reqs {
		root := r.Tokens[len(r.Tokens)-1]
		trees[i] = spec.NewTree(root)
		grow[i] = runner.NewDraftTree(root)
		row, ok := rowOf[r]
		if !ok || row < 0 || r.spec.eagleFrom != r.Computed {
			continue
		}
		// Levels 2.. are forwarded at slots past the request's tokens.
		if ok, err := e.sched.Reserve(r.Seq, r.Computed+(limits[i].MaxDepth-1)*d.cfg.TopK); err != nil || !ok {
			continue
		}
		grow[i].ExpandRoot(logits, row, d.cfg.TopK, id)
		state[i] = d.states(state[i], grow[i].Nodes, hidden)
	}
	for level := 2; ; level++ {
		var batch []int
		for i := range reqs {
			if level <= limits[i].MaxDepth && len(grow[i].Frontier) > 0 {
				batch = append(batch, i)
			}
		}
		if len(batch) == 0 {
			break
		}
		// Node n of the frontier (level-1) pairs its parent's state with
		// its token (runner.AppendDraftLevel: the root at Computed-1).
		b := &forward.Batch{Mode: forward.DraftExtend, KV: d.kv}
		var feats []float32
		batchTrees := make([]*runner.DraftTree, len(batch))
		for k, i := range batch {
			r := reqs[i]
			runner.AppendDraftLevel(b, r.Seq.Row, d.kv.Table.Row(r.Seq.Row), r.Computed, level, grow[i])
			batchTrees[k] = grow[i]
			for _, n := range grow[i].Frontier {
				feats = append(feats, state[i][n]...)
			}
		}
		runner.AttachDraftMasks(b, batchTrees)
		logits, hidden, err := d.forward(b, feats, d.head.Config().HiddenSize)
		if err != nil {
			return nil, err
		}
		row := 0
		for _, i := range batch {
			rows := rowRange(row, len(grow[i].Frontier))
			row += len(rows)
			if d.drafted != nil && logits.IDs == nil {
				for k, n := range grow[i].Frontier {
					d.drafted(reqs[i], grow[i].Path(n), logits.Host.Row(rows[k]))
				}
			}
			grow[i].Expand(logits, rows, d.cfg.TopK, id)
			state[i] = d.states(state[i], grow[i].Nodes, hidden)
		}
	}
	for i := range reqs {
		if len(grow[i].Nodes) > 1 {
			trees[i] = grow[i].Pick(d.cfg.NumDraftTokens)
		}
	}
	return trees, nil
}

// states extends state to every node of nodes with the output state of
// the row it was drawn from.
func (d *eagleDrafter) states(state [][]float32, nodes []runner.DraftNode, hidden tensor.Host) [][]float32 {
	for n := len(state); n < len(nodes); n++ {
		var s []float32
		if n > 0 {
			s = hidden.Row(nodes[n].Row)
		}
		state = append(state, s)
	}
	return state
}

// rowRange is first, first+1, …, first+n−1.
func rowRange(first, n int) []int {
	rows := make([]int, n)
	for i := range rows {
		rows[i] = first + i
	}
	return rows
}
