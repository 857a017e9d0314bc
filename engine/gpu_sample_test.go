package engine_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
)

// Sampling on the device (engine/runner/sample.go), end to end on
// stories260K. Skipped without a GPU.

func storiesGPU(t *testing.T, device string) *engine.Engine {
	t.Helper()
	return newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), Device: device,
		MaxRunningRequests: 8, ContextLength: 512})
}

// generateRequests runs the requests at the same time, so they share steps.
func generateRequests(t *testing.T, eng *engine.Engine, reqs []engine.Request) []*engine.Result {
	t.Helper()
	out := make([]*engine.Result, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = eng.Generate(context.Background(), reqs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return out
}

var gpuSamplePrompts = [][]int{{1}, {1, 403, 407}, {1, 365, 122, 263}, {1, 90}, {1, 320, 291}}

// TestGPUDeviceSamplingGreedy: greedy requests drawn on the device give the
// CPU's tokens, alone and batched, next to requests the host samples
// (logprobs, a repetition penalty) in the same steps.
func TestGPUDeviceSamplingGreedy(t *testing.T) {
	needGPU(t)
	var reqs []engine.Request
	for _, p := range gpuSamplePrompts {
		reqs = append(reqs, engine.Request{InputIDs: p, Sampling: greedy(120)})
	}
	// Host-sampled neighbours: logprobs, prompt logprobs, a penalty.
	reqs = append(reqs, engine.Request{InputIDs: []int{1, 403}, Sampling: greedy(60), Logprobs: true, TopLogprobs: 2})
	reqs = append(reqs, engine.Request{InputIDs: []int{1, 365, 122}, Sampling: greedy(60), PromptLogprobs: true})
	pen := greedy(60)
	pen.RepetitionPenalty = 1.3
	reqs = append(reqs, engine.Request{InputIDs: []int{1, 90}, Sampling: pen})

	want := generateRequests(t, storiesGPU(t, "cpu"), reqs)
	gpu := storiesGPU(t, "cuda")
	got := generateRequests(t, gpu, reqs)
	for i := range reqs {
		if !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
			t.Errorf("request %d (%v): GPU %v, CPU %v", i, reqs[i].InputIDs, got[i].OutputIDs, want[i].OutputIDs)
		}
	}
	if lp := got[5].OutputLogprobs; len(lp) != len(got[5].OutputIDs) || len(got[5].TopLogprobs) != len(lp) {
		t.Errorf("logprobs request: %d logprobs, %d top lists for %d tokens", len(lp), len(got[5].TopLogprobs), len(got[5].OutputIDs))
	}
	if pl := got[6].PromptLogprobs; len(pl) != 3 || pl[0] != nil || pl[1] == nil || pl[2] == nil {
		t.Errorf("prompt logprobs %v", pl)
	}
	// Alone, one at a time: the same again.
	for i, r := range reqs[:len(gpuSamplePrompts)] {
		res := generateRequests(t, gpu, []engine.Request{r})[0]
		if !slices.Equal(res.OutputIDs, want[i].OutputIDs) {
			t.Errorf("request %d alone: GPU %v, CPU %v", i, res.OutputIDs, want[i].OutputIDs)
		}
	}
}

// TestGPUDeviceSamplingSeeded: a seeded top-k/top-p/min-p request draws
// the same tokens every time, alone or batched with others at another row;
// another seed draws other tokens; unseeded requests vary.
func TestGPUDeviceSamplingSeeded(t *testing.T) {
	needGPU(t)
	gpu := storiesGPU(t, "cuda")
	seeded := func(seed uint64) sample.Params {
		p := sample.DefaultParams()
		p.Temperature, p.TopK, p.TopP, p.MinP, p.MaxNewTokens, p.IgnoreEOS = 1.1, 40, 0.9, 0.02, 150, true
		p.Seed = &seed
		return p
	}
	req := engine.Request{InputIDs: []int{1, 403, 407}, Sampling: seeded(7)}
	first := generateRequests(t, gpu, []engine.Request{req})[0].OutputIDs
	if len(first) != 150 {
		t.Fatalf("%d tokens, want 150", len(first))
	}
	// Batched: other requests first, so req sits at another row.
	batch := []engine.Request{
		{InputIDs: []int{1}, Sampling: greedy(100)},
		{InputIDs: []int{1, 90}, Sampling: seeded(8)},
		req,
		{InputIDs: []int{1, 403, 407}, Sampling: seeded(9)},
	}
	res := generateRequests(t, gpu, batch)
	if !slices.Equal(res[2].OutputIDs, first) {
		t.Errorf("the seeded request batched drew\n%v\nalone\n%v", res[2].OutputIDs, first)
	}
	if slices.Equal(res[3].OutputIDs, first) {
		t.Error("seeds 7 and 9 drew the same 150 tokens")
	}
	again := generateRequests(t, gpu, []engine.Request{req})[0].OutputIDs
	if !slices.Equal(again, first) {
		t.Errorf("the seeded request drew\n%v\nthen\n%v", first, again)
	}
	// Without a seed, two runs differ (each draws its own seed).
	p := seeded(0)
	p.Seed = nil
	a := generateRequests(t, gpu, []engine.Request{{InputIDs: []int{1}, Sampling: p}})[0].OutputIDs
	b := generateRequests(t, gpu, []engine.Request{{InputIDs: []int{1}, Sampling: p}})[0].OutputIDs
	if slices.Equal(a, b) {
		t.Error("two unseeded requests drew the same 150 tokens")
	}
}

// TestGPUConstrainedDeviceSampling: structured output on the GPU draws on
// the device, its grammar's mask applied in the sampling kernel: the
// outputs of TestConstrainedGeneration (stories260K) and
// TestConstrainedRealVocab (random weights at qwen3's and llama3's
// vocabularies) validate against their schema, match their regex or parse
// by their EBNF, with no constrained token drawn by the host sampler;
// greedy ones are the CPU's tokens; a constrained request with logprobs in
// the same batch is the only one the host samples.
func TestGPUConstrainedDeviceSampling(t *testing.T) {
	needGPU(t)
	cpu := storiesGPU(t, "cpu")
	gpu := storiesGPU(t, "cuda")
	want, got := constrainedStories(t, cpu), constrainedStories(t, gpu)
	if n := gpu.Stats().HostConstrainedDraws; n != 0 {
		t.Errorf("stories260K: %d constrained tokens drawn on the host, want 0", n)
	}
	for i := range got {
		// constrainedStories's even jobs are greedy.
		if i%4 < 2 && !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
			t.Errorf("greedy constrained request %d: GPU %q, CPU %q", i, got[i].Text, want[i].Text)
		}
	}
	// Beside a request with logprobs, which the host samples (masked).
	c, re := storiesRegex(t, gpu)
	reqs := []engine.Request{
		{Prompt: "Lily", Sampling: greedy(60), Grammar: c},
		{Prompt: "Tom", Sampling: greedy(60), Grammar: c, Logprobs: true},
	}
	before := gpu.Stats().HostConstrainedDraws
	res := generateRequests(t, gpu, reqs)
	for i, r := range res {
		if !re.MatchString(r.Text) || r.FinishReason != engine.FinishStop {
			t.Errorf("request %d: %q (%s) does not match %s", i, r.Text, r.FinishReason, re)
		}
	}
	if n := gpu.Stats().HostConstrainedDraws - before; n != len(res[1].OutputIDs) {
		t.Errorf("%d constrained tokens drawn on the host, want the logprobs request's %d", n, len(res[1].OutputIDs))
	}

	constrainedRealVocab(t, "cuda", func(t *testing.T, e *engine.Engine) {
		if n := e.Stats().HostConstrainedDraws; n != 0 {
			t.Errorf("%d constrained tokens drawn on the host, want 0", n)
		}
	})
}
