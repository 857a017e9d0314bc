package engine_test

import (
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
)

// TestQuant4Checkpoints: the engine on the CPU serves AWQ (groups of 32
// and 64) and MXFP4 checkpoints written from reference models with the
// prompt log-probabilities of their dequantized twins, within 1e-4; and
// with --dtype bfloat16 an AWQ checkpoint converts like its twin does.
func TestQuant4Checkpoints(t *testing.T) {
	for _, tc := range []struct {
		model string
		group int // 0: MXFP4
	}{{"llama_gqa", 32}, {"qwen3_qknorm", 64}, {"gpt_oss", 0}} {
		dir := shared.Path(t, "models/reference-tiny/"+tc.model)
		var ref reference
		readJSON(t, filepath.Join(dir, "reference.json"), &ref)
		quantized, dequantized := t.TempDir(), t.TempDir()
		var err error
		if tc.group == 0 {
			err = random.WriteMXFP4(dir, quantized, dequantized)
		} else {
			_, err = random.WriteAWQ(dir, quantized, dequantized, tc.group)
		}
		if err != nil {
			t.Fatal(err)
		}
		dtypes := []string{""}
		if tc.group != 0 {
			dtypes = append(dtypes, "bfloat16")
		}
		for _, dt := range dtypes {
			want := scoreLogprobs(t, engine.Config{ModelPath: dequantized, DType: dt}, ref.InputIDs)
			got := scoreLogprobs(t, engine.Config{ModelPath: quantized, DType: dt}, ref.InputIDs)
			if d := maxDelta(got, want); d > 1e-4 {
				t.Errorf("%s (group %d) --dtype %q: prompt log-probabilities off the dequantized twin's by %.3g", tc.model, tc.group, dt, d)
			}
		}
	}
}
