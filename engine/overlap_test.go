package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
)

// overlapMix is a set of requests that exercises what the overlap
// schedule must get right: different lengths (a request whose in-flight
// token is its last sits a step out), EOS and stop strings found a step
// late, max_new_tokens 0 and 1, and requests that force the synchronous
// path (logprobs, penalties) arriving among the others.
func overlapMix(prompts []engine.Request, stopID int) []engine.Request {
	var out []engine.Request
	for i, req := range prompts {
		req.Sampling = greedy([]int{40, 1, 7, 0, 25, 2, 60, 13}[i%8])
		switch i % 5 {
		case 1:
			if req.Prompt != "" {
				req.Sampling.Stop = []string{"."}
			} else {
				req.Sampling.StopTokenIDs = []int{stopID} // no tokenizer
			}
		case 3:
			req.Sampling.IgnoreEOS = true
		}
		out = append(out, req)
	}
	lp := prompts[0]
	lp.Sampling, lp.Logprobs = greedy(9), true
	pen := prompts[1]
	pen.Sampling = greedy(11)
	pen.Sampling.RepetitionPenalty = 1.3
	return append(out, lp, pen)
}

// runMix submits reqs from concurrent goroutines, the second half after
// the first has produced some tokens, and returns the results in order.
func runMix(t *testing.T, e *engine.Engine, reqs []engine.Request) []*engine.Result {
	t.Helper()
	results := make([]*engine.Result, len(reqs))
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for i, req := range reqs {
		if i == len(reqs)/2 {
			<-started
		}
		req.OnDelta = func(engine.Delta) { once.Do(func() { close(started) }) }
		wg.Go(func() {
			res, err := e.Generate(context.Background(), req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				once.Do(func() { close(started) })
				return
			}
			results[i] = res
		})
	}
	wg.Wait()
	return results
}

// TestOverlapScheduleIdentity: with the overlap schedule, greedy output is
// the synchronous engine's, token for token, text, finish reason and
// matched stop included, on stories260K (whose golden continuation it
// also gives) and on reference models; steps did overlap; every page
// comes back.
func TestOverlapScheduleIdentity(t *testing.T) {
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	var stories []engine.Request
	for _, s := range storyPrompts {
		stories = append(stories, engine.Request{Prompt: s})
	}
	models := []struct{ name, path string }{
		{"stories260K", "models/stories260K/stories260K.gguf"},
		{"llama_gqa", "models/reference-tiny/llama_gqa"},
		{"qwen3_qknorm", "models/reference-tiny/qwen3_qknorm"},
		{"deepseek_v3_mla_moe", "models/reference-tiny/deepseek_v3_mla_moe"},
	}
	for _, m := range models {
		for _, pageSize := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/page%d", m.name, pageSize), func(t *testing.T) {
				prompts, stopID := stories, 0
				if m.name != "stories260K" {
					var ref reference
					readJSON(t, shared.Path(t, m.path+"/reference.json"), &ref)
					prompts = nil
					for i := range 8 { // prefixes of the reference prompt: shared pages
						prompts = append(prompts, engine.Request{InputIDs: ref.InputIDs[:min(len(ref.InputIDs), 3+5*i)]})
					}
					// The stop token is the third of this prompt's greedy continuation.
					prompts[1].InputIDs, stopID = ref.InputIDs[:ref.GreedyPromptLen], ref.GreedyIDs[2]
				}
				cfg := engine.Config{ModelPath: shared.Path(t, m.path), PageSize: pageSize, MaxRunningRequests: 6, ChunkedPrefillSize: 16}
				sync := cfg
				sync.DisableOverlapSchedule = true
				on, off := newEngine(t, cfg), newEngine(t, sync)
				if on.Settings().DisableOverlapSchedule || !off.Settings().DisableOverlapSchedule {
					t.Fatalf("overlap settings: on %v, off %v", !on.Settings().DisableOverlapSchedule, !off.Settings().DisableOverlapSchedule)
				}
				reqs := overlapMix(prompts, stopID)
				got, want := runMix(t, on, reqs), runMix(t, off, reqs)
				for i := range reqs {
					g, w := got[i], want[i]
					if g == nil || w == nil {
						continue
					}
					if !slices.Equal(g.OutputIDs, w.OutputIDs) || g.Text != w.Text || g.FinishReason != w.FinishReason || g.MatchedStop != w.MatchedStop {
						t.Errorf("request %d: overlapped %v %q %s %v; synchronous %v %q %s %v", i,
							g.OutputIDs, g.Text, g.FinishReason, g.MatchedStop, w.OutputIDs, w.Text, w.FinishReason, w.MatchedStop)
					}
					if n := reqs[i].Sampling.MaxNewTokens; len(g.OutputIDs) > n {
						t.Errorf("request %d: %d tokens for max_new_tokens %d", i, len(g.OutputIDs), n)
					}
				}
				if m.name == "stories260K" {
					res, err := on.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
					if err != nil || !slices.Equal(res.OutputIDs, golden.OutputIDs) {
						t.Errorf("golden continuation: %v, %v", res, err)
					}
				}
				for name, e := range map[string]*engine.Engine{"overlapped": on, "synchronous": off} {
					st := e.Stats()
					if st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
						t.Errorf("%s: %d free + %d cached of %d pages after every request", name, st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
					}
				}
				if n := on.Stats().OverlapSteps; n == 0 {
					t.Errorf("no step overlapped")
				}
				if n := off.Stats().OverlapSteps; n != 0 {
					t.Errorf("%d steps overlapped with --disable-overlap-schedule", n)
				}
				t.Logf("overlapped steps: %d", on.Stats().OverlapSteps)
			})
		}
	}
}

