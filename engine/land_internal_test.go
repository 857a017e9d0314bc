package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
)

// TestFailedStepCachesNothing: a request whose launched step fails (its
// forward or its sampling) ends as aborted, and what the step would have
// computed is not counted, so the prefix cache takes none of the KV the
// step never wrote and every page comes back; the same prompt run to the
// end is cached (the control that cached_tokens can be nonzero here).
func TestFailedStepCachesNothing(t *testing.T) {
	prompt := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day"
	params := sample.DefaultParams()
	params.Temperature, params.MaxNewTokens = 0, 4
	for _, pageSize := range []int{1, 16} {
		t.Run(fmt.Sprint("page", pageSize), func(t *testing.T) {
			e, err := New(Config{ModelPath: shared.Path(t, "models/stories260K/stories260K.gguf"), PageSize: pageSize})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			injected := errors.New("forward: injected failure")
			var r *request
			var computed, inFlight int
			done := make(chan error)
			// On the scheduler goroutine, between steps: one step
			// launched as Engine.step launches it, then landed as failed.
			e.control <- func() {
				var err error
				if r, err = e.newRequest(Request{Prompt: prompt, Sampling: params}); err != nil {
					done <- err
					return
				}
				waiting := []*request{r}
				running := e.applyPlan(e.sched.Schedule(waiting, nil), &waiting)
				chunks := e.sched.Fill(running, nil)
				_, rows := e.rn.Build(chunks, nil, false)
				e.launched(chunks, rows)
				computed, inFlight = r.Computed, r.InFlight
				e.landFailed(chunks, rows, injected)
				done <- nil
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if computed != r.NumPrompt || inFlight != 1 {
				t.Fatalf("launched: %d of %d tokens computed, %d in flight; want the prompt and 1", computed, r.NumPrompt, inFlight)
			}
			if !r.ended || r.result.FinishReason != FinishAbort || !errors.Is(r.err, injected) {
				t.Fatalf("after the failed step: ended %v, %+v, %v", r.ended, r.result, r.err)
			}
			if st := e.Stats(); st.KVPagesCached != 0 || st.KVPagesFree != st.KVPagesTotal {
				t.Errorf("after the failed step: %d pages cached, %d of %d free", st.KVPagesCached, st.KVPagesFree, st.KVPagesTotal)
			}
			for i, want := range []bool{false, true} {
				res, err := e.Generate(context.Background(), Request{Prompt: prompt, Sampling: params})
				if err != nil {
					t.Fatal(err)
				}
				if cached := res.CachedTokens > 0; cached != want {
					t.Errorf("run %d after the failed step: %d prompt tokens cached", i, res.CachedTokens)
				}
			}
		})
	}
}
