package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/server"
)

// ownServer serves a fresh engine (not the shared one): these tests need
// their own limits, and metrics that start from zero.
func ownServer(t *testing.T, cfg engine.Config) (*httptest.Server, *engine.Engine) {
	t.Helper()
	cfg.ModelPath, cfg.Logger = modelPath(t), quietLogger()
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	srv, err := server.New(eng, server.Options{Logger: quietLogger()})
	if err != nil {
		eng.Close()
		t.Fatalf("server.New: %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		eng.Close()
	})
	return ts, eng
}

// streamed is what a streaming /generate delivered.
type streamed struct {
	ids    []int  // output_ids of the last event
	text   string // text of the last event
	cached int    // meta_info.cached_tokens of the last event
	events int
}

// streamGenerate posts a streaming /generate and checks the stream's
// shape: each event's output_ids extend the previous ones, and the stream
// ends with [DONE]. Safe to call from any goroutine (it returns errors,
// it does not fail the test).
func streamGenerate(url string, body map[string]any) (streamed, error) {
	var out streamed
	data, _ := json.Marshal(body)
	resp, err := http.Post(url+"/generate", "application/json", bytes.NewReader(data))
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		return out, fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if payload == "[DONE]" {
			return out, nil
		}
		var ev struct {
			Text      string `json:"text"`
			OutputIDs []int  `json:"output_ids"`
			MetaInfo  struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"meta_info"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(payload), &ev); err != nil {
			return out, fmt.Errorf("event %q: %w", payload, err)
		}
		if ev.Error != nil {
			return out, fmt.Errorf("error event: %v", ev.Error)
		}
		if len(ev.OutputIDs) < len(out.ids) || !slices.Equal(ev.OutputIDs[:len(out.ids)], out.ids) {
			return out, fmt.Errorf("event %d's output_ids %v do not extend the previous %v", out.events, ev.OutputIDs, out.ids)
		}
		out.ids, out.text, out.cached = ev.OutputIDs, ev.Text, ev.MetaInfo.CachedTokens
		out.events++
	}
	if err := sc.Err(); err != nil {
		return out, err
	}
	return out, fmt.Errorf("the stream ended without data: [DONE]")
}

func greedyStream(ids []int, maxNew int) map[string]any {
	return map[string]any{"input_ids": ids, "stream": true,
		"sampling_params": map[string]any{"max_new_tokens": maxNew, "temperature": 0, "ignore_eos": true}}
}

// randomIDs is <s> followed by n random ids clear of <unk>, <s>, </s>.
func randomIDs(rng *rand.Rand, n, vocab int) []int {
	ids := []int{1}
	for range n {
		ids = append(ids, 3+rng.IntN(vocab-3))
	}
	return ids
}

// TestConcurrentStreamsMatchAlone is issue 4's first acceptance test: 64
// streaming greedy requests with distinct prompts, all in flight together,
// each stream equal to the same request run alone. Batching (and prefix
// sharing) must not change results.
func TestConcurrentStreamsMatchAlone(t *testing.T) {
	const n, maxNew = 64, 24
	ts, eng := ownServer(t, engine.Config{MaxRunningRequests: n, ContextLength: 512})
	vocab := eng.ModelConfig().VocabSize
	rng := rand.New(rand.NewPCG(4, 64))
	prompts := make([][]int, n)
	for i := range prompts {
		prompts[i] = randomIDs(rng, 4+rng.IntN(60), vocab) // uneven lengths: ragged batches
	}

	alone := make([]streamed, n)
	for i, p := range prompts {
		var err error
		if alone[i], err = streamGenerate(ts.URL, greedyStream(p, maxNew)); err != nil {
			t.Fatalf("request %d alone: %v", i, err)
		}
		if len(alone[i].ids) != maxNew {
			t.Fatalf("request %d alone generated %d tokens, want %d", i, len(alone[i].ids), maxNew)
		}
	}
	// From an empty cache, so that the concurrent prompts are computed in
	// batches rather than read back from the runs above.
	if err := eng.FlushCache(); err != nil {
		t.Fatal(err)
	}

	var peak atomic.Int64
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			peak.Store(max(peak.Load(), int64(eng.Stats().Running)))
			select {
			case <-stopWatch:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	together := make([]streamed, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			<-start
			together[i], errs[i] = streamGenerate(ts.URL, greedyStream(p, maxNew))
		})
	}
	close(start)
	wg.Wait()
	close(stopWatch)
	<-watched

	for i := range n {
		switch {
		case errs[i] != nil:
			t.Errorf("request %d with the others: %v", i, errs[i])
		case !slices.Equal(together[i].ids, alone[i].ids) || together[i].text != alone[i].text:
			t.Errorf("request %d: batched output differs from its output alone\n got %v %q\nwant %v %q",
				i, together[i].ids, together[i].text, alone[i].ids, alone[i].text)
		case together[i].events < 2:
			t.Errorf("request %d arrived in %d event(s): not streamed", i, together[i].events)
		}
	}
	// Not a timing threshold: with 64 requests submitted at once and 24
	// steps each, the scheduler must have run several of them together.
	if p := peak.Load(); p < 2 {
		t.Errorf("at most %d request(s) ran at once; the requests were not batched", p)
	}
	t.Logf("peak running requests: %d of %d", peak.Load(), n)
	waitIdle(t, eng)
}

// TestPrefixHeavyCacheHitRate sends requests that share a long prefix: the
// cache hit rate in /metrics rises above 0 and the responses report the
// prefix as cached; with the radix cache disabled both stay at 0.
func TestPrefixHeavyCacheHitRate(t *testing.T) {
	const prefixLen, suffixLen, n = 160, 8, 8
	for _, disabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("disable_radix_cache=%v", disabled), func(t *testing.T) {
			ts, eng := ownServer(t, engine.Config{MaxRunningRequests: n, ContextLength: 512, DisableRadixCache: disabled})
			vocab := eng.ModelConfig().VocabSize
			rng := rand.New(rand.NewPCG(5, 5))
			prefix := randomIDs(rng, prefixLen-1, vocab)
			prompts := make([][]int, n)
			for i := range prompts {
				prompts[i] = append(slices.Clone(prefix), randomIDs(rng, suffixLen, vocab)[1:]...)
			}
			if v := metric(t, ts.URL, "gosling:cache_hit_rate"); v != 0 {
				t.Fatalf("cache_hit_rate %v on a new server", v)
			}
			// The first request computes the prefix; the others, together,
			// find it cached.
			first, err := streamGenerate(ts.URL, greedyStream(prompts[0], 8))
			if err != nil {
				t.Fatal(err)
			}
			results := make([]streamed, n)
			errs := make([]error, n)
			results[0] = first
			var wg sync.WaitGroup
			for i := 1; i < n; i++ {
				wg.Go(func() { results[i], errs[i] = streamGenerate(ts.URL, greedyStream(prompts[i], 8)) })
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				want := prefixLen // the shared prefix, whatever else matches
				if i == 0 || disabled {
					want = 0
				}
				if got := results[i].cached; got < want || disabled && got != 0 {
					t.Errorf("request %d: %d cached prompt tokens, want at least %d", i, got, want)
				}
			}
			rate := metric(t, ts.URL, "gosling:cache_hit_rate")
			if disabled && rate != 0 || !disabled && rate <= 0.5 {
				// 7 of 8 prompts take 160 of their 168 tokens from the
				// cache: about 0.8 of the prompt tokens are hits.
				t.Errorf("cache_hit_rate %v after the prefix-heavy requests", rate)
			}
			t.Logf("cache_hit_rate %.3f", rate)
			waitIdle(t, eng)
		})
	}
}
