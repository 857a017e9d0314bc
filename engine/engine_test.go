package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
)

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func greedy(maxNew int) sample.Params {
	p := sample.DefaultParams()
	p.Temperature = 0
	p.MaxNewTokens = maxNew
	return p
}

func newEngine(t testing.TB, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatalf("engine.New(%s): %v", cfg.ModelPath, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestStoriesGolden checks the greedy continuation from BOS against
// karpathy's run.c for every format and page size.
func TestStoriesGolden(t *testing.T) {
	var golden struct {
		OutputIDs []int  `json:"output_ids"`
		Text      string `json:"text"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	formats := []struct{ name, model, tok string }{
		{"llama2c", "models/stories260K/stories260K.bin", "models/stories260K/tok512.bin"},
		{"gguf", "models/stories260K/stories260K.gguf", ""},
		{"hf", "models/stories260K-hf", ""},
	}
	for _, f := range formats {
		for _, choice := range attentionChoices() {
			for _, pageSize := range []int{1, 16} {
				t.Run(fmt.Sprintf("%s/%s/page%d", f.name, choiceName(choice), pageSize), func(t *testing.T) {
					cfg := choice
					cfg.ModelPath, cfg.PageSize = shared.Path(t, f.model), pageSize
					if f.tok != "" {
						cfg.TokenizerPath = shared.Path(t, f.tok)
					}
					e := newEngine(t, cfg)
					res, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
					if err != nil {
						t.Fatal(err)
					}
					for i := range golden.OutputIDs {
						if i >= len(res.OutputIDs) || res.OutputIDs[i] != golden.OutputIDs[i] {
							t.Fatalf("token %d differs: got %v, want %v", i, res.OutputIDs[i:min(i+5, len(res.OutputIDs))], golden.OutputIDs[i:min(i+5, len(golden.OutputIDs))])
						}
					}
					if len(res.OutputIDs) != len(golden.OutputIDs) {
						t.Fatalf("got %d tokens, want %d", len(res.OutputIDs), len(golden.OutputIDs))
					}
					// run.c prints a newline after the last token; it is not part of the output.
					if want := strings.TrimSuffix(golden.Text, "\n"); res.Text != want {
						t.Errorf("text differs:\n got %q\nwant %q", res.Text, want)
					}
				})
			}
		}
	}
}

type reference struct {
	InputIDs        []int     `json:"input_ids"`
	PromptLogprobs  []float64 `json:"prompt_logprobs"`
	GreedyPromptLen int       `json:"greedy_prompt_len"`
	GreedyIDs       []int     `json:"greedy_ids"`
	GreedyMargins   []float64 `json:"greedy_margins"`
}

// attentionChoices are the backend settings every reference model is
// checked with: each registered CPU backend alone, and a hybrid pair.
func attentionChoices() []engine.Config {
	var out []engine.Config
	var names []string
	for _, e := range registry.Entries() {
		if slices.Contains(e.Caps.Devices, "cpu") {
			out = append(out, engine.Config{AttentionBackend: e.Name})
			names = append(names, e.Name)
		}
	}
	out = append(out, engine.Config{PrefillBackend: names[len(names)-1], DecodeBackend: names[0]})
	// Chunks of 13 tokens: later chunks attend over a cached prefix.
	return append(out, engine.Config{AttentionBackend: "flash", ChunkedPrefillSize: 13})
}

func choiceName(c engine.Config) string {
	if c.ChunkedPrefillSize > 0 {
		return fmt.Sprintf("%s/chunk%d", c.AttentionBackend, c.ChunkedPrefillSize)
	}
	if c.AttentionBackend != "" {
		return c.AttentionBackend
	}
	return c.PrefillBackend + "," + c.DecodeBackend
}

// TestReferenceModels compares prompt log-probabilities and greedy
// continuations with transformers, for every attention backend.
func TestReferenceModels(t *testing.T) {
	for _, name := range []string{"llama_gqa", "llama_mha_tied", "qwen2_bias", "qwen3_qknorm", "mistral_swa", "gemma2_softcap_swa", "deepseek_v3_mla_moe", "qwen3_yarn", "qwen3_moe", "qwen2_moe", "mixtral", "phi3", "gemma3_text", "gpt_oss"} {
		for _, choice := range attentionChoices() {
			for _, pageSize := range []int{1, 16} {
				t.Run(fmt.Sprintf("%s/%s/page%d", name, choiceName(choice), pageSize), func(t *testing.T) {
					dir := shared.Path(t, "models/reference-tiny/"+name)
					var ref reference
					readJSON(t, filepath.Join(dir, "reference.json"), &ref)
					cfg := choice
					cfg.ModelPath, cfg.PageSize = dir, pageSize
					checkReference(t, newEngine(t, cfg), ref)
				})
			}
		}
	}
}

func checkReference(t *testing.T, e *engine.Engine, ref reference) {
	t.Helper()
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PromptLogprobs) != len(ref.InputIDs) || res.PromptLogprobs[0] != nil {
		t.Fatalf("prompt_logprobs has %d entries (first %v), want %d with a null first", len(res.PromptLogprobs), res.PromptLogprobs[0], len(ref.InputIDs))
	}
	worst := 0.0
	for i, want := range ref.PromptLogprobs {
		got := float64(*res.PromptLogprobs[i+1])
		worst = max(worst, math.Abs(got-want))
		if math.Abs(got-want) > 2e-4 {
			t.Errorf("prompt logprob %d: got %.6f, want %.6f", i+1, got, want)
		}
	}
	t.Logf("max |Δ prompt logprob| = %.2e", worst)

	p := greedy(len(ref.GreedyIDs))
	p.IgnoreEOS = true
	res, err = e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs[:ref.GreedyPromptLen], Sampling: p})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range ref.GreedyIDs {
		if ref.GreedyMargins[i] < 1e-3 {
			t.Logf("stopping the greedy comparison at step %d (margin %.2e)", i, ref.GreedyMargins[i])
			break
		}
		if res.OutputIDs[i] != want {
			t.Fatalf("greedy step %d: got %d, want %d (margin %.3g)", i, res.OutputIDs[i], want, ref.GreedyMargins[i])
		}
	}
}