// TestOverlapUnderMemoryPressure: retraction while a step is in flight
// (a retracted request's last token is still being drawn) loses and
// repeats nothing.
func TestOverlapUnderMemoryPressure(t *testing.T) {
	tight := engine.Config{KVCacheTokens: 160, PageSize: 4, ContextLength: 128}
	on := storiesEngine(t, tight)
	tight.DisableOverlapSchedule = true
	off := storiesEngine(t, tight)
	p := greedy(60)
	p.IgnoreEOS = true
	var reqs []engine.Request
	for _, s := range storyPrompts {
		reqs = append(reqs, engine.Request{Prompt: s, Sampling: p})
	}
	got, want := runMix(t, on, reqs), runMix(t, off, reqs)
	for i := range reqs {
		if got[i] != nil && want[i] != nil && !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
			t.Errorf("prompt %q: overlapped %v, synchronous %v", storyPrompts[i], got[i].OutputIDs, want[i].OutputIDs)
		}
	}
	st := on.Stats()
	if st.Retractions == 0 || st.OverlapSteps == 0 {
		t.Errorf("%d retractions in %d overlapped steps; want both", st.Retractions, st.OverlapSteps)
	}
	if st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
		t.Errorf("%d free + %d cached of %d pages after every request", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
	}
}

// TestOverlapSeeded: seeded sampling draws the same tokens overlapped or
// not (each request's random stream advances once per token either way).
func TestOverlapSeeded(t *testing.T) {
	on := storiesEngine(t, engine.Config{})
	off := storiesEngine(t, engine.Config{DisableOverlapSchedule: true})
	var reqs []engine.Request
	for i, s := range storyPrompts {
		p := sample.DefaultParams()
		p.Temperature, p.TopP, p.MaxNewTokens = 0.9, 0.95, 30
		seed := uint64(100 + i)
		p.Seed = &seed
		reqs = append(reqs, engine.Request{Prompt: s, Sampling: p})
	}
	got, want := runMix(t, on, reqs), runMix(t, off, reqs)
	for i := range reqs {
		if got[i] != nil && want[i] != nil && !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
			t.Errorf("prompt %q: overlapped %v, synchronous %v", storyPrompts[i], got[i].OutputIDs, want[i].OutputIDs)
		}
	}
	if on.Stats().OverlapSteps == 0 {
		t.Errorf("no step overlapped")
	}
}
