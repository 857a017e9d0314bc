package gemma2_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/sample"
)

var quiet = slog.New(slog.DiscardHandler)

const refDir = "../../../shared/models/reference-tiny/gemma2_softcap_swa"

func sharedPath(t testing.TB, p string) string {
	t.Helper()
	if _, err := os.Stat(p); err != nil {
		t.Skipf("test data %s not found (the ../shared folder is absent): %v", p, err)
	}
	return p
}

type reference struct {
	InputIDs        []int     `json:"input_ids"`
	PromptLogprobs  []float64 `json:"prompt_logprobs"`
	GreedyPromptLen int       `json:"greedy_prompt_len"`
	GreedyIDs       []int     `json:"greedy_ids"`
	GreedyMargins   []float64 `json:"greedy_margins"`
}

func readReference(t testing.TB, dir string) reference {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return ref
}

func greedy(maxNew int) sample.Params {
	p := sample.DefaultParams()
	p.Temperature = 0
	p.MaxNewTokens = maxNew
	return p
}

// checkReference compares prompt log-probabilities (every position, 2e-4
// absolute) and the greedy continuation (up to the first step whose
// top-1/top-2 margin is below 1e-3) with transformers. It is
// engine/engine_test.go's helper.
func checkReference(t *testing.T, e *engine.Engine, ref reference) {
	t.Helper()
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PromptLogprobs) != len(ref.InputIDs) || res.PromptLogprobs[0] != nil {
		t.Fatalf("prompt_logprobs has %d entries, want %d with a null first", len(res.PromptLogprobs), len(ref.InputIDs))
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
		if i >= len(res.OutputIDs) {
			t.Fatalf("greedy: only %d tokens generated, want %d", len(res.OutputIDs), len(ref.GreedyIDs))
		}
		if res.OutputIDs[i] != want {
			t.Fatalf("greedy step %d: got %d, want %d (margin %.3g)", i, res.OutputIDs[i], want, ref.GreedyMargins[i])
		}
	}
}

// TestReference runs the transformers reference on every registered
// attention backend that can serve Gemma 2 (sliding window + softcap), at
// page sizes 1 and 16, with and without chunked prefill.
func TestReference(t *testing.T) {
	dir := sharedPath(t, refDir)
	ref := readReference(t, dir)
	for _, entry := range registry.ForDevice("cpu") {
		for _, pageSize := range []int{1, 16} {
			for _, chunk := range []int{0, 13} {
				name := fmt.Sprintf("%s/page%d", entry.Name, pageSize)
				if chunk > 0 {
					name += fmt.Sprintf("/chunk%d", chunk)
				}
				t.Run(name, func(t *testing.T) {
					need := attention.Need{Device: "cpu", PageSize: pageSize, HeadDims: []int{32}, SlidingWindow: true, LogitSoftcap: true}
					if why := entry.Caps.Unmet(need); len(why) > 0 {
						t.Skipf("%s cannot serve this model: %v", entry.Name, why)
					}
					cfg := engine.Config{ModelPath: dir, PageSize: pageSize, PageSizeSet: true, AttentionBackend: entry.Name,
						ChunkedPrefillSize: chunk, Logger: quiet}
					if chunk == 0 {
						cfg.ChunkedPrefillSize = -1
					}
					e, err := engine.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					defer e.Close()
					checkReference(t, e, ref)
				})
			}
		}
	}
}

func TestConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(sharedPath(t, refDir), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueryPreAttnScalar != 32 || cfg.AttnLogitSoftcap != 20 || cfg.FinalLogitSoftcap != 15 || cfg.HeadDim != 32 {
		t.Errorf("scalar %v softcaps %v/%v head dim %d", cfg.QueryPreAttnScalar, cfg.AttnLogitSoftcap, cfg.FinalLogitSoftcap, cfg.HeadDim)
	}
	for i, want := range []int{24, 0, 24} {
		if got := cfg.LayerWindow(i); got != want {
			t.Errorf("layer %d window %d, want %d", i, got, want)
		}
	}
}

// TestConfigDefaults checks Gemma2Config's defaults for omitted keys, and
// that null turns a softcap off.
func TestConfigDefaults(t *testing.T) {
	base := `"architectures":["Gemma2ForCausalLM"],"model_type":"gemma2","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"sliding_window":8`
	cfg, err := model.ParseHFConfig([]byte(`{` + base + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueryPreAttnScalar != 256 || cfg.AttnLogitSoftcap != 50 || cfg.FinalLogitSoftcap != 30 {
		t.Errorf("defaults: scalar %v softcaps %v/%v", cfg.QueryPreAttnScalar, cfg.AttnLogitSoftcap, cfg.FinalLogitSoftcap)
	}
	if cfg.LayerWindow(0) != 8 || cfg.LayerWindow(1) != 0 || cfg.LayerWindow(2) != 8 {
		t.Errorf("older configs: even layers slide, got %v", cfg.LayerTypes)
	}
	cfg, err = model.ParseHFConfig([]byte(`{` + base + `,"attn_logit_softcapping":null,"final_logit_softcapping":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AttnLogitSoftcap != 0 || cfg.FinalLogitSoftcap != 0 {
		t.Errorf("null softcaps: %v/%v", cfg.AttnLogitSoftcap, cfg.FinalLogitSoftcap)
	}
}
