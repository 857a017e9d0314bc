package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/spec"
)

// Speculative decoding is a runner concern (ARCHITECTURE.md §7): before a
// step, a drafter proposes a token tree for each decoding request; the
// step's forward verifies every tree at once (mode TargetVerify, one
// custom mask per branching tree, through the same attention.Run); then,
// per request, the runner walks the tree with the request's sampler,
// compacts the accepted path's KV into consecutive slots and gives back
// the rest (runner.Runner.AcceptTree, its contract in
// engine/runner/accept.go). The scheduler only sees a request that
// advanced k tokens.
//
// A request's KV invariant is kept across a verify step: before it, the
// cache holds Tokens[:Computed] and the newest token (the tree's
// root) is uncomputed; after it, the root and the accepted drafts are
// computed and the newest token, the one drawn from the target at the last
// accepted node, is not.
//
// On a GPU the same steps run with the target's logits on the device: a
// greedy request's tree nodes are argmaxed there and only their ids reach
// AcceptTree (runner.Runner.Tokens); a sampled request's nodes are each
// decided there by the rejection sampling of sample.Sampler.Verify
// (device.SpecVerifier: the accepted child and the token come back), but
// for requests that need their logits on the host (logprobs,
// penalties), whose rows come to the host's sampler. The accepted
// path's KV moves by device copies on the work stream, ordered before
// the next forward (kvcache.Pool.MoveSlots). Verify steps replay CUDA
// graphs kept per (padded batch size, tokens per request)
// (runner.graphSize): padTrees gives every tree of such a step the same
// size, and a step whose requests drafted nothing is a plain decode that
// replays the decode graphs. The drafters run on the target's device
// (drafterDevice), their steps through graphs of their own where a
// step's shape allows (runner.Draft); a top-1 drafter reads only its
// rows' argmax there.

// speculator holds the drafter and the acceptance counters.
type speculator struct {
	cfg   spec.Config
	ngram *spec.NGramDrafter // NGRAM
	draft *draftModel        // STANDALONE
	eagle *eagleDrafter      // EAGLE, EAGLE3
	// chainOnly cuts trees to their first path. Attention's sliding window
	// is measured in sequence indices (attention.Visible), and so are the
	// M-RoPE positions of generated tokens (runner.Request.MRope); both equal tree
	// positions only along a chain, so models with windowed layers or a
	// vision tower verify chains, which stay exact.
	chainOnly bool

	steps    atomic.Int64 // request-steps that verified a tree
	drafted  atomic.Int64 // tree nodes verified in them, roots excluded
	accepted atomic.Int64 // drafted tokens accepted in them
}

// drafter is the model drafter's (nil for NGRAM).
func (s *speculator) drafter() *drafterModel {
	switch {
	case s.draft != nil:
		return &s.draft.drafterModel
	case s.eagle != nil:
		return &s.eagle.drafterModel
	}
	return nil
}

// SpecStats are speculative decoding's counters since the start.
type SpecStats struct {
	Algorithm string
	// VerifySteps counts one per request per step that verified drafts;
	// DraftedTokens the drafted tokens they verified (a tree's nodes less
	// its root, of which at most one path can be accepted) and
	// AcceptedTokens those accepted.
	VerifySteps, DraftedTokens, AcceptedTokens int
	// DeviceVerifiedNodes and HostVerifiedNodes count the tree nodes the
	// acceptance walks decided from the device's results (a greedy
	// request's argmax, a sampled one's device.SpecVerifier verdict: two
	// numbers a node cross) and on the host from the node's logits
	// (sample.Sampler.Verify: every node on a CPU; on a GPU those of
	// requests with logprobs or penalties, or of nodes with more drafted
	// children than device.MaxVerifyDrafts).
	DeviceVerifiedNodes, HostVerifiedNodes int
}

// AcceptLength is the mean number of tokens a verify step emitted: the
// accepted drafts plus the token drawn from the target (SGLang's
// spec_accept_length); 0 before any verify step.
func (s SpecStats) AcceptLength() float64 {
	if s.VerifySteps == 0 {
		return 0
	}
	return float64(s.AcceptedTokens+s.VerifySteps) / float64(s.VerifySteps)
}

// SpecStats returns the speculative-decoding counters (zero when off).
func (e *Engine) SpecStats() SpecStats {
	if e.spec == nil {
		return SpecStats{}
	}
	rc := e.rn.Counts()
	return SpecStats{Algorithm: string(e.spec.cfg.Algorithm),
		VerifySteps: int(e.spec.steps.Load()), DraftedTokens: int(e.spec.drafted.Load()), AcceptedTokens: int(e.spec.accepted.Load()),
		DeviceVerifiedNodes: rc.DeviceVerifiedNodes, HostVerifiedNodes: rc.HostVerifiedNodes}
}

