package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	img, err := vision.ReadFile(filepath.Join(dir, "image.png"), vision.DefaultLimits)
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

// pngImage decodes img after a round trip through PNG, as a client's
// image arrives.
func pngImage(t *testing.T, img image.Image) *vision.Image {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	out, err := vision.Decode(buf.Bytes(), vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// otherImage is a second test image unlike the references' (a gradient),
// of its own size.
func otherImage(t *testing.T, w, h int) *vision.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(3 * x), uint8(5 * y), uint8(x * y), 255})
		}
	}
	return pngImage(t, img)
}

// refImageRun is where the reference prompt's image placeholders sit:
// [vision start, image tokens…, vision end] is ids[at-1 : end+1].
func refImageRun(ids []int) (at, end int) {
	at = slices.Index(ids, 500)
	end = at
	for end < len(ids) && ids[end] == 500 {
		end++
	}
	return at, end
}

// withPlaceholders inserts, after position pos of ids, one single-token
// placeholder run [vision start, image, vision end] per extra image, with
// a text token before each.
func withPlaceholders(ids []int, pos, extra int) []int {
	out := slices.Clone(ids[:pos])
	for i := range extra {
		out = append(out, 40+i, 501, 500, 502)
	}
	return append(out, ids[pos:]...)
}

func generateLogprobs(t *testing.T, e *engine.Engine, ids []int, imgs []engine.Image) ([]float64, *engine.Result) {
	t.Helper()
	res, err := e.Generate(context.Background(), engine.Request{InputIDs: ids, Images: imgs, Sampling: greedy(1), PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(res.PromptLogprobs)-1)
	for i := range out {
		out[i] = float64(*res.PromptLogprobs[i+1])
	}
	return out, res
}

// TestPanAndScanViews: Gemma 3 with pan-and-scan reads the whole image
// and its crops as images of their own. The reference image (80×64) with
// pan_and_scan_min_crop_size 32 gives two 40×64 crops; the request must
// score exactly as one carrying the image and the two regions cut out by
// the client, and the tokens up to the end of the whole image's span as
// the single-image request (each view is its own bidirectional span: the
// crops after it do not reach back into it).
func TestPanAndScanViews(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/gemma3_vl")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	_, end := refImageRun(ref.InputIDs)
	ids := withPlaceholders(ref.InputIDs, end+1, 2)
	data, err := os.ReadFile(filepath.Join(dir, "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	whole := decodedImage(t, dir)
	sub := src.(interface {
		SubImage(image.Rectangle) image.Image
	})
	left, right := pngImage(t, sub.SubImage(image.Rect(0, 0, 40, 64))), pngImage(t, sub.SubImage(image.Rect(40, 0, 80, 64)))

	for _, pageSize := range []int{1, 16} {
		e := newEngine(t, engine.Config{ModelPath: dir, PageSize: pageSize})
		on, crop := true, 32
		prepared, err := e.PrepareImages([]engine.Image{{Decoded: whole}}, vision.Options{DoPanAndScan: &on, PanAndScanMinCropSize: &crop})
		if err != nil {
			t.Fatal(err)
		}
		if prepared[0].Views() != 3 {
			t.Fatalf("%d views, want the image and 2 crops", prepared[0].Views())
		}
		got, res := generateLogprobs(t, e, ids, prepared)
		if want := len(ids) + 2*(4-1); len(res.PromptIDs) != want {
			t.Errorf("prompt of %d tokens, want %d (2 more views of 4 tokens)", len(res.PromptIDs), want)
		}
		cut, _ := generateLogprobs(t, e, ids, []engine.Image{{Decoded: whole}, {Decoded: left}, {Decoded: right}})
		single, _ := generateLogprobs(t, e, ref.InputIDs, []engine.Image{{Decoded: whole}})
		dCut, dSingle := maxDelta(got, cut), maxDelta(got[:end], single[:end])
		t.Logf("page %d: max |Δ| %.2e from the regions sent as images, %.2e from the single image through its span", pageSize, dCut, dSingle)
		if dCut > 1e-6 || dSingle > 1e-6 {
			t.Errorf("page %d: max |Δ prompt logprob| %.2e (crops as images), %.2e (single image); want ≤ 1e-6", pageSize, dCut, dSingle)
		}
		// Without the option the same prompt has placeholders for 3 images
		// but carries 1.
		if _, err := e.Generate(context.Background(), engine.Request{InputIDs: ids, Images: []engine.Image{{Decoded: whole}}, Sampling: greedy(1)}); err == nil || !strings.Contains(err.Error(), "3 image placeholders for 1 images") {
			t.Errorf("pan-and-scan off: err %v", err)
		}
	}
}

// TestMultipleImages: two images in one prompt, interleaved with text, a
// second image of another size. Every CPU backend at page sizes 1 and 16
// (chunked prefill included) scores the prompt as the native backend
// does; the tokens before the second image score as the reference prompt
// with its one image (a later image changes nothing before it), and the
// text before any image as transformers did; a repeat of the request hits
// the prefix cache past both images, the images swapped only before them.
func TestMultipleImages(t *testing.T) {
	for _, tc := range vlmCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := shared.Path(t, "models/reference-tiny/"+tc.name)
			var ref reference
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)
			at, end := refImageRun(ref.InputIDs)
			second := end + 6 // after some of the reference's text
			ids := withPlaceholders(ref.InputIDs, second, 1)
			// One placeholder for the first image too: swapped, it needs
			// another number of tokens.
			ids = slices.Delete(ids, at+1, end)
			imgs := []engine.Image{{Decoded: decodedImage(t, dir)}, {Decoded: otherImage(t, 100, 40)}}
			native := newEngine(t, engine.Config{ModelPath: dir, AttentionBackend: "native"})
			base, res := generateLogprobs(t, native, ids, imgs)
			single, _ := generateLogprobs(t, native, ref.InputIDs, imgs[:1])
			dPrefix := maxDelta(base[:second-1], single[:second-1])
			dRef := maxDelta(base[:at-1], ref.PromptLogprobs[:at-1])
			t.Logf("%d prompt tokens; max |Δ| %.2e from the single-image prompt before image 2, %.2e from transformers before image 1",
				len(res.PromptIDs), dPrefix, dRef)
			if dPrefix > 1e-6 || dRef > 2e-4 {
				t.Errorf("max |Δ prompt logprob| %.2e before image 2 (want ≤ 1e-6), %.2e before image 1 (want ≤ 2e-4)", dPrefix, dRef)
			}
			for _, choice := range attentionChoices() {
				for _, pageSize := range []int{1, 16} {
					cfg := choice
					cfg.ModelPath, cfg.PageSize = dir, pageSize
					e := newEngine(t, cfg)
					got, _ := generateLogprobs(t, e, ids, imgs)
					if d := maxDelta(got, base); d > 2e-4 {
						t.Errorf("%s/page%d: max |Δ| from native %.2e > 2e-4", choiceName(choice), pageSize, d)
					}
				}
			}
			e := newEngine(t, engine.Config{ModelPath: dir, PageSize: 1})
			total := len(res.PromptIDs)
			cached := func(imgs []engine.Image) int {
				res, err := e.Generate(context.Background(), engine.Request{InputIDs: ids, Images: imgs, Sampling: greedy(1)})
				if err != nil {
					t.Fatal(err)
				}
				return res.CachedTokens
			}
			cached(imgs)
			if c := cached(imgs); c < total-1 {
				t.Errorf("repeat: %d cached tokens of %d", c, total)
			}
			if c := cached([]engine.Image{imgs[1], imgs[0]}); c > at {
				t.Errorf("images swapped: %d cached tokens, want at most the %d before the first image", c, at)
			}
		})
	}
}

