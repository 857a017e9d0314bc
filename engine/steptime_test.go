package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestTimeSteps: the step timings come back for every batch size and
// shape (a decode step, then a chain and a tree of each size), each with
// its timed steps; the timed sequences give their KV pages back, and the
// engine decodes as before afterwards. Wrong options, and an engine that
// is not speculative, are refused with the setting to change. Times are
// measured, never checked.
func TestTimeSteps(t *testing.T) {
	model := shared.Path(t, storiesGGUF)
	cfg := engine.Config{ModelPath: model, PageSize: 16, KVCacheTokens: 4096, MaxRunningRequests: 4, ContextLength: 256}
	plain := newEngine(t, cfg)
	want := generateReqs(t, plain, []engine.Request{{Prompt: copyPrompt, Sampling: greedy(40)}})
	if _, err := plain.TimeSteps(context.Background(), engine.StepTimingOptions{Batches: []int{1}, DraftTokens: []int{4}, Context: 8, Repeat: 1}); err == nil ||
		!strings.Contains(err.Error(), "--speculative-algorithm") {
		t.Errorf("a plain engine: %v", err)
	}
	cfg.SpeculativeAlgorithm = "NGRAM"
	e := newEngine(t, cfg)
	o := engine.StepTimingOptions{Batches: []int{1, 3}, DraftTokens: []int{2, 5}, Context: 40, Repeat: 2}
	steps, err := e.TimeSteps(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		got = append(got, fmt.Sprintf("%s/%d/%d", s.Shape, s.Batch, s.DraftTokens))
		if len(s.Seconds) != o.Repeat || slices.ContainsFunc(s.Seconds, func(x float64) bool { return x <= 0 }) || s.Graphs != 0 {
			t.Errorf("%+v: want %d positive times and no graphs on the CPU", s, o.Repeat)
		}
	}
	wantShapes := []string{"decode/1/1", "chain/1/2", "tree/1/2", "chain/1/5", "tree/1/5", "decode/3/1", "chain/3/2", "tree/3/2", "chain/3/5", "tree/3/5"}
	if !slices.Equal(got, wantShapes) {
		t.Errorf("shapes %v, want %v", got, wantShapes)
	}
	if st := e.Stats(); st.KVPagesFree != st.KVPagesTotal {
		t.Errorf("%d of %d pages free after the timings", st.KVPagesFree, st.KVPagesTotal)
	}
	after := generateReqs(t, e, []engine.Request{{Prompt: copyPrompt, Sampling: greedy(40)}})
	if !slices.Equal(after[0].OutputIDs, want[0].OutputIDs) {
		t.Errorf("after the timings:\n%v\nplain %v", after[0].OutputIDs, want[0].OutputIDs)
	}
	for _, bad := range []struct {
		o    engine.StepTimingOptions
		want string
	}{
		{engine.StepTimingOptions{Batches: []int{5}, DraftTokens: []int{4}, Context: 8, Repeat: 1}, "--max-running-requests 4"},
		{engine.StepTimingOptions{Batches: []int{1}, DraftTokens: []int{1}, Context: 8, Repeat: 1}, "at least 2 tokens"},
		{engine.StepTimingOptions{Batches: []int{1}, DraftTokens: []int{8}, Context: 250, Repeat: 1}, "--context-length 256"},
		{engine.StepTimingOptions{Batches: []int{1}, DraftTokens: []int{8}, Context: 8}, "repeat"},
	} {
		if _, err := e.TimeSteps(context.Background(), bad.o); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want an error with %q", bad.o, err, bad.want)
		}
	}
}
