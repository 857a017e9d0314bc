package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/shared"
	modelpkg "github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/eagle"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/sample"
)

// hostGraphs is device.Graphs on the host: every forward runs, the first
// under a key is reported captured and the later ones replayed. With it
// the CPU engine shapes its steps as a GPU that replays graphs does
// (trees padded to a fixed size, batches padded to a captured size), and
// the CPU's float32 numerics check that those shapes change no output.
type hostGraphs struct {
	mu   sync.Mutex
	runs map[int]int // key → forwards
}

func (h *hostGraphs) RunGraph(key int, forward func() error) (device.GraphRun, error) {
	h.mu.Lock()
	h.runs[key]++
	first := h.runs[key] == 1
	h.mu.Unlock()
	if first {
		return device.GraphRun{Path: device.GraphCaptured}, forward()
	}
	return device.GraphRun{Path: device.GraphReplayed}, forward()
}

// generateAll runs prompts on e at once with sampling p and returns their
// outputs.
func generateAll(t *testing.T, e *Engine, prompts []string, p sample.Params) [][]int {
	out := make([][]int, len(prompts))
	var wg sync.WaitGroup
	for i, prompt := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Generate(context.Background(), Request{Prompt: prompt, Sampling: p})
			if err != nil {
				t.Errorf("prompt %d: %v", i, err)
				return
			}
			out[i] = res.OutputIDs
		}()
	}
	wg.Wait()
	return out
}

// TestVerifyGraphShapes: with graphs on, every verify step of two
// requests pads each tree (and gives a request that drafted nothing its
// root and padding) to --speculative-num-draft-tokens nodes, runs under
// the graph key of (batch size, tokens per request), and the greedy
// output stays the plain run's token for token: NGRAM (chains and trees)
// and STANDALONE with the draft = the target (its default chain, and a
// tree: tree masks with padding under them), flash and splitkv, page
// sizes 1 and 16. Padding is never counted as drafted.
func TestVerifyGraphShapes(t *testing.T) {
	model := shared.Path(t, "models/stories260K/stories260K.gguf")
	greedy := func(n int) sample.Params {
		p := sample.DefaultParams()
		p.Temperature, p.MaxNewTokens = 0, n
		return p
	}
	prompts := []string{
		"Once upon a time, there was a little girl named Lily. She loved to play outside. Once upon a time, there was a little girl named Lily.",
		"Lily saw a big dog",
	}
	run := func(t *testing.T, e *Engine) [][]int { return generateAll(t, e, prompts, greedy(160)) }
	for _, backend := range []string{"flash", "splitkv"} {
		for _, pageSize := range []int{1, 16} {
			base := Config{ModelPath: model, AttentionBackend: backend, PageSize: pageSize, KVCacheTokens: 4096, MaxRunningRequests: 2, ContextLength: 512}
			plain, err := New(base)
			if err != nil {
				t.Fatal(err)
			}
			want := run(t, plain)
			plain.Close()
			for _, sc := range []Config{
				{SpeculativeAlgorithm: "NGRAM"},
				{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model}, // the defaults: a chain, as bench one-batch runs it
				{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model, SpeculativeNumSteps: 3, SpeculativeEagleTopk: 2, SpeculativeNumDraftTokens: 6},
			} {
				name := sc.SpeculativeAlgorithm
				if sc.SpeculativeEagleTopk > 1 {
					name += "-tree"
				}
				t.Run(fmt.Sprintf("%s/page%d/%s", backend, pageSize, name), func(t *testing.T) {
					cfg := base
					cfg.SpeculativeAlgorithm, cfg.SpeculativeDraftModelPath = sc.SpeculativeAlgorithm, sc.SpeculativeDraftModelPath
					cfg.SpeculativeNumSteps, cfg.SpeculativeEagleTopk, cfg.SpeculativeNumDraftTokens = sc.SpeculativeNumSteps, sc.SpeculativeEagleTopk, sc.SpeculativeNumDraftTokens
					e, err := New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					defer e.Close()
					h := &hostGraphs{runs: map[int]int{}}
					// Set before the first request: the scheduler reads it
					// only after receiving one.
					e.rn.SetGraphs(runner.NewGraphs(h, device.GraphBatchSizes(2)))
					got := run(t, e)
					for i := range prompts {
						if !slices.Equal(got[i], want[i]) {
							t.Errorf("prompt %d:\nwith verify graphs %v\nplain              %v", i, got[i], want[i])
						}
					}
					n := e.spec.cfg.NumDraftTokens
					st, ss := e.Stats(), e.SpecStats()
					if st.VerifyGraphReplays == 0 || st.VerifyGraphCaptures == 0 || st.VerifyGraphEager != 0 {
						t.Errorf("verify graphs: %d replays, %d captures, %d eager", st.VerifyGraphReplays, st.VerifyGraphCaptures, st.VerifyGraphEager)
					}
					for key := range h.runs {
						if key > 2 && key != runner.GraphKey(2, n) && key != runner.GraphKey(1, n) {
							t.Errorf("graph key %#x is neither a decode size nor (1 or 2 requests, %d tokens)", key, n)
						}
					}
					if h.runs[runner.GraphKey(2, n)] == 0 {
						t.Errorf("no verify step of both requests at %d tokens each: keys %v", n, h.runs)
					}
					if ss.AcceptedTokens == 0 || ss.AcceptedTokens > ss.DraftedTokens {
						t.Errorf("%d of %d drafted tokens accepted", ss.AcceptedTokens, ss.DraftedTokens)
					}
					if ss.DraftedTokens > ss.VerifySteps*(n-1) {
						t.Errorf("%d drafted tokens over %d verify steps of at most %d drafts: padding counted", ss.DraftedTokens, ss.VerifySteps, n-1)
					}
					t.Logf("accept length %.2f; forwards by graph key %v", ss.AcceptLength(), h.runs)
				})
			}
		}
	}
}

