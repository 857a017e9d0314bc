package engine_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestKVCacheDTypes runs a reference model with bf16 and fp8 KV storage:
// the cache stores the narrower type (bytes per token shrink), every
// backend computes the same values from the quantised cache, and the
// log-probabilities stay near transformers' float32 ones (this tiny
// random model has large activations, so fp8's 3 mantissa bits cost a
// few tenths of a nat at worst).
func TestKVCacheDTypes(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	for _, c := range []struct {
		dtype         string
		bytesPerToken int
		meanTol       float64
	}{{"float32", 384, 1e-5}, {"bf16", 192, 3e-2}, {"fp8_e4m3", 96, 0.5}} {
		var first []float64
		for _, backend := range []string{"native", "flash", "splitkv"} {
			t.Run(c.dtype+"/"+backend, func(t *testing.T) {
				e := newEngine(t, engine.Config{ModelPath: dir, KVCacheDType: c.dtype, AttentionBackend: backend, PageSize: 16})
				if got := e.KVBytesPerToken(); got != c.bytesPerToken {
					t.Errorf("KV bytes per token %d, want %d", got, c.bytesPerToken)
				}
				res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
				if err != nil {
					t.Fatal(err)
				}
				var got []float64
				sum := 0.0
				for i, want := range ref.PromptLogprobs {
					v := float64(*res.PromptLogprobs[i+1])
					got = append(got, v)
					sum += math.Abs(v - want)
				}
				mean := sum / float64(len(got))
				t.Logf("mean |Δ prompt logprob| vs float32 transformers = %.2e", mean)
				if mean > c.meanTol {
					t.Errorf("mean |Δ| %.3g exceeds %.3g", mean, c.meanTol)
				}
				if first == nil {
					first = got
					return
				}
				// Summation order differs between backends; under fp8 a
				// last-bit difference can flip a later layer's rounding.
				agree := 1e-4
				if c.dtype == "fp8_e4m3" {
					agree = 1e-3
				}
				for i := range got {
					if math.Abs(got[i]-first[i]) > agree {
						t.Fatalf("position %d: %s gives %.6f, native %.6f from the same %s cache", i+1, backend, got[i], first[i], c.dtype)
					}
				}
			})
		}
	}
	if _, err := engine.New(engine.Config{ModelPath: dir, KVCacheDType: "int4"}); err == nil {
		t.Fatal("unknown KV cache dtype accepted")
	}
}
