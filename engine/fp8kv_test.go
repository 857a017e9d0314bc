package engine_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
)

// referenceModels are the reference-tiny models whose prompt
// log-probabilities transformers computed in float32.
var referenceModels = []string{"llama_gqa", "llama_mha_tied", "qwen2_bias", "qwen3_qknorm", "mistral_swa", "gemma2_softcap_swa", "deepseek_v3_mla_moe"}

// maxPromptLogprobError runs the reference model's prompt with cfg (its
// ModelPath defaults to the model's directory) and returns the largest
// |Δ prompt logprob| against transformers.
func maxPromptLogprobError(t *testing.T, model string, cfg engine.Config) float64 {
	t.Helper()
	dir := shared.Path(t, "models/reference-tiny/"+model)
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	if cfg.ModelPath == "" {
		cfg.ModelPath = dir
	}
	e := newEngine(t, cfg)
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Sampling: greedy(0), PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, want := range ref.PromptLogprobs {
		worst = max(worst, math.Abs(float64(*res.PromptLogprobs[i+1])-want))
	}
	return worst
}

// TestFP8KVAccuracy bounds the prompt log-probability error of an fp8_e4m3
// KV cache on every reference model with every CPU backend, and logs it
// beside bf16's. The bound is what e4m3 allows, not bf16's reach: these
// random models are so sensitive that bf16's 8-bit mantissa already costs
// up to 0.12 nats, and e4m3 rounds 16 times coarser (1.0-1.73 nats). The
// scale does not change that: per-layer scales of 1, 0.1 and 0.025 gave
// maxima of 1.73, 1.75 and 1.75 nats over the seven models, because K and
// V (|x| <= 10) sit inside e4m3's range at any of them.
func TestFP8KVAccuracy(t *testing.T) {
	var table strings.Builder
	for _, model := range referenceModels {
		fmt.Fprintf(&table, "\n%-20s", model)
		for _, backend := range []string{"native", "flash", "splitkv"} {
			for _, dtype := range []string{"bf16", "fp8_e4m3"} {
				worst := maxPromptLogprobError(t, model, engine.Config{KVCacheDType: dtype, AttentionBackend: backend, PageSize: 16})
				fmt.Fprintf(&table, " %s/%s %.3f", backend, dtype, worst)
				if dtype == "fp8_e4m3" && worst > fp8Bound {
					t.Errorf("%s %s: max |Δ prompt logprob| %.3f with an fp8 KV cache, want <= %.2f", model, backend, worst, fp8Bound)
				}
			}
		}
	}
	t.Logf("max |Δ prompt logprob| vs transformers float32:%s", table.String())
}

const fp8Bound = 1.8

// TestFP8KVStories260K: on a trained model (stories260K) an fp8_e4m3 KV
// cache moves prompt log-probabilities from the float32 cache's by at
// most fp8Bound (measured 0.571 on the model's own greedy text and 1.746
// on a written story) and by a mean of 0.12 (0.050 and 0.092), on every
// CPU backend; bf16 beside it costs at most 0.068. Per-layer or per-head
// scales computed from this data (absmax / 448) moved the maxima to
// 0.55-1.09 and the means by less than 0.015, in both directions: the
// error is e4m3's 3-bit mantissa, not its range.
func TestFP8KVStories260K(t *testing.T) {
	path := shared.Path(t, "models/stories260K/stories260K.gguf")
	var golden struct {
		OutputIDs []int `json:"output_ids"`
	}
	readJSON(t, shared.Path(t, "models/stories260K/golden_greedy.json"), &golden)
	prompts := map[string]engine.Request{
		"greedy text": {InputIDs: append([]int{1}, golden.OutputIDs...)},
		"written story": {Prompt: "Once upon a time, there was a little girl named Lily. She liked to play in the garden with her dog, Max. " +
			"One day, Max found a big red ball under a tree. Lily laughed and threw the ball high into the sky. " +
			"The ball fell into the pond, and a frog jumped out. Max barked at the frog, and the frog said, \"Hello!\" " +
			"Lily was surprised. She had never heard a frog talk before. They became friends and played together every day."},
	}
	scores := func(backend, dtype string, req engine.Request) []float64 {
		e := newEngine(t, engine.Config{ModelPath: path, AttentionBackend: backend, KVCacheDType: dtype, PageSize: 16, KVCacheTokens: 2048})
		req.Sampling, req.PromptLogprobs = greedy(0), true
		res, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, lp := range res.PromptLogprobs[1:] {
			out = append(out, float64(*lp))
		}
		return out
	}
	for name, req := range prompts {
		for _, backend := range []string{"native", "flash", "splitkv"} {
			ref := scores(backend, "float32", req)
			for _, dtype := range []string{"bf16", "fp8_e4m3"} {
				got := scores(backend, dtype, req)
				worst, mean := 0.0, 0.0
				for i := range ref {
					d := math.Abs(got[i] - ref[i])
					worst = max(worst, d)
					mean += d / float64(len(ref))
				}
				t.Logf("%s (%d tokens), %s, %s KV: |Δ prompt logprob| vs float32 KV: max %.3f, mean %.4f", name, len(ref), backend, dtype, worst, mean)
				if dtype == "fp8_e4m3" && (worst > fp8Bound || mean > 0.12) {
					t.Errorf("%s, %s: fp8 KV moves prompt logprobs by max %.3f, mean %.4f; want <= %.2f and <= 0.12", name, backend, worst, mean, fp8Bound)
				}
			}
		}
	}
}