// specConfig is the validated speculative settings of cfg.
func specConfig(cfg Config) (spec.Config, error) {
	return spec.Config{
		Algorithm:      spec.Algorithm(cfg.SpeculativeAlgorithm),
		DraftModelPath: cfg.SpeculativeDraftModelPath,
		NumSteps:       cfg.SpeculativeNumSteps,
		TopK:           cfg.SpeculativeEagleTopk,
		NumDraftTokens: cfg.SpeculativeNumDraftTokens,
	}.Normalize()
}

// initSpeculative sets up the drafter once the target model, its KV cache
// and its attention backend exist.
func (e *Engine) initSpeculative(sc spec.Config) error {
	if !sc.Enabled() {
		return nil
	}
	s := &speculator{cfg: sc, chainOnly: e.vision != nil}
	for _, l := range e.model.AttentionLayers() {
		s.chainOnly = s.chainOnly || l.SlidingWindow > 0
	}
	switch sc.Algorithm {
	case spec.NGram:
		s.ngram = spec.NewNGramDrafter(sc)
	case spec.Standalone:
		d, err := e.newDraftModel(sc)
		if err != nil {
			return err
		}
		s.draft = d
		e.sched.OnRelease = d.release // the draft's cache follows the target's
		// The draft's own tree steps window by sequence index too.
		s.chainOnly = s.chainOnly || d.swa
	case spec.Eagle, spec.Eagle3:
		if e.cfg.TPSize > 1 || e.cfg.NNodes > 1 {
			// The head reads the target's hidden states, which only rank
			// 0's forward would capture so far.
			return fmt.Errorf("--speculative-algorithm %s runs with one rank so far; drop --tp-size/--nnodes or use NGRAM", sc.Algorithm)
		}
		d, err := e.newEagleDrafter(sc)
		if err != nil {
			return err
		}
		s.eagle = d
		e.sched.OnRelease = d.release
	default:
		return fmt.Errorf("--speculative-algorithm %s is not implemented", sc.Algorithm)
	}
	if s.chainOnly && sc.TopK > 1 {
		e.log.Warn("this model verifies draft chains, not trees: --speculative-eagle-topk keeps only each node's first child",
			"reason", "sliding-window layers or M-RoPE (a vision tower)", "eagle_topk", sc.TopK)
	}
	e.spec = s
	c := &e.cfg
	c.SpeculativeAlgorithm = string(sc.Algorithm)
	c.SpeculativeNumSteps, c.SpeculativeEagleTopk, c.SpeculativeNumDraftTokens = sc.NumSteps, sc.TopK, sc.NumDraftTokens
	e.log.Info("speculative decoding", "algorithm", sc.Algorithm, "num_steps", sc.NumSteps,
		"eagle_topk", sc.TopK, "num_draft_tokens", sc.NumDraftTokens, "chain_only", s.chainOnly)
	return nil
}

// draftTrees proposes a verified-to-be tree for every decoding request of
// running and reserves KV slots for it. A request gets no tree (nil) when
// nothing was drafted, when max_tokens or the context leave no room for a
// draft, or when the cache has no free pages for one: drafts never cause
// a retraction.
func (s *speculator) draftTrees(e *Engine, running []*request) map[*request]*spec.Tree {
	if s == nil {
		return nil
	}
	var reqs []*request
	var limits []spec.Limit
	for _, r := range running {
		if r.Prefilling() || r.Seq == nil {
			continue
		}
		if r.constraint != nil {
			// Verification draws each tree node's token without the
			// grammar's mask; until it masks every node (a matcher per
			// path), constrained requests decode one token a step.
			continue
		}
		lim := spec.Limit{
			// Drafts past max_tokens could never be emitted: the token
			// drawn at the last accepted node comes on top.
			MaxDepth: min(s.cfg.NumSteps, r.Sampling.MaxNewTokens-r.NumOutput()-1),
			MaxNodes: min(s.cfg.NumDraftTokens, e.cfg.ContextLength-r.Computed),
		}
		if lim.MaxDepth < 1 || lim.MaxNodes < 2 {
			continue
		}
		reqs = append(reqs, r)
		limits = append(limits, lim)
	}
	if len(reqs) == 0 && s.eagle == nil {
		return nil
	}
	trees := make([]spec.Tree, len(reqs))
	if s.eagle != nil {
		var err error
		if trees, err = s.eagle.propose(e, running, reqs, limits); err != nil {
			e.log.Warn("EAGLE head step failed; decoding without drafts", "err", err)
			for _, r := range reqs {
				e.kv.Shrink(r.Seq, r.Computed+1)
			}
			return nil
		}
	} else if s.draft != nil {
		var err error
		if trees, err = s.draft.propose(e, reqs, limits); err != nil {
			// The draft model failing costs speed, not output.
			e.log.Warn("draft model step failed; decoding without drafts", "err", err)
			return nil
		}
	} else {
		for i, r := range reqs {
			trees[i] = s.ngram.Draft(r.Tokens)
		}
	}
	out := make(map[*request]*spec.Tree, len(reqs))
	for i, r := range reqs {
		t := trees[i].Truncate(limits[i].MaxNodes, limits[i].MaxDepth)
		if s.chainOnly {
			t = t.FirstPath()
		}
		if t.Len() < 2 {
			continue
		}
		need := r.Computed + t.Len()
		if ok, err := e.sched.Reserve(r.Seq, need); err != nil || !ok {
			continue
		}
		if !e.sched.PrepareWindow(r, need) {
			e.kv.Shrink(r.Seq, r.Computed+1)
			continue
		}
		out[r] = &t
	}
	s.padTrees(e, running, out)
	if s.eagle != nil {
		// The head's scratch slots go back, but for the verified tree's.
		for _, r := range reqs {
			need := r.Computed + 1
			if t := out[r]; t != nil {
				need = r.Computed + t.Len()
			}
			e.kv.Shrink(r.Seq, need)
		}
	}
	return out
}

