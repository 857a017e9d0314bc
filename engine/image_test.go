package engine_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/vision"
)

func storedPixels(t *testing.T, dir string, grid [3]int) *vision.Pixels {
	t.Helper()
	px, err := vision.ReadPixelValues(filepath.Join(dir, "pixel_values.safetensors"), grid)
	if err != nil {
		t.Fatal(err)
	}
	return px
}

func decodedImage(t *testing.T, dir string) *vision.Image {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := vision.Decode(data, vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// vlmCases are the vision-language references: the image grid of their
// stored pixel values (Qwen2-VL's image_grid_thw; zero for Gemma 3).
// tol is the allowed max |Δ prompt logprob| from the stored pixels:
// 2e-4 (float32), except Qwen2.5-VL, whose reference gave every token a
// 1-D text position while the engine serves the model's 3-D M-RoPE
// positions; model/qwen2vl's TestReference shows the difference is that
// alone (4.8e-7 with 1-D positions, 2.95e-4 with M-RoPE).
var vlmCases = []struct {
	name string
	grid [3]int
	tol  float64
}{{"qwen2_5_vl", [3]int{1, 4, 6}, 3.5e-4}, {"gemma3_vl", [3]int{}, 2e-4}}

// promptLogprobDelta scores the reference prompt with the image and
// returns the largest |Δ| from transformers' log-probabilities.
func promptLogprobDelta(t *testing.T, e *engine.Engine, ref reference, img engine.Image) float64 {
	t.Helper()
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ref.InputIDs, Images: []engine.Image{img}, Sampling: greedy(0), PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PromptLogprobs) != len(ref.InputIDs) {
		t.Fatalf("%d prompt logprobs for %d tokens", len(res.PromptLogprobs), len(ref.InputIDs))
	}
	worst := 0.0
	for i, want := range ref.PromptLogprobs {
		worst = max(worst, math.Abs(float64(*res.PromptLogprobs[i+1])-want))
	}
	return worst
}

// TestVisionReferences: from the stored pixel values, the prompt
// log-probabilities match transformers (within tol) on every CPU backend
// at page sizes 1 and 16 (chunked prefill included); from image.png
// through gosling's preprocessing, within 1e-2 (in fact the same, as the
// pixels match to 2.4e-7).
func TestVisionReferences(t *testing.T) {
	for _, tc := range vlmCases {
		for _, choice := range attentionChoices() {
			for _, pageSize := range []int{1, 16} {
				t.Run(fmt.Sprintf("%s/%s/page%d", tc.name, choiceName(choice), pageSize), func(t *testing.T) {
					dir := sharedPath(t, "models/reference-tiny/"+tc.name)
					var ref reference
					readJSON(t, filepath.Join(dir, "reference.json"), &ref)
					cfg := choice
					cfg.ModelPath, cfg.PageSize = dir, pageSize
					e := newEngine(t, cfg)
					stored := promptLogprobDelta(t, e, ref, engine.Image{Pixels: storedPixels(t, dir, tc.grid)})
					decoded := promptLogprobDelta(t, e, ref, engine.Image{Decoded: decodedImage(t, dir)})
					t.Logf("max |Δ prompt logprob|: %.2e from the stored pixel values, %.2e from image.png", stored, decoded)
					if stored > tc.tol || decoded > 1e-2 {
						t.Errorf("max |Δ prompt logprob| %.2e (stored pixels, limit %.1e), %.2e (image.png, limit 1e-2)", stored, tc.tol, decoded)
					}
				})
			}
		}
	}
}
