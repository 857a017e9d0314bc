package engine

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/eagle"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/sample"
)

// TestEagleCacheMatchesRecompute: at every step, the head's logits for a
// request's newest entry, computed incrementally (prefill chunks, verify
// steps with accepted drafts compacted, a prefix from the radix cache),
// equal those of recomputing the request from scratch: the target over
// all its tokens for the features, then the head over every entry, in
// fresh slots. This is what makes a trained head's drafts good; the
// greedy identity tests cannot see it, since the target verifies every
// draft.
func TestEagleCacheMatchesRecompute(t *testing.T) {
	// Weights of 0.02 leave attention nearly uniform, blind to a wrong
	// position or a missing key; larger ones make it sharp.
	const headStd = 0.3
	target := shared.Path(t, "models/reference-tiny/llama_gqa")
	ck, err := model.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	heads := map[string]string{"EAGLE3": filepath.Join(t.TempDir(), "eagle3"), "EAGLE": filepath.Join(t.TempDir(), "eagle")}
	if err := eagle.WriteRandom(heads["EAGLE3"], &ck.Config, random.EagleOptions{Eagle3: true, DraftVocab: 256, Seed: 7, Std: headStd}); err != nil {
		t.Fatal(err)
	}
	if err := eagle.WriteRandom(heads["EAGLE"], &ck.Config, random.EagleOptions{Seed: 8, Std: headStd}); err != nil {
		t.Fatal(err)
	}
	// Trees of two levels 64 wide, for a random head's drafts to be
	// accepted now and then, check the catch-ups; trees of three levels
	// two wide check every node too.
	for _, c := range []struct {
		algorithm          string
		pageSize           int
		steps, topK, nodes int
	}{{"EAGLE3", 1, 2, 64, 96}, {"EAGLE3", 16, 2, 64, 96}, {"EAGLE", 16, 2, 64, 96}, {"EAGLE3", 16, 3, 2, 5}, {"EAGLE", 1, 3, 2, 5}} {
		pageSize := c.pageSize
		e, err := New(Config{ModelPath: target, PageSize: pageSize, ChunkedPrefillSize: 13, KVCacheTokens: 2048,
			SpeculativeAlgorithm: c.algorithm, SpeculativeDraftModelPath: heads[c.algorithm], SpeculativeNumSteps: c.steps,
			SpeculativeEagleTopk: c.topK, SpeculativeNumDraftTokens: c.nodes})
		if err != nil {
			t.Fatal(err)
		}
		checked, nodes, worst := 0, 0, 0.0
		compare := func(got []float32, tokens, path []int) {
			want, err := recomputeEagle(e, tokens, path)
			if err != nil {
				t.Error(err)
				return
			}
			// Relative to the row's largest logit: an EAGLE head has no
			// final norm, and with sharp weights its logits run large.
			scale := 1.0
			for _, w := range want {
				scale = math.Max(scale, math.Abs(float64(w)))
			}
			for i := range want {
				worst = math.Max(worst, math.Abs(float64(got[i]-want[i]))/scale)
			}
		}
		e.spec.eagle.caughtUp = func(r *request, got []float32) {
			checked++
			compare(got, r.Tokens[:r.spec.eagleFrom+1], nil)
		}
		if c.topK == 2 {
			e.spec.eagle.drafted = func(r *request, path []int, got []float32) {
				nodes++
				compare(got, r.Tokens[:r.spec.eagleFrom+1], path)
			}
		}
		ids := []int{1, 17, 33, 200, 5, 77, 9, 301, 42, 11, 12, 13, 14, 15, 16, 400, 3, 2, 99, 100, 101, 7}
		for round := range 2 { // the second round takes the prompt from the radix cache
			p := sample.DefaultParams()
			p.Temperature, p.MaxNewTokens, p.IgnoreEOS = 0, 40, true
			res, err := e.Generate(context.Background(), Request{InputIDs: ids, Sampling: p})
			if err != nil {
				t.Fatal(err)
			}
			if round == 1 && res.CachedTokens == 0 {
				t.Errorf("page %d: round 2 found nothing in the radix cache", pageSize)
			}
		}
		ss := e.SpecStats()
		e.Close()
		if checked < 40 || worst > 1e-4 || c.topK == 64 && ss.AcceptedTokens == 0 || c.topK == 2 && nodes < 100 {
			t.Errorf("%s page %d topk %d: %d catch-ups and %d tree nodes checked, %d drafts accepted; the largest logit difference from a recompute is %g of the largest logit",
				c.algorithm, pageSize, c.topK, checked, nodes, ss.AcceptedTokens, worst)
		}
		t.Logf("%s page %d topk %d: %d catch-ups and %d tree nodes checked, largest logit difference %.2g of the largest logit, %d of %d drafts accepted",
			c.algorithm, pageSize, c.topK, checked, nodes, worst, ss.AcceptedTokens, ss.DraftedTokens)
	}
}

// recomputeEagle runs tokens but the last through the target and the
// head's entries (each token's features with the token after it) in
// fresh slots of e's cache, then the drafted path as a chain, each token
// fed the output state of the entry before; it returns the head's logits
// for the last entry.
func recomputeEagle(e *Engine, tokens, path []int) ([]float32, error) {
	d := e.spec.eagle
	computed := tokens[:len(tokens)-1]
	seq, _ := e.kv.NewSeq()
	defer e.kv.Release(seq)
	n := len(computed)
	if ok, err := e.kv.Grow(seq, n+len(path)); err != nil || !ok {
		return nil, fmt.Errorf("no room to recompute: %v", err)
	}
	slots := e.kv.Table.Row(seq.Row)
	b := &forward.Batch{Mode: forward.Extend, KV: e.kv, ReqRows: []int32{int32(seq.Row)}, PrefixLens: []int32{0}, ExtendLens: []int32{int32(n)}}
	for j, tok := range computed {
		b.InputIDs = append(b.InputIDs, int32(tok))
		b.Positions = append(b.Positions, int32(j))
		b.OutSlots = append(b.OutSlots, slots[j])
	}
	b.LogitRows = []int32{int32(n - 1)}
	if _, err := e.rn.Forward(b); err != nil {
		return nil, err
	}
	feats, err := runner.ToHost(d.dev.rt, d.target.Captured())
	if err != nil {
		return nil, err
	}
	hb := &forward.Batch{Mode: forward.DraftExtend, KV: d.kv, ReqRows: b.ReqRows, PrefixLens: []int32{0}, ExtendLens: b.ExtendLens,
		Positions: b.Positions, OutSlots: b.OutSlots, LogitRows: b.LogitRows}
	for j := range n {
		hb.InputIDs = append(hb.InputIDs, int32(tokens[j+1]))
	}
	logits, hidden, err := d.forward(hb, feats.Data, d.width)
	for k, tok := range path {
		if err != nil {
			break
		}
		at := n + k
		b := &forward.Batch{Mode: forward.DraftExtend, KV: d.kv, ReqRows: b.ReqRows, PrefixLens: []int32{int32(at)}, ExtendLens: []int32{1},
			InputIDs: []int32{int32(tok)}, Positions: []int32{int32(at)}, OutSlots: []int32{slots[at]}, LogitRows: []int32{0}}
		logits, hidden, err = d.forward(b, hidden.Data, hidden.Cols())
	}
	if err != nil {
		return nil, err
	}
	return logits.Host.Row(0), nil
}
