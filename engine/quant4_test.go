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
// and MXFP4 checkpoints written from reference models with the prompt
// log-probabilities of their dequantized twins, within 1e-4: MXFP4 in
// bfloat16 panels, AWQ and GPTQ compact in I4 panels over float32
// activations, and with --dtype float32 widened exactly; with --dtype
// bfloat16 AWQ and GPTQ convert like their twins do.
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
			dtypes = append(dtypes, "float32", "bfloat16")
		}
		// Chunks of 4 tokens: one tile each, through the CPU's I4 kernels
		// (longer chunks widen the I4 blocks for the F32 kernels).
		for _, chunk := range []int{0, 4} {
			for _, dt := range dtypes {
				want := scoreLogprobs(t, engine.Config{ModelPath: dequantized, DType: dt, ChunkedPrefillSize: chunk}, ref.InputIDs)
				got := scoreLogprobs(t, engine.Config{ModelPath: quantized, DType: dt, ChunkedPrefillSize: chunk}, ref.InputIDs)
				d := maxDelta(got, want)
				t.Logf("%s %s (group %d) --dtype %q, chunks of %d: prompt log-probabilities within %.3g of the dequantized twin's", tc.model, method, tc.group, dt, chunk, d)
				if d > 1e-4 {
					t.Errorf("%s %s (group %d) --dtype %q, chunks of %d: prompt log-probabilities off the dequantized twin's by %.3g", tc.model, method, tc.group, dt, chunk, d)
				}
			}
		}
	}
}
