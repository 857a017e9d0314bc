package server_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestTPServer serves stories260K split over two CPU ranks and talks to
// it over HTTP: the golden greedy continuation through /generate, a
// completion with echoed prompt logprobs through OpenAI's SDK matching
// the one-rank server's within 1e-4, concurrent requests (batched over
// the ranks) each matching its one-rank result, and tp_size reported.
func TestTPServer(t *testing.T) {
	tp, _ := ownServer(t, engine.Config{Device: "cpu", TPSize: 2, MaxRunningRequests: 8})
	one, _ := newServer(t)

	golden := struct{ OutputIDs []int }{shared.StoriesGolden(t)}
	status, gen := call(t, "POST", tp.URL+"/generate", map[string]any{"input_ids": []int{1},
		"sampling_params": map[string]any{"temperature": 0, "max_new_tokens": len(golden.OutputIDs)}})
	ids, _ := gen["output_ids"].([]any)
	if status != http.StatusOK || len(ids) != len(golden.OutputIDs) {
		t.Fatalf("TP=2 /generate from BOS: status %d, %d tokens, want %d", status, len(ids), len(golden.OutputIDs))
	}
	for i, want := range golden.OutputIDs {
		if num(ids[i]) != want {
			t.Fatalf("TP=2 /generate from BOS: token %d is %d, run.c's golden %d", i, num(ids[i]), want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	completion := func(url, prompt string) *openai.Completion {
		t.Helper()
		client := sdkClient(url)
		resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:       "stories260K.gguf",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens:   openai.Int(24),
			Temperature: openai.Float(0),
			Logprobs:    openai.Int(1),
			Echo:        openai.Bool(true),
		})
		if err != nil {
			t.Fatalf("%s: completion: %v", url, err)
		}
		return resp
	}
	a, b := completion(tp.URL, "Once upon a time"), completion(one.URL, "Once upon a time")
	if a.Choices[0].Text != b.Choices[0].Text {
		t.Errorf("TP=2 text %q, TP=1 %q", a.Choices[0].Text, b.Choices[0].Text)
	}
	la, lb := a.Choices[0].Logprobs.TokenLogprobs, b.Choices[0].Logprobs.TokenLogprobs
	if len(la) != len(lb) || len(la) < 2 {
		t.Fatalf("logprobs: %d at TP=2, %d at TP=1", len(la), len(lb))
	}
	worst := 0.0
	for i := 1; i < len(la); i++ { // entry 0 (the first prompt token) has none
		worst = max(worst, math.Abs(la[i]-lb[i]))
	}
	t.Logf("max |Δ logprob| TP=2 vs TP=1 over the echoed prompt and output: %.2e", worst)
	if worst > 1e-4 {
		t.Errorf("TP=2 logprobs differ from TP=1 by %.2e (> 1e-4)", worst)
	}

	prompts := []string{"Lily went", "The cat", "One day, a", "Tom had a big", "The sun was", "A little bird", "Sam and", "In the park"}
	want := make([]string, len(prompts))
	for i, p := range prompts {
		want[i] = completion(one.URL, p).Choices[0].Text
	}
	got := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := sdkClient(tp.URL)
			resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
				Model: "stories260K.gguf", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(p)},
				MaxTokens: openai.Int(24), Temperature: openai.Float(0), Logprobs: openai.Int(1), Echo: openai.Bool(true),
			})
			if err != nil {
				got[i] = fmt.Sprint("error: ", err)
				return
			}
			got[i] = resp.Choices[0].Text
		}()
	}
	wg.Wait()
	for i := range prompts {
		if got[i] != want[i] {
			t.Errorf("concurrent request %d at TP=2: %q, alone at TP=1: %q", i, got[i], want[i])
		}
	}

	if status, info := call(t, "GET", tp.URL+"/get_server_info", nil); status != http.StatusOK || info["tp_size"] != float64(2) {
		t.Errorf("/get_server_info: status %d, tp_size %v, want 2", status, info["tp_size"])
	}
}
