package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestWindowRegionMatchesReference runs the sliding-window reference model
// with a window region small enough to be used (2 requests, chunks of 10),
// so window pages are freed between chunks and during decode, and checks
// the numerics against transformers.
func TestWindowRegionMatchesReference(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/mistral_swa")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	for _, pageSize := range []int{1, 16} {
		t.Run(fmt.Sprint("page", pageSize), func(t *testing.T) {
			e := newEngine(t, engine.Config{ModelPath: dir, PageSize: pageSize, MaxRunningRequests: 2, ChunkedPrefillSize: 10})
			if e.Stats().SWAPagesTotal == 0 {
				t.Fatal("the window region is not in use")
			}
			checkReference(t, e, ref)
		})
	}
}

// TestWindowMemoryIsBounded generates far past the window and checks that
// the window region never holds more than the window (plus one chunk and a
// page at each end) for the one running request.
func TestWindowMemoryIsBounded(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/mistral_swa") // window 24
	for _, pageSize := range []int{1, 4} {
		t.Run(fmt.Sprint("page", pageSize), func(t *testing.T) {
			e := newEngine(t, engine.Config{ModelPath: dir, PageSize: pageSize, MaxRunningRequests: 2, ChunkedPrefillSize: 8})
			p := greedy(300)
			p.IgnoreEOS = true
			peak := 0
			res, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 65, 69, 73, 77, 81, 85, 89, 93, 97, 101, 105, 109, 113, 117},
				Sampling: p, OnDelta: func(engine.Delta) { peak = max(peak, e.Stats().SWAPagesInUse) }})
			if err != nil {
				t.Fatal(err)
			}
			bound := (24+8+pageSize-1)/pageSize + 2
			t.Logf("%d tokens, peak %d window pages of %d tokens (bound %d), region %d pages", len(res.PromptIDs)+len(res.OutputIDs), peak, pageSize, bound, e.Stats().SWAPagesTotal)
			if peak == 0 || peak > bound {
				t.Fatalf("window pages in use peaked at %d, bound %d", peak, bound)
			}
		})
	}
}

// TestWindowRegionWithPrefixCache: a follow-up request that continues a
// finished one resumes from the cached prefix (the window before the
// resume point is still there) and gets the same tokens as without the
// cache; a request that diverges inside the freed part recomputes.
func TestWindowRegionWithPrefixCache(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/mistral_swa")
	cfg := engine.Config{ModelPath: dir, PageSize: 4, MaxRunningRequests: 2, ChunkedPrefillSize: 8}
	cached := newEngine(t, cfg)
	cfg.DisableRadixCache = true
	plain := newEngine(t, cfg)
	prompt := make([]int, 60)
	for i := range prompt {
		prompt[i] = (i*37 + 11) % 500
	}
	p := greedy(40)
	p.IgnoreEOS = true
	first, err := cached.Generate(context.Background(), engine.Request{InputIDs: prompt, Sampling: p})
	if err != nil {
		t.Fatal(err)
	}
	followUp := append(append(append([]int{}, prompt...), first.OutputIDs...), 7, 8, 9)
	diverging := append(append([]int{}, prompt[:20]...), 3, 3, 3)
	for name, ids := range map[string][]int{"follow-up": followUp, "diverging": diverging} {
		got, err := cached.Generate(context.Background(), engine.Request{InputIDs: ids, Sampling: p})
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.Generate(context.Background(), engine.Request{InputIDs: ids, Sampling: p})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d of %d prompt tokens from the cache", name, got.CachedTokens, len(ids))
		if fmt.Sprint(got.OutputIDs) != fmt.Sprint(want.OutputIDs) {
			t.Fatalf("%s: with cache %v, without %v", name, got.OutputIDs, want.OutputIDs)
		}
		if name == "follow-up" && got.CachedTokens < 80 {
			t.Errorf("follow-up reused only %d tokens", got.CachedTokens)
		}
	}
}
