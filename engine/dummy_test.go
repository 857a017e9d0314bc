package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
)

// TestDummyWeights: --load-format dummy runs from a config.json alone, at
// the config's shapes, deterministically; architectures without a weight
// list are refused by name.
func TestDummyWeights(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1000, "max_position_embeddings": 256,
		"rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": false}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() []int {
		e := newEngine(t, engine.Config{ModelPath: dir, LoadFormat: "dummy"})
		res, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1, 2, 3}, Sampling: greedy(8)})
		if err != nil {
			t.Fatal(err)
		}
		if mc := e.ModelConfig(); mc.NumLayers != 2 || !mc.QKNorm {
			t.Fatalf("config %+v", mc)
		}
		return res.OutputIDs
	}
	a, b := run(), run()
	if len(a) != 8 || !slices.Equal(a, b) {
		t.Fatalf("dummy runs differ or are short: %v vs %v", a, b)
	}
	gemma := sharedPath(t, "configs/gemma-2-9b")
	if _, err := engine.New(engine.Config{ModelPath: gemma, LoadFormat: "dummy"}); err == nil || !strings.Contains(err.Error(), "not available for Gemma2ForCausalLM") {
		t.Fatalf("err = %v", err)
	}
}