// withKVScales copies a reference model into a directory whose weights
// are sharded in two: the model's own file, and one holding
// self_attn.k_scale and v_scale for every layer, as an fp8-calibrated
// checkpoint carries them.
func withKVScales(t *testing.T, model string, layers int, kScale, vScale float32) string {
	t.Helper()
	src := shared.Path(t, "models/reference-tiny/"+model)
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json"} {
		abs, _ := filepath.Abs(filepath.Join(src, f))
		os.Symlink(abs, filepath.Join(dir, f))
	}
	abs, _ := filepath.Abs(filepath.Join(src, "model.safetensors"))
	os.Symlink(abs, filepath.Join(dir, "model-00001-of-00002.safetensors"))
	weightMap := map[string]string{}
	for _, name := range safetensorsNames(t, abs) {
		weightMap[name] = "model-00001-of-00002.safetensors"
	}
	header := map[string]any{}
	var data []byte
	for l := range layers {
		for _, s := range []struct {
			name  string
			value float32
		}{{"k_scale", kScale}, {"v_scale", vScale}} {
			name := fmt.Sprintf("model.layers.%d.self_attn.%s", l, s.name)
			header[name] = map[string]any{"dtype": "F32", "shape": []int{}, "data_offsets": []int{len(data), len(data) + 4}}
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(s.value))
			weightMap[name] = "model-00002-of-00002.safetensors"
		}
	}
	head, _ := json.Marshal(header)
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(head)))
	os.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), append(append(file, head...), data...), 0o644)
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644)
	return dir
}

func safetensorsNames(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+binary.LittleEndian.Uint64(raw)], &header); err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range header {
		if name != "__metadata__" {
			names = append(names, name)
		}
	}
	return names
}

// TestFP8KVScalesFromCheckpoint: a checkpoint's k_scale / v_scale are the
// fp8 cache's scales. Scales of 1 give exactly the unscaled cache's
// results; scales so small that every value saturates (448 · 0.001) wreck
// them, which they could not if the scales were ignored.
func TestFP8KVScalesFromCheckpoint(t *testing.T) {
	const model = "llama_gqa"
	plain := maxPromptLogprobError(t, model, engine.Config{KVCacheDType: "fp8_e4m3", PageSize: 16})
	run := func(k, v float32) float64 {
		return maxPromptLogprobError(t, model, engine.Config{ModelPath: withKVScales(t, model, 3, k, v), KVCacheDType: "fp8_e4m3", PageSize: 16})
	}
	if got := run(1, 1); got != plain {
		t.Errorf("scales of 1 from the checkpoint: max |Δ| %.4f, the unscaled cache %.4f", got, plain)
	}
	if got := run(0.001, 0.001); got < 2*plain {
		t.Errorf("saturating scales from the checkpoint: max |Δ| %.4f, not worse than the unscaled %.4f: were they read?", got, plain)
	}
}
