package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestDummyWeights: --load-format dummy runs from a config.json alone, at
// the config's shapes, deterministically.
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
	// Gemma 2 lists its weights too: the engine builds at Gemma-2-9B's
	// shape (synthetic weights are made only when a matrix is first used).
	gemma := newEngine(t, engine.Config{ModelPath: shared.Path(t, "configs/gemma-2-9b"), LoadFormat: "dummy"})
	if mc := gemma.ModelConfig(); mc.Architecture != "Gemma2ForCausalLM" || mc.NumLayers != 42 || mc.HiddenSize != 3584 {
		t.Fatalf("gemma-2-9b config %+v", mc)
	}
}

// TestDummyDraftModel: under --load-format dummy a STANDALONE draft is
// read as a config.json too, and a draft of the target's config is the
// target itself: it keeps the plain greedy output and accepts nearly
// every drafted token (the draft computes a token in a one-row decode
// step, the target in a multi-row verify step, and with random weights
// the two float orders can pick different argmaxes at a near-tie).
func TestDummyDraftModel(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 256,
		"rms_norm_eps": 1e-5, "rope_theta": 10000, "tie_word_embeddings": false}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	base := engine.Config{ModelPath: dir, LoadFormat: "dummy", DType: "float32", KVCacheTokens: 1024, ContextLength: 256}
	p := greedy(48)
	p.IgnoreEOS = true
	req := []engine.Request{{InputIDs: []int{1, 2, 3, 4}, Sampling: p}}
	want := generateReqs(t, newEngine(t, base), req)
	e := newEngine(t, withSpec(base, engine.Config{SpeculativeAlgorithm: "STANDALONE", SpeculativeDraftModelPath: dir, SpeculativeNumSteps: 3, SpeculativeEagleTopk: 1}))
	got := generateReqs(t, e, req)
	if !slices.Equal(got[0].OutputIDs, want[0].OutputIDs) {
		t.Fatalf("self-drafting dummy:\n%v\nplain %v", got[0].OutputIDs, want[0].OutputIDs)
	}
	if ss := e.SpecStats(); ss.VerifySteps == 0 || ss.AcceptedTokens < ss.DraftedTokens*9/10 {
		t.Errorf("a dummy draft of the target's config accepted %d of %d drafted tokens over %d steps", ss.AcceptedTokens, ss.DraftedTokens, ss.VerifySteps)
	}
}