// TestDraftGraphShapes: with graphs on for the target and the drafter
// (hostGraphs, as a GPU's would be), the drafter's steps run under draft
// graph keys, padded to a captured batch size as the target's decode
// steps are — a draft model's chain levels as Decode batches of one
// token, its tree levels and an EAGLE-3 head's as DraftExtend batches of
// top-k tokens per request — are captured once per key and replayed, and
// the greedy output stays the plain run's token for token: STANDALONE
// with the draft = the target (chain and tree) and EAGLE-3 with a
// random-weight head in the real file layout, page sizes 1 and 16.
func TestDraftGraphShapes(t *testing.T) {
	model := shared.Path(t, "models/stories260K/stories260K.gguf")
	ck, err := modelpkg.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	head := filepath.Join(t.TempDir(), "eagle3")
	err = eagle.WriteRandom(head, &ck.Config, random.EagleOptions{Eagle3: true, DraftVocab: 256, AuxLayerIDs: []int{0, 2, 3}, Seed: 7})
	ck.Close()
	if err != nil {
		t.Fatal(err)
	}
	greedy := sample.DefaultParams()
	greedy.Temperature, greedy.MaxNewTokens = 0, 96
	prompts := []string{
		"Once upon a time, there was a little girl named Lily. She loved to play outside. Once upon a time, there was a little girl named Lily.",
		"Lily saw a big dog",
		"The cat",
	}
	run := func(t *testing.T, e *Engine) [][]int { return generateAll(t, e, prompts, greedy) }
	type drafter struct {
		name string
		cfg  Config
		step runner.DraftStep // of the level steps
		n    int              // their tokens per request
	}
	drafters := []drafter{
		{"STANDALONE-chain", Config{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model, SpeculativeNumSteps: 4, SpeculativeEagleTopk: 1, SpeculativeNumDraftTokens: 5}, runner.DraftChain, 1},
		{"STANDALONE-tree", Config{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model, SpeculativeNumSteps: 3, SpeculativeEagleTopk: 2, SpeculativeNumDraftTokens: 6}, runner.DraftLevel, 2},
		{"EAGLE3-tree", Config{SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: head, SpeculativeNumSteps: 3, SpeculativeEagleTopk: 2, SpeculativeNumDraftTokens: 5}, runner.DraftLevel, 2},
	}
	for _, pageSize := range []int{1, 16} {
		base := Config{ModelPath: model, AttentionBackend: "flash", PageSize: pageSize, KVCacheTokens: 4096, MaxRunningRequests: 3, ContextLength: 512}
		plain, err := New(base)
		if err != nil {
			t.Fatal(err)
		}
		want := run(t, plain)
		plain.Close()
		for _, dr := range drafters {
			t.Run(fmt.Sprintf("page%d/%s", pageSize, dr.name), func(t *testing.T) {
				cfg := base
				cfg.SpeculativeAlgorithm, cfg.SpeculativeDraftModelPath = dr.cfg.SpeculativeAlgorithm, dr.cfg.SpeculativeDraftModelPath
				cfg.SpeculativeNumSteps, cfg.SpeculativeEagleTopk, cfg.SpeculativeNumDraftTokens = dr.cfg.SpeculativeNumSteps, dr.cfg.SpeculativeEagleTopk, dr.cfg.SpeculativeNumDraftTokens
				e, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				h := &hostGraphs{runs: map[int]int{}}
				sizes := device.GraphBatchSizes(4) // three requests pad to four
				e.rn.SetGraphs(runner.NewGraphs(h, sizes))
				e.spec.drafter().rn.SetGraphs(runner.NewGraphs(h, sizes), dr.cfg.SpeculativeNumSteps+1)
				got := run(t, e)
				for i := range prompts {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("prompt %d:\nwith draft graphs %v\nplain             %v", i, got[i], want[i])
					}
				}
				st := e.Stats()
				if st.DraftGraphCaptures == 0 || st.DraftGraphReplays == 0 || st.DraftGraphEager != 0 {
					t.Errorf("draft graphs: %d replays, %d captures, %d eager", st.DraftGraphReplays, st.DraftGraphCaptures, st.DraftGraphEager)
				}
				if st.VerifyGraphReplays == 0 || st.VerifyGraphEager != 0 {
					t.Errorf("verify graphs: %d replays, %d eager", st.VerifyGraphReplays, st.VerifyGraphEager)
				}
				// Draft keys: the drafter's levels, catch-ups of one token
				// each (a level of one), and catch-ups of 2..NumSteps+1
				// accepted tokens each.
				draftRuns, levels, catchUps := 0, 0, 0
				for key, n := range h.runs {
					if key < 1<<40 {
						continue
					}
					draftRuns += n
					ok := false
					for _, size := range sizes {
						ok = ok || key == runner.DraftGraphKey(runner.DraftLevel, size, 1)
						if key == runner.DraftGraphKey(dr.step, size, dr.n) {
							ok, levels = true, levels+n
						}
						for m := 2; m <= dr.cfg.SpeculativeNumSteps+1; m++ {
							if key == runner.DraftGraphKey(runner.DraftCatchUp, size, m) {
								ok, catchUps = true, catchUps+n
							}
						}
					}
					if !ok {
						t.Errorf("draft graph key %#x is neither a level (%v, %d tokens per request) nor a catch-up", key, dr.step, dr.n)
					}
				}
				if levels == 0 {
					t.Errorf("no draft level ran under a graph key: %v", h.runs)
				}
				if dr.cfg.SpeculativeAlgorithm == "STANDALONE" && catchUps == 0 {
					t.Errorf("no catch-up of the draft = target on its accepted tokens ran under a graph key: %v", h.runs)
				}
				// Every key but its first run counts as a replay.
				if draftRuns != st.DraftGraphCaptures+st.DraftGraphReplays || st.DraftGraphCaptures != countKeys(h.runs, 1<<40) {
					t.Errorf("%d draft forwards under graph keys, %d captures over %d keys, %d replays", draftRuns, st.DraftGraphCaptures, countKeys(h.runs, 1<<40), st.DraftGraphReplays)
				}
				ss := e.SpecStats()
				t.Logf("accept length %.2f; draft graphs %d captured, %d replayed; forwards by key %v", ss.AcceptLength(), st.DraftGraphCaptures, st.DraftGraphReplays, h.runs)
			})
		}
	}
}

