package engine_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
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

// TestCPUAutoKVDType: on the CPU, --kv-cache-dtype auto stores a GGUF
// file of quantised blocks' KV in bf16 (half float32's bytes per token),
// keeps float32 for a float32 file and for one widened by --dtype
// float32, and an explicit dtype is taken as given.
func TestCPUAutoKVDType(t *testing.T) {
	dir := t.TempDir()
	shape := random.Shape{Dim: 256, Hidden: 512, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 512, SeqLen: 256, Tied: true, RopeTheta: 10000, NormEps: 1e-5}
	files := map[tensor.DType]string{}
	for _, dt := range []tensor.DType{tensor.Q4_K, tensor.Q8_0, tensor.F32} {
		files[dt] = filepath.Join(dir, dt.String()+".gguf")
		if err := random.Write(files[dt], random.Options{Shape: shape, Format: "gguf", DType: dt, MixQ6K: dt == tensor.Q4_K, Seed: 7}); err != nil {
			t.Fatal(err)
		}
	}
	const f32Bytes = 2 * 2 * 128 * 4 // layers · (K, V) · KV width · 4 bytes
	for _, c := range []struct {
		file        tensor.DType
		dtype, kv   string
		want        string
		bytesPerTok int
	}{
		{tensor.Q4_K, "", "", "bf16", f32Bytes / 2},
		{tensor.Q8_0, "auto", "auto", "bf16", f32Bytes / 2},
		{tensor.Q4_K, "float32", "", "f32", f32Bytes},
		{tensor.Q4_K, "", "float32", "f32", f32Bytes},
		{tensor.Q4_K, "", "fp8_e4m3", "fp8_e4m3", f32Bytes / 4},
		{tensor.F32, "", "", "f32", f32Bytes},
	} {
		e := newEngine(t, engine.Config{ModelPath: files[c.file], Device: "cpu", DType: c.dtype, KVCacheDType: c.kv, KVCacheTokens: 512})
		got := e.Settings().KVCacheDType
		if got != c.want || e.KVBytesPerToken() != c.bytesPerTok {
			t.Errorf("%v file, --dtype %q, --kv-cache-dtype %q: KV %s at %d bytes a token, want %s at %d",
				c.file, c.dtype, c.kv, got, e.KVBytesPerToken(), c.want, c.bytesPerTok)
		}
		res, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1, 5, 9, 200}, Sampling: greedy(4)})
		if err != nil || len(res.OutputIDs) != 4 {
			t.Errorf("%v file, KV %s: %d tokens, %v", c.file, got, len(res.OutputIDs), err)
		}
		e.Close()
	}
}
