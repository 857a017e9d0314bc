package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/spec"
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

// TestVerifyGraphShapes: with graphs on, every verify step of two
// requests pads each tree (and gives a request that drafted nothing its
// root and padding) to --speculative-num-draft-tokens nodes, runs under
// the graph key of (batch size, tokens per request), and the greedy
// output stays the plain run's token for token: NGRAM (chains and trees)
// and a STANDALONE tree (tree masks with padding under them), flash and
// splitkv, page sizes 1 and 16. Padding is never counted as drafted.
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
	run := func(t *testing.T, e *Engine) [][]int {
		out := make([][]int, len(prompts))
		var wg sync.WaitGroup
		for i, p := range prompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.Generate(context.Background(), Request{Prompt: p, Sampling: greedy(160)})
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
				{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: model, SpeculativeNumSteps: 3, SpeculativeEagleTopk: 2, SpeculativeNumDraftTokens: 6},
			} {
				t.Run(fmt.Sprintf("%s/page%d/%s", backend, pageSize, sc.SpeculativeAlgorithm), func(t *testing.T) {
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
					e.graphs = &decodeGraphs{run: h, sizes: device.GraphBatchSizes(2)}
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
						if key > 2 && key != graphKey(2, n) && key != graphKey(1, n) {
							t.Errorf("graph key %#x is neither a decode size nor (1 or 2 requests, %d tokens)", key, n)
						}
					}
					if h.runs[graphKey(2, n)] == 0 {
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

// TestPadVerify: a verify batch padded to a graph's size gains requests
// of n tokens on the pad row (slot 0, positions 0..n−1, token 0, causal,
// a logits row per token) after the real ones, which keep their rows;
// uniformVerify tells the batches a verify graph can hold.
func TestPadVerify(t *testing.T) {
	tab := kvcache.NewReqToToken(4, 64)
	kv := &kvcache.Cache{Table: tab}
	b := &forward.Batch{Mode: forward.TargetVerify, KV: kv}
	var trees []*spec.Tree
	for r := range 3 {
		tr := spec.NewTree(100 + r)
		tr.Add(0, 200+r)
		if r == 1 {
			tr.Add(0, 300) // a branching tree: the batch has a mask
		} else {
			tr.Add(1, 300)
		}
		trees = append(trees, &tr)
		b.ReqRows = append(b.ReqRows, int32(r))
		b.PrefixLens = append(b.PrefixLens, 10)
		b.ExtendLens = append(b.ExtendLens, 3)
		slots := make([]int32, 64)
		for i := range slots {
			slots[i] = int32(64*r + i + 1)
		}
		appendTree(b, slots, 10, &tr)
	}
	attachTreeMasks(b, trees)
	if !uniformVerify(b) {
		t.Fatal("three requests of 3 tokens, every row with logits: not uniform")
	}
	rn := &runner{graphs: &decodeGraphs{sizes: device.GraphBatchSizes(8)}}
	size, n, ok := rn.graphSize(b)
	if !ok || size != 4 || n != 3 {
		t.Fatalf("graph size %d, %d tokens, %v; want 4 requests of 3", size, n, ok)
	}
	ids := slices.Clone(b.InputIDs)
	padVerify(b, size, n, tab.PadRow())
	if b.NumReqs() != 4 || b.NumTokens() != 12 || len(b.LogitRows) != 12 || len(b.MaskStarts) != 4 || b.MaskStarts[3] != -1 {
		t.Fatalf("padded to %d requests, %d tokens, %d logits rows, mask starts %v", b.NumReqs(), b.NumTokens(), len(b.LogitRows), b.MaskStarts)
	}
	if !slices.Equal(b.InputIDs[:9], ids) {
		t.Fatalf("real tokens moved: %v, want %v first", b.InputIDs, ids)
	}
	if b.ReqRows[3] != int32(tab.PadRow()) || b.PrefixLens[3] != 0 || !slices.Equal(b.Positions[9:], []int32{0, 1, 2}) ||
		!slices.Equal(b.OutSlots[9:], []int32{0, 0, 0}) || !slices.Equal(b.LogitRows[9:], []int32{9, 10, 11}) {
		t.Fatalf("padding request: row %d prefix %d positions %v slots %v logits rows %v", b.ReqRows[3], b.PrefixLens[3], b.Positions[9:], b.OutSlots[9:], b.LogitRows[9:])
	}
	if err := b.Finalize(); err != nil {
		t.Fatalf("padded batch: %v", err)
	}
	if key := graphKey(size, n); key == size || key <= 256 {
		t.Errorf("verify key %d collides with the decode sizes", key)
	}

	uneven := &forward.Batch{Mode: forward.TargetVerify, ReqRows: []int32{0, 1}, PrefixLens: []int32{4, 4}, ExtendLens: []int32{3, 2},
		InputIDs: make([]int32, 5), Positions: make([]int32, 5), OutSlots: make([]int32, 5), LogitRows: []int32{0, 1, 2, 3, 4}}
	if uniformVerify(uneven) {
		t.Error("trees of 3 and 2 tokens: uniform")
	}
	prefill := &forward.Batch{Mode: forward.TargetVerify, ReqRows: []int32{0, 1}, PrefixLens: []int32{4, 0}, ExtendLens: []int32{2, 2},
		InputIDs: make([]int32, 4), Positions: make([]int32, 4), OutSlots: make([]int32, 4), LogitRows: []int32{0, 1, 3}}
	if uniformVerify(prefill) {
		t.Error("a prompt chunk without logits rows: uniform")
	}
	rn.graphs.verifyOff = true
	if _, _, ok := rn.graphSize(b); ok {
		t.Error("verify graphs off, yet a size")
	}
}