// countKeys is how many keys of runs are at least from.
func countKeys(runs map[int]int, from int) int {
	n := 0
	for k := range runs {
		if k >= from {
			n++
		}
	}
	return n
}

// TestTimeStepsReplayGraphs: with graphs on (hostGraphs), every timed
// step of TimeSteps replays the graph its warm-up captured, decode and
// verify alike, at batch sizes that are captured (2) and padded (3 to
// 4): its first warm-up runs without a graph and its second captures,
// under the keys of the engine's own steps. The timings report no
// capture and no eager step. NGRAM and STANDALONE engines (the timing
// bench times either's steps), page sizes 1 and 16.
func TestTimeStepsReplayGraphs(t *testing.T) {
	model := shared.Path(t, "models/stories260K/stories260K.gguf")
	for _, pageSize := range []int{1, 16} {
		for _, sc := range []Config{{SpeculativeAlgorithm: "NGRAM"}, {SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model}} {
			t.Run(fmt.Sprintf("page%d/%s", pageSize, sc.SpeculativeAlgorithm), func(t *testing.T) {
				e, err := New(Config{ModelPath: model, PageSize: pageSize, KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 256,
					SpeculativeAlgorithm: sc.SpeculativeAlgorithm, SpeculativeDraftModelPath: sc.SpeculativeDraftModelPath})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				h := &hostGraphs{runs: map[int]int{}}
				e.rn.SetGraphs(runner.NewGraphs(h, device.GraphBatchSizes(4)))
				o := StepTimingOptions{Batches: []int{2, 3}, DraftTokens: []int{3, 5}, Context: 40, Repeat: 3}
				steps, err := e.TimeSteps(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range steps {
					if s.Graphs != o.Repeat || s.Captures != 0 || s.Eager != 0 {
						t.Errorf("batch %d %s of %d: %d replays, %d captures, %d eager of %d timed steps", s.Batch, s.Shape, s.DraftTokens, s.Graphs, s.Captures, s.Eager, o.Repeat)
					}
				}
				// Per batch size: one decode key, and per verify size one key that
				// the chain and the tree share (1 capture and 3 replays each).
				for _, size := range []int{2, 4} {
					if n := h.runs[runner.GraphKey(size, 1)]; n != 1+o.Repeat {
						t.Errorf("decode at padded batch %d: %d forwards under its key, want %d", size, n, 1+o.Repeat)
					}
					for _, n := range o.DraftTokens {
						if got := h.runs[runner.GraphKey(size, n)]; got != 2*(1+o.Repeat) {
							t.Errorf("verify of %d tokens at padded batch %d: %d forwards under its key, want %d", n, size, got, 2*(1+o.Repeat))
						}
					}
				}
				if st := e.Stats(); st.KVPagesFree != st.KVPagesTotal {
					t.Errorf("%d of %d pages free after the timings", st.KVPagesFree, st.KVPagesTotal)
				}
			})
		}
	}
}

// TestTimeStepsGreedyIdentity: the steps the timing bench builds
// (stepBatch) and runs (timedStep), under graph keys with graphs on
// (hostGraphs: three requests padded to four), draw the plain greedy
// tokens. Node k of a verified chain argmaxes to the token that plain
// decode steps over the same tokens draw at its position; a tree's nodes
// to the ids of the same tree verified eagerly, unpadded. STANDALONE
// (draft = target), page sizes 1 and 16.
func TestTimeStepsGreedyIdentity(t *testing.T) {
	model := shared.Path(t, "models/stories260K/stories260K.gguf")
	for _, pageSize := range []int{1, 16} {
		t.Run(fmt.Sprintf("page%d", pageSize), func(t *testing.T) {
			e, err := New(Config{ModelPath: model, PageSize: pageSize, KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 256,
				SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			h := &hostGraphs{runs: map[int]int{}}
			e.rn.SetGraphs(runner.NewGraphs(h, device.GraphBatchSizes(4)))
			const reqs, ctx, n = 3, 40, 6
			onScheduler(t, e, func() error {
				vocab := e.model.Config().VocabSize
				seqs, err := e.stepSeqs(reqs, ctx+n)
				if err != nil {
					return err
				}
				defer func() {
					for _, s := range seqs {
						e.kv.Release(s)
					}
				}()
				if err := e.prefillSeqs(seqs, ctx, vocab, rand.New(rand.NewPCG(1, 1))); err != nil {
					return err
				}
				chain := e.stepBatch(seqs, ctx, ShapeChain, n, vocab, rand.New(rand.NewPCG(2, 2)))
				tokens := slices.Clone(chain.InputIDs) // request r's node k at r·n+k; the graph pads the batch
				got, err := e.timedStep(chain, false)
				if err != nil {
					return err
				}
				for k := range n {
					b := &forward.Batch{Mode: forward.Decode, KV: e.kv}
					for r, s := range seqs {
						b.ReqRows, b.PrefixLens, b.ExtendLens = append(b.ReqRows, int32(s.Row)), append(b.PrefixLens, int32(ctx+k)), append(b.ExtendLens, 1)
						b.LogitRows = append(b.LogitRows, int32(r))
						b.InputIDs, b.Positions = append(b.InputIDs, tokens[r*n+k]), append(b.Positions, int32(ctx+k))
						b.OutSlots = append(b.OutSlots, e.kv.Table.Row(s.Row)[ctx+k])
					}
					want, err := e.timedStep(b, false)
					if err != nil {
						return err
					}
					for r := range reqs {
						if got[r*n+k] != want[r] {
							t.Errorf("request %d, chain node %d: the verify step draws %d, plain decode %d", r, k, got[r*n+k], want[r])
						}
					}
				}
				tree := e.stepBatch(seqs, ctx, ShapeTree, n, vocab, rand.New(rand.NewPCG(3, 3)))
				if tree.CustomMask == nil {
					t.Fatal("the tree step has no tree mask")
				}
				got, err = e.timedStep(tree, false)
				if err != nil {
					return err
				}
				want, err := e.timedStep(e.stepBatch(seqs, ctx, ShapeTree, n, vocab, rand.New(rand.NewPCG(3, 3))), true)
				if err != nil {
					return err
				}
				if !slices.Equal(got, want) {
					t.Errorf("tree nodes: with a graph key %v, eager %v", got, want)
				}
				return nil
			})
			if h.runs[runner.GraphKey(4, n)] != 2 || h.runs[runner.GraphKey(4, 1)] != n {
				t.Errorf("forwards by graph key %v: want the chain and the tree under (4 requests, %d tokens), %d decode steps under 4", h.runs, n, n)
			}
		})
	}
}

// onScheduler runs fn on e's scheduler goroutine, which owns the KV
// cache and the runner, while e is idle.
func onScheduler(t *testing.T, e *Engine, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	e.control <- func() { done <- fn() }
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
