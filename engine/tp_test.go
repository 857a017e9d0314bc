package engine_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestTPStoriesGolden runs the golden greedy continuation through the
// whole engine split over two CPU ranks, in every checkpoint format and
// with every attention setting.
func TestTPStoriesGolden(t *testing.T) {
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	for _, f := range []struct{ name, model, tok string }{
		{"llama2c", "models/stories260K/stories260K.bin", "models/stories260K/tok512.bin"},
		{"gguf", "models/stories260K/stories260K.gguf", ""},
		{"hf", "models/stories260K-hf", ""},
	} {
		for _, choice := range attentionChoices() {
			t.Run(f.name+"/"+choiceName(choice), func(t *testing.T) {
				cfg := choice
				cfg.ModelPath, cfg.TPSize, cfg.Device, cfg.PageSize = shared.Path(t, f.model), 2, "cpu", 16
				if f.tok != "" {
					cfg.TokenizerPath = shared.Path(t, f.tok)
				}
				e := newEngine(t, cfg)
				if got := e.Settings().TPSize; got != 2 {
					t.Fatalf("Settings().TPSize = %d, want 2", got)
				}
				res, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1}, Sampling: greedy(len(golden.OutputIDs))})
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range golden.OutputIDs {
					if i >= len(res.OutputIDs) || res.OutputIDs[i] != want {
						t.Fatalf("token %d differs: got %v, want %v", i, res.OutputIDs[i:min(i+5, len(res.OutputIDs))], golden.OutputIDs[i:min(i+5, len(golden.OutputIDs))])
					}
				}
			})
		}
	}
}

// tpModels are the reference-tiny checkpoints of every text architecture
// (the vision-language ones are refused by the sharding plan).
var tpModels = []string{"llama_gqa", "llama_mha_tied", "qwen2_bias", "qwen3_qknorm", "qwen3_yarn", "mistral_swa",
	"phi3", "gemma2_softcap_swa", "gemma3_text", "qwen2_moe", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3_mla_moe"}

// TestTPReferenceModels: through the whole engine at TP=2 on the CPU, each
// reference model's prompt log-probabilities are within 1e-4 of TP=1's
// and within 2e-4 of transformers', and greedy decoding matches both
// (checkReference) wherever the reference's margin is clear.
func TestTPReferenceModels(t *testing.T) {
	type tc struct {
		name  string
		chunk int // chunked prefill: later chunks attend over a cached prefix
	}
	var cases []tc
	for _, name := range tpModels {
		cases = append(cases, tc{name, 0})
	}
	cases = append(cases, tc{"llama_gqa", 13}, tc{"mistral_swa", 13})
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/chunk%d", c.name, c.chunk), func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+c.name)
			var ref reference
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)
			compareTP(t, ref, func(tp int) engine.Config {
				return engine.Config{ModelPath: dir, Device: "cpu", TPSize: tp, PageSize: 16, ChunkedPrefillSize: c.chunk}
			})
		})
	}
}

// compareTP runs ref's prompt through the engines cfg(1) and cfg(2):
// rank 0 of the second holds half the heads, its prompt log-probabilities
// are within 1e-4 of the first's, and it passes checkReference.
func compareTP(t *testing.T, ref reference, cfg func(tp int) engine.Config) {
	t.Helper()
	heads := map[int]int{}
	logprobs := func(tp int) []float64 {
		e := newEngine(t, cfg(tp))
		heads[tp] = e.ModelConfig().NumHeads
		res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(res.PromptLogprobs)-1)
		for i := range out {
			out[i] = float64(*res.PromptLogprobs[i+1])
		}
		if tp > 1 {
			checkReference(t, e, ref)
		}
		return out
	}
	one, two := logprobs(1), logprobs(2)
	if heads[2]*2 != heads[1] {
		t.Fatalf("rank 0 runs %d heads at TP=2, %d at TP=1: the model was not split", heads[2], heads[1])
	}
	worst := 0.0
	for i := range one {
		worst = max(worst, math.Abs(one[i]-two[i]))
	}
	t.Logf("max |Δ prompt logprob| TP=2 vs TP=1 = %.2e", worst)
	if worst > 1e-4 {
		t.Errorf("TP=2 prompt logprobs differ from TP=1 by %.2e (> 1e-4)", worst)
	}
}

// TestTPRefusals: a model whose heads do not split over the ranks is
// refused by engine.New with the reason.
func TestTPRefusals(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa") // 8 heads, 2 KV heads
	_, err := engine.New(engine.Config{ModelPath: dir, Device: "cpu", TPSize: 3})
	if err == nil || !strings.Contains(err.Error(), "--tp-size 3: the model's 8 attention heads do not divide evenly among 3 ranks") {
		t.Fatalf("TPSize 3 on 8 heads: err %v", err)
	}
	_, err = engine.New(engine.Config{ModelPath: dir, Device: "cpu", TPSize: -1})
	if err == nil || !strings.Contains(err.Error(), "--tp-size must not be negative") {
		t.Fatalf("TPSize -1: err %v", err)
	}
}