// padTrees gives every request of a step that verifies drafts a tree of
// exactly NumDraftTokens nodes, padding included (spec.Tree.PadTo), when
// verify steps can replay a CUDA graph: a graph replays one shape, the
// batch size and the tokens per request. A request that drafted nothing
// gets its root and padding, and is verified as if it had decoded. It
// leaves out (the step runs eagerly) a step that drafted nothing (a plain
// decode, with graphs of its own), a step with a prompt chunk or a
// grammar, a batch over the largest graph, models that verify chains
// only, and requests without room in the context or the cache.
func (s *speculator) padTrees(e *Engine, running []*request, out map[*request]*spec.Tree) {
	g, n := e.rn.Graphs(), s.cfg.NumDraftTokens
	if g == nil || g.VerifyOff() || len(out) == 0 || s.chainOnly || len(running) > g.Sizes()[len(g.Sizes())-1] {
		return
	}
	for _, r := range running {
		if r.Prefilling() || r.Seq == nil || r.constraint != nil || r.Computed+n > e.cfg.ContextLength {
			return
		}
	}
	for _, r := range running {
		t := out[r]
		if t != nil && t.Len() >= n {
			continue
		}
		if ok, err := e.sched.Reserve(r.Seq, r.Computed+n); err != nil || !ok {
			return
		}
		if !e.sched.PrepareWindow(r, r.Computed+n) {
			had := 1
			if t != nil {
				had = t.Len()
			}
			e.kv.Shrink(r.Seq, r.Computed+had)
			return
		}
		if t == nil {
			root := spec.NewTree(r.Tokens[len(r.Tokens)-1])
			t = &root
			out[r] = t
		}
		t.PadTo(n)
	}
}

// landVerify takes r's verified tree t (the runner walks it:
// runner.Runner.AcceptTree, each token through accept as without
// speculation), counts what was accepted, and has the EAGLE head keep
// the accepted path's features. It reports whether r is done: finished,
// or ended because its KV could not be compacted.
func (s *speculator) landVerify(e *Engine, r *request, t *spec.Tree, sl *runner.StepLogits, rows runner.Rows) bool {
	base := r.Computed // the root's sequence index
	v, err := e.rn.AcceptTree(r, t, sl, rows, func(d runner.Draw) bool { return e.accept(r, d) })
	if t.Drafts() > 0 { // a padded root alone verifies nothing: a decode step
		s.steps.Add(1)
		s.drafted.Add(int64(t.Drafts()))
		s.accepted.Add(int64(v.Accepted))
		r.spec.steps++
		r.spec.accepted += v.Accepted
	}
	switch {
	case err != nil && !v.Finished:
		e.finish(r, FinishAbort, fmt.Errorf("speculative decoding: %w", err))
		return true
	case err != nil:
		e.log.Error("speculative decoding: moving a finished request's KV", "err", err)
	case !v.Finished && s.eagle != nil:
		s.eagle.keep(r, base, v.Inputs...)
	}
	return v.Finished
}

// flush ends the step's drafting work once every chunk has landed: the
// EAGLE head copies the features its requests keep (eagleDrafter.flush).
// still are the requests that go on running.
func (s *speculator) flush(e *Engine, still []*request) {
	if s == nil || s.eagle == nil {
		return
	}
	if err := s.eagle.flush(); err != nil {
		// The head catches up from the next step's features; until
		// then its requests decode without drafts.
		e.log.Warn("EAGLE features of this step lost", "err", err)
		for _, r := range still {
			s.eagle.release(r)
		}
	}
}
