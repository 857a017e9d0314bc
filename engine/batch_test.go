package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
)

// storiesEngine loads stories260K (GGUF) with the given overrides.
func storiesEngine(t *testing.T, cfg engine.Config) *engine.Engine {
	cfg.ModelPath = shared.Path(t, "models/stories260K/stories260K.gguf")
	return newEngine(t, cfg)
}

var storyPrompts = []string{
	"Once upon a time", "Lily saw a big dog", "The sun was hot.", "Tom and Sue went to the park",
	"One day, a little bird", "The cat", "Mom said,", "There was a tree",
}

func generateAll(t *testing.T, e *engine.Engine, prompts []string, maxNew int) []*engine.Result {
	t.Helper()
	results := make([]*engine.Result, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Generate(context.Background(), engine.Request{Prompt: p, Sampling: greedy(maxNew)})
			if err != nil {
				t.Errorf("prompt %q: %v", p, err)
				return
			}
			results[i] = res
		}()
	}
	wg.Wait()
	return results
}

// TestBatchedEqualsAlone: requests decoded together give exactly what each
// gives alone (continuous batching must not mix requests).
func TestBatchedEqualsAlone(t *testing.T) {
	alone := storiesEngine(t, engine.Config{MaxRunningRequests: 1})
	together := storiesEngine(t, engine.Config{PageSize: 16})
	want := generateAll(t, alone, storyPrompts, 40)
	got := generateAll(t, together, storyPrompts, 40)
	for i := range storyPrompts {
		if want[i] == nil || got[i] == nil {
			continue
		}
		if !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
			t.Errorf("prompt %q: batched %v, alone %v", storyPrompts[i], got[i].OutputIDs, want[i].OutputIDs)
		}
	}
}

// TestRetractionUnderMemoryPressure: with a KV cache too small for all
// requests at once, requests wait or are retracted and re-queued; every
// one completes with the same output and every page comes back.
func TestRetractionUnderMemoryPressure(t *testing.T) {
	roomy := storiesEngine(t, engine.Config{})
	tight := storiesEngine(t, engine.Config{KVCacheTokens: 160, PageSize: 4, ContextLength: 128})
	want := generateAll(t, roomy, storyPrompts, 60)
	got := generateAll(t, tight, storyPrompts, 60)
	for i := range storyPrompts {
		if want[i] == nil || got[i] == nil {
			continue
		}
		if !slices.Equal(got[i].OutputIDs, want[i].OutputIDs) {
			t.Errorf("prompt %q: under pressure %v, roomy %v", storyPrompts[i], got[i].OutputIDs, want[i].OutputIDs)
		}
	}
	st := tight.Stats()
	if st.KVPagesFree+st.KVPagesCached != st.KVPagesTotal {
		t.Errorf("%d free + %d cached of %d pages after all requests finished", st.KVPagesFree, st.KVPagesCached, st.KVPagesTotal)
	}
	if st.Retractions == 0 {
		t.Errorf("expected the tight cache to retract at least one request")
	}
	t.Logf("retractions: %d", st.Retractions)
}

