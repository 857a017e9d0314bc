package engine_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
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

// vlmCases are the vision-language references, with the image grid of
// their stored pixel values (Qwen2-VL's image_grid_thw; zero for Gemma 3).
var vlmCases = []struct {
	name string
	grid [3]int
}{{"qwen2_5_vl", [3]int{1, 4, 6}}, {"gemma3_vl", [3]int{}}}

func promptLogprobs(t *testing.T, e *engine.Engine, ids []int, img engine.Image) []float64 {
	t.Helper()
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ids, Images: []engine.Image{img}, Sampling: greedy(0), PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PromptLogprobs) != len(ids) {
		t.Fatalf("%d prompt logprobs for %d tokens", len(res.PromptLogprobs), len(ids))
	}
	out := make([]float64, len(ids)-1)
	for i := range out {
		out[i] = float64(*res.PromptLogprobs[i+1])
	}
	return out
}

func maxDelta(a, b []float64) float64 {
	worst := 0.0
	for i := range a {
		worst = max(worst, math.Abs(a[i]-b[i]))
	}
	return worst
}

// TestVisionReferences serves the references' prompts with their image.
// The references were made without the processors' token types, so
// transformers gave Qwen2.5-VL 1-D positions and Gemma 3 a causal mask
// over the image; the engine serves the models' own M-RoPE positions and
// bidirectional image spans. The model packages' TestReference match
// transformers under the reference's conditions (4.8e-7 and 4.8e-6); here
// the text before the image must match the reference within 2e-4, and
// every CPU backend at page sizes 1 and 16, chunked prefill included,
// must match the native backend within 2e-4 from the stored pixel values
// and within 1e-2 from image.png through gosling's preprocessing.
func TestVisionReferences(t *testing.T) {
	for _, tc := range vlmCases {
		dir := shared.Path(t, "models/reference-tiny/"+tc.name)
		var ref reference
		readJSON(t, filepath.Join(dir, "reference.json"), &ref)
		stored := engine.Image{Pixels: storedPixels(t, dir, tc.grid)}
		decoded := engine.Image{Decoded: decodedImage(t, dir)}
		base := promptLogprobs(t, newEngine(t, engine.Config{ModelPath: dir, AttentionBackend: "native"}), ref.InputIDs, stored)
		imageAt := slices.Index(ref.InputIDs, 500)
		before := maxDelta(base[:imageAt], ref.PromptLogprobs[:imageAt])
		t.Logf("%s: max |Δ| from the reference %.2e before the image, %.2e overall", tc.name, before, maxDelta(base, ref.PromptLogprobs))
		if before > 2e-4 {
			t.Errorf("%s: before the image, max |Δ prompt logprob| %.2e > 2e-4", tc.name, before)
		}
		for _, choice := range attentionChoices() {
			for _, pageSize := range []int{1, 16} {
				t.Run(fmt.Sprintf("%s/%s/page%d", tc.name, choiceName(choice), pageSize), func(t *testing.T) {
					cfg := choice
					cfg.ModelPath, cfg.PageSize = dir, pageSize
					e := newEngine(t, cfg)
					fromStored := maxDelta(promptLogprobs(t, e, ref.InputIDs, stored), base)
					fromPNG := maxDelta(promptLogprobs(t, e, ref.InputIDs, decoded), base)
					t.Logf("max |Δ| from native: %.2e (stored pixels), %.2e (image.png)", fromStored, fromPNG)
					if fromStored > 2e-4 || fromPNG > 1e-2 {
						t.Errorf("max |Δ prompt logprob| %.2e (stored pixels, limit 2e-4), %.2e (image.png, limit 1e-2)", fromStored, fromPNG)
					}
				})
			}
		}
	}
}
