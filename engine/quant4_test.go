package engine_test

import (
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
)

// TestQuant4Checkpoints: the engine on the CPU serves AWQ (groups of 32
// and 64), GPTQ (groups of 32 symmetric, one per row min-max in gptq_v2)
// and MXFP4 checkpoints written from reference models against their
// dequantized twins. MXFP4 (bfloat16 panels, exact) and AWQ and GPTQ
// widened with --dtype float32 give the twin's prompt log-probabilities
// within 1e-4, and with --dtype bfloat16 they convert like their twins.
// AWQ and GPTQ served compactly (auto) multiplies its exact 4-bit weights by
// activations quantised to 8 bits per 32 inputs, as the GGUF Q4_0 and
// Q4_K panels do; that rounding alone moves these tiny models' large
// logits by tenths, so the bound is the one those paths meet on the same
// model: no further from the twin than the twin itself served with
// --quantization q8_0 (the same activation rounding, over 8-bit weights),
// and greedy continuations the twin's except at a near-tie.
func TestQuant4Checkpoints(t *testing.T) {
	for _, tc := range []struct {
		model string
		group int                 // 0: MXFP4
		gptq  *random.GPTQOptions // GPTQ, not AWQ
	}{
		{"llama_gqa", 32, nil}, {"qwen3_qknorm", 64, nil}, {"gpt_oss", 0, nil},
		{"llama_gqa", 32, &random.GPTQOptions{Group: 32, Sym: true}},
		{"qwen3_qknorm", -1, &random.GPTQOptions{Group: -1, V2: true}},
	} {
		dir := shared.Path(t, "models/reference-tiny/"+tc.model)
		var ref reference
		readJSON(t, filepath.Join(dir, "reference.json"), &ref)
		quantized, dequantized := t.TempDir(), t.TempDir()
		var err error
		method := map[bool]string{false: "awq", true: "gptq"}[tc.gptq != nil]
		switch {
		case tc.group == 0:
			method = "mxfp4"
			err = random.WriteMXFP4(dir, quantized, dequantized)
		case tc.gptq != nil:
			_, err = random.WriteGPTQ(dir, quantized, dequantized, *tc.gptq)
		default:
			_, err = random.WriteAWQ(dir, quantized, dequantized, tc.group)
		}
		if err != nil {
			t.Fatal(err)
		}
		dtypes := []string{""}
		if tc.group != 0 {
			dtypes = []string{"float32", "bfloat16"}
		}
		for _, dt := range dtypes {
			want := scoreLogprobs(t, engine.Config{ModelPath: dequantized, DType: dt}, ref.InputIDs)
			got := scoreLogprobs(t, engine.Config{ModelPath: quantized, DType: dt}, ref.InputIDs)
			if d := maxDelta(got, want); d > 1e-4 {
				t.Errorf("%s %s (group %d) --dtype %q: prompt log-probabilities off the dequantized twin's by %.3g", tc.model, method, tc.group, dt, d)
			}
		}
		if tc.group == 0 {
			continue
		}
		want := scoreLogprobs(t, engine.Config{ModelPath: dequantized}, ref.InputIDs)
		got := scoreLogprobs(t, engine.Config{ModelPath: quantized}, ref.InputIDs)
		q8 := scoreLogprobs(t, engine.Config{ModelPath: dequantized, Quantization: "q8_0"}, ref.InputIDs)
		d, bound := maxDelta(got, want), maxDelta(q8, want)
		t.Logf("%s %s (group %d) compact: prompt log-probabilities within %.3g of the twin's (its q8_0: %.3g)", tc.model, method, tc.group, d, bound)
		if d > bound {
			t.Errorf("%s %s (group %d) compact: prompt log-probabilities off the twin's by %.3g, more than the twin under q8_0 (%.3g)", tc.model, method, tc.group, d, bound)
		}
		checkGreedyTies(t, tc.model, engine.Config{ModelPath: quantized}, engine.Config{ModelPath: dequantized}, ref.InputIDs, bound)
	}
}

// checkGreedyTies decodes 32 tokens greedily under got and want: the
// tokens must agree up to the first step where want's two best
// log-probabilities are within 2·slack (slack: how far got's may move
// from want's), which can swap them.
func checkGreedyTies(t *testing.T, name string, got, want engine.Config, prompt []int, slack float64) {
	t.Helper()
	const n = 32
	g, _ := generateTop2(t, got, engine.Request{InputIDs: prompt}, n)
	w, top := generateTop2(t, want, engine.Request{InputIDs: prompt}, n)
	for i := range w {
		if g[i] != w[i] {
			gap := top[i][0] - top[i][1]
			t.Logf("%s: first divergence at token %d: %d against the twin's %d, whose top-two gap is %.4f", name, i, g[i], w[i], gap)
			if gap > 2*slack {
				t.Errorf("%s: diverged at token %d (%v vs %v) with a clear twin gap %.4f", name, i, g[:i+1], w[:i+1], gap)
			}
			return
		}
	}
	t.Logf("%s: %d greedy tokens identical to the twin's", name, n)
}