// TestCancelFreesPages: a cancelled request stops and releases its pages.
func TestCancelFreesPages(t *testing.T) {
	e := storiesEngine(t, engine.Config{PageSize: 16})
	ctx, cancel := context.WithCancel(context.Background())
	p := greedy(100000)
	p.IgnoreEOS = true
	var once sync.Once
	res, err := e.Generate(ctx, engine.Request{Prompt: "Once upon a time", Sampling: p,
		OnDelta: func(engine.Delta) { once.Do(cancel) }})
	if err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res == nil || res.FinishReason != engine.FinishAbort {
		t.Fatalf("result %+v, want finish reason abort", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.Stats()
		if st.KVPagesFree+st.KVPagesCached == st.KVPagesTotal && st.Running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pages not freed after cancel: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStopConditions(t *testing.T) {
	e := storiesEngine(t, engine.Config{})
	base, err := e.Generate(context.Background(), engine.Request{Prompt: "Once upon a time", Sampling: greedy(60)})
	if err != nil {
		t.Fatal(err)
	}
	if base.FinishReason != engine.FinishLength || len(base.OutputIDs) != 60 {
		t.Fatalf("finish %s after %d tokens, want length after 60", base.FinishReason, len(base.OutputIDs))
	}
	// Stop string: a word from the middle of the greedy text.
	words := strings.Fields(base.Text)
	stop := words[len(words)/2]
	p := greedy(60)
	p.Stop = []string{stop}
	res, err := e.Generate(context.Background(), engine.Request{Prompt: "Once upon a time", Sampling: p})
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(base.Text, stop)
	if res.FinishReason != engine.FinishStop || res.Text != base.Text[:cut] || res.MatchedStop != stop {
		t.Errorf("stop %q: finish %s, matched %v, text %q, want %q", stop, res.FinishReason, res.MatchedStop, res.Text, base.Text[:cut])
	}
	// Stop token: the 10th generated token.
	p = greedy(60)
	p.StopTokenIDs = []int{base.OutputIDs[9]}
	res, err = e.Generate(context.Background(), engine.Request{Prompt: "Once upon a time", Sampling: p})
	if err != nil {
		t.Fatal(err)
	}
	first := slices.Index(base.OutputIDs, base.OutputIDs[9])
	if res.FinishReason != engine.FinishStop || len(res.OutputIDs) != first+1 {
		t.Errorf("stop token: finish %s after %d tokens, want stop after %d", res.FinishReason, len(res.OutputIDs), first+1)
	}
}

func TestSeedDeterminism(t *testing.T) {
	e := storiesEngine(t, engine.Config{})
	run := func(seed uint64) []int {
		p := greedy(40)
		p.Temperature = 1
		p.Seed = &seed
		res, err := e.Generate(context.Background(), engine.Request{Prompt: "Once upon a time", Sampling: p})
		if err != nil {
			t.Fatal(err)
		}
		return res.OutputIDs
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different outputs:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same 40 tokens")
	}
}

func TestStreamingConcatenatesToText(t *testing.T) {
	e := storiesEngine(t, engine.Config{})
	var streamed strings.Builder
	var ids []int
	res, err := e.Generate(context.Background(), engine.Request{Prompt: "Lily", Sampling: greedy(50),
		OnDelta: func(d engine.Delta) { streamed.WriteString(d.Text); ids = append(ids, d.IDs...) }})
	if err != nil {
		t.Fatal(err)
	}
	if streamed.String() != res.Text || !slices.Equal(ids, res.OutputIDs) {
		t.Errorf("streamed %q / %v, result %q / %v", streamed.String(), ids, res.Text, res.OutputIDs)
	}
}

func TestBadRequests(t *testing.T) {
	e := storiesEngine(t, engine.Config{ContextLength: 64})
	long := strings.Repeat("Once upon a time there was a dog. ", 20)
	cases := []struct {
		name string
		req  engine.Request
		want string
	}{
		{"negative temperature", engine.Request{Prompt: "hi", Sampling: func() (p sample.Params) { p = greedy(5); p.Temperature = -1; return }()}, "temperature"},
		{"token outside vocab", engine.Request{InputIDs: []int{1, 99999}, Sampling: greedy(5)}, "outside the vocabulary"},
		{"prompt too long", engine.Request{Prompt: long, Sampling: greedy(5)}, "context length"},
		{"negative max tokens", engine.Request{Prompt: "hi", Sampling: greedy(-1)}, "max_new_tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Generate(context.Background(), c.req)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, c.want)
			}
		})
	}
	// The engine still works after bad requests.
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: "hi", Sampling: greedy(3)}); err != nil {
		t.Fatal(err)
	}
}