// TestVideoFrames (Qwen2.5-VL): a video given as frames. A video of the
// reference image twice fills one temporal patch exactly as the image
// does, so with a video placeholder in the image's place the prompt
// scores as the reference prompt with its image. A video of two temporal
// patches (the image, then another) scores on every CPU backend and page
// size as on the native one, and its frames count against MaxImages.
func TestVideoFrames(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/qwen2_5_vl")
	var ref reference
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	at, end := refImageRun(ref.InputIDs)
	const videoToken = 503
	ids := slices.Concat(ref.InputIDs[:at], []int{videoToken}, ref.InputIDs[end:])
	img := decodedImage(t, dir)
	other := otherImage(t, img.W, img.H)
	native := newEngine(t, engine.Config{ModelPath: dir, AttentionBackend: "native", MaxImages: 4})
	asImage, _ := generateLogprobs(t, native, ref.InputIDs, []engine.Image{{Decoded: img}})
	asVideo, res := generateLogprobs(t, native, ids, []engine.Image{{Frames: []*vision.Image{img, img}}})
	if len(res.PromptIDs) != len(ref.InputIDs) || res.PromptIDs[at] != videoToken {
		t.Fatalf("video prompt of %d tokens (want %d, video tokens at %d)", len(res.PromptIDs), len(ref.InputIDs), at)
	}
	// Element i scores token i+1: the placeholders themselves (500 or
	// 503, at [at, end)) score differently and are left out.
	d := max(maxDelta(asVideo[:at-1], asImage[:at-1]), maxDelta(asVideo[end-1:], asImage[end-1:]))
	t.Logf("video [image, image] vs the image: max |Δ prompt logprob| %.2e", d)
	if d > 1e-6 {
		t.Errorf("a video of the image twice scores %.2e away from the image", d)
	}

	frames := []engine.Image{{Frames: []*vision.Image{img, img, other, other}}}
	base, res := generateLogprobs(t, native, ids, frames)
	if want := len(ref.InputIDs) + (end - at); len(res.PromptIDs) != want {
		t.Errorf("two temporal patches: %d prompt tokens, want %d", len(res.PromptIDs), want)
	}
	if d := maxDelta(base[:at-1], asImage[:at-1]); d > 1e-6 {
		t.Errorf("before the video: %.2e from the image prompt", d)
	}
	for _, choice := range attentionChoices() {
		for _, pageSize := range []int{1, 16} {
			cfg := choice
			cfg.ModelPath, cfg.PageSize = dir, pageSize
			got, _ := generateLogprobs(t, newEngine(t, cfg), ids, frames)
			if d := maxDelta(got, base); d > 2e-4 {
				t.Errorf("%s/page%d: max |Δ| from native %.2e > 2e-4", choiceName(choice), pageSize, d)
			}
		}
	}
	five := []engine.Image{{Frames: []*vision.Image{img, img, img, img, img}}}
	if _, err := native.Generate(context.Background(), engine.Request{InputIDs: ids, Images: five, Sampling: greedy(1)}); err == nil || !strings.Contains(err.Error(), "at most 4") {
		t.Errorf("5 frames with MaxImages 4: err %v", err)
	}
	gemma := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/reference-tiny/gemma3_vl")})
	if _, err := gemma.Generate(context.Background(), engine.Request{InputIDs: ids, Images: frames[:1], Sampling: greedy(1)}); err == nil || !strings.Contains(err.Error(), "reads no video") {
		t.Errorf("video for Gemma 3: err %v", err)
	}
}

// TestImageTokensBeforePixels: a request whose images cannot fit the
// context is refused before their pixels are made: pan-and-scan of a
// 4000×2 image into up to 5000 crops of 2×2 would make 2000 views of 4
// tokens, past 1024 (each crop a preprocessed image of its own).
func TestImageTokensBeforePixels(t *testing.T) {
	e := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/reference-tiny/gemma3_vl")})
	wide := otherImage(t, 4000, 2)
	on, crop, most := true, 1, 5000
	_, err := e.PrepareImages([]engine.Image{{Decoded: wide}}, vision.Options{DoPanAndScan: &on, PanAndScanMinCropSize: &crop, PanAndScanMaxNumCrops: &most})
	if err == nil || !strings.Contains(err.Error(), "take 8004 tokens") {
		t.Errorf("err %v, want the 2001 views' 8004 tokens past the context", err)
	}
}
