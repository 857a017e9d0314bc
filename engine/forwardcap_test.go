package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/engine"
)

// TestForwardCapSplitsBatch: no forward holds more tokens than
// MaxForwardTokens, the size the GPU reserves activation memory for. A
// prompt longer than the cap, arriving while others decode, is cut into
// chunks that fit beside their decode tokens rather than run whole, and
// every request's greedy output is what it is without the cap.
func TestForwardCapSplitsBatch(t *testing.T) {
	long := strings.Repeat("Once upon a time, there was a little girl named Lily. ", 3)
	short := []string{"The cat", "Tom and Sue", "One day"}
	run := func(maxForward int) (map[string]string, engine.Stats, engine.Config) {
		e := storiesEngine(t, engine.Config{MaxRunningRequests: 4, MaxPrefillTokens: 16, ChunkedPrefillSize: 16,
			MaxForwardTokens: maxForward, DisableRadixCache: true})
		out := map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		started := make(chan struct{}, len(short))
		gen := func(p string, first chan<- struct{}) {
			defer wg.Done()
			req := engine.Request{Prompt: p, Sampling: greedy(40)}
			req.OnDelta = func(engine.Delta) {
				if first != nil {
					first <- struct{}{}
					first = nil
				}
			}
			res, err := e.Generate(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			out[p] = res.Text
			mu.Unlock()
		}
		for _, p := range short {
			wg.Add(1)
			go gen(p, started)
		}
		for range short { // the long prompt arrives while these decode
			<-started
		}
		wg.Add(1)
		go gen(long, nil)
		wg.Wait()
		return out, e.Stats(), e.Settings()
	}
	free, freeStats, freeSet := run(0)
	if freeSet.MaxForwardTokens != 16 || freeStats.LargestForward > 16 {
		t.Errorf("default cap %d, largest forward %d: want 16 and within it", freeSet.MaxForwardTokens, freeStats.LargestForward)
	}
	capped, stats, set := run(12)
	if set.MaxForwardTokens != 12 {
		t.Errorf("Settings().MaxForwardTokens %d, want 12", set.MaxForwardTokens)
	}
	if stats.LargestForward != 12 {
		t.Errorf("largest forward %d tokens under a cap of 12: want the cap, filled", stats.LargestForward)
	}
	if stats.PromptTokens < 40 {
		t.Errorf("%d prompt tokens prefilled: the long prompt should exceed the cap several times", stats.PromptTokens)
	}
	for p, want := range free {
		if capped[p] != want {
			t.Errorf("prompt %q under the cap: %q, without it %q", p, capped[p], want)
		}
	}
}