func ExampleEngine_Generate() {
	e, err := engine.New(engine.Config{ModelPath: "../../shared/models/stories260K/stories260K.gguf"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	p := greedy(12)
	res, err := e.Generate(context.Background(), engine.Request{Prompt: "Once upon a time", Sampling: p})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.FinishReason, len(res.OutputIDs))
	// Output: length 12
}

// TestPrefixCacheReuse: a request sharing a prefix with a finished one
// reuses its pages (cached_tokens > 0) and produces the same tokens as
// without the cache.
func TestPrefixCacheReuse(t *testing.T) {
	for _, pageSize := range []int{1, 16} {
		t.Run(fmt.Sprint("page", pageSize), func(t *testing.T) {
			cached := storiesEngine(t, engine.Config{PageSize: pageSize})
			plain := storiesEngine(t, engine.Config{PageSize: pageSize, DisableRadixCache: true})
			prompt := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day"
			for i, p := range []string{prompt, prompt + ", she saw a cat", prompt} {
				got, err := cached.Generate(context.Background(), engine.Request{Prompt: p, Sampling: greedy(30)})
				if err != nil {
					t.Fatal(err)
				}
				want, err := plain.Generate(context.Background(), engine.Request{Prompt: p, Sampling: greedy(30)})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.OutputIDs, want.OutputIDs) {
					t.Fatalf("request %d: with prefix cache %v, without %v", i, got.OutputIDs, want.OutputIDs)
				}
				if i > 0 && got.CachedTokens < len(got.PromptIDs)/2 {
					t.Errorf("request %d: %d of %d prompt tokens cached", i, got.CachedTokens, len(got.PromptIDs))
				}
				if want.CachedTokens != 0 {
					t.Errorf("cache disabled but %d tokens cached", want.CachedTokens)
				}
			}
			if st := cached.Stats(); st.CachedTokens == 0 || st.KVPagesCached == 0 {
				t.Errorf("stats show no caching: %+v", st)
			}
			if err := cached.FlushCache(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(2 * time.Second)
			for cached.Stats().KVPagesCached != 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if st := cached.Stats(); st.KVPagesFree != st.KVPagesTotal {
				t.Errorf("after flush: %+v", st)
			}
		})
	}
}

// TestChunkedPrefillMatches: prefilling in chunks of 7 tokens, mixed with
// other requests' decodes, gives the tokens and prompt log-probabilities
// of one-shot prefill.
func TestChunkedPrefillMatches(t *testing.T) {
	oneShot := storiesEngine(t, engine.Config{ChunkedPrefillSize: -1})
	chunked := storiesEngine(t, engine.Config{ChunkedPrefillSize: 7, MaxPrefillTokens: 9, PageSize: 4})
	prompt := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
	req := engine.Request{Prompt: prompt, Sampling: greedy(20), PromptLogprobs: true}
	want, err := oneShot.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// Run concurrently with other requests so chunks share steps with decodes.
	var others sync.WaitGroup
	for _, p := range storyPrompts[:3] {
		others.Add(1)
		go func() {
			defer others.Done()
			chunked.Generate(context.Background(), engine.Request{Prompt: p, Sampling: greedy(40)})
		}()
	}
	got, err := chunked.Generate(context.Background(), req)
	others.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.OutputIDs, want.OutputIDs) {
		t.Fatalf("chunked %v, one-shot %v", got.OutputIDs, want.OutputIDs)
	}
	for i := range want.PromptLogprobs {
		if (want.PromptLogprobs[i] == nil) != (got.PromptLogprobs[i] == nil) {
			t.Fatalf("prompt logprob %d: presence differs", i)
		}
		if want.PromptLogprobs[i] != nil && abs32(*want.PromptLogprobs[i]-*got.PromptLogprobs[i]) > 1e-4 {
			t.Fatalf("prompt logprob %d: chunked %v, one-shot %v", i, *got.PromptLogprobs[i], *want.PromptLogprobs[i])
		}
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func TestLongestPrefixMatchPolicy(t *testing.T) {
	e := storiesEngine(t, engine.Config{SchedulePolicy: "lpm", MaxRunningRequests: 2})
	results := generateAll(t, e, append(storyPrompts, storyPrompts...), 10)
	for i, r := range results {
		if r == nil || len(r.OutputIDs) != 10 {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if _, err := engine.New(engine.Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), SchedulePolicy: "random"}); err == nil {
		t.Fatal("unknown schedule policy accepted")
	}
}

// TestBatchedSeededEqualsAlone: seeded sampling (half the requests with
// penalties) gives the same tokens in a batch, where the requests' tokens
// are drawn side by side on the workers, as alone.
func TestBatchedSeededEqualsAlone(t *testing.T) {
	alone := storiesEngine(t, engine.Config{MaxRunningRequests: 1})
	together := storiesEngine(t, engine.Config{})
	run := func(e *engine.Engine) [][]int {
		out := make([][]int, len(storyPrompts))
		var wg sync.WaitGroup
		for i, prompt := range storyPrompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := greedy(30)
				p.Temperature, p.TopP = 1, 0.9
				seed := uint64(100 + i)
				p.Seed = &seed
				if i%2 == 1 {
					p.RepetitionPenalty = 1.3
				}
				res, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, Sampling: p})
				if err != nil {
					t.Errorf("prompt %q: %v", prompt, err)
					return
				}
				out[i] = res.OutputIDs
			}()
		}
		wg.Wait()
		return out
	}
	want, got := run(alone), run(together)
	for i := range storyPrompts {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("prompt %q: batched %v, alone %v", storyPrompts[i], got[i], want[i])
		}
	}
}
