package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/internal/shared"
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
