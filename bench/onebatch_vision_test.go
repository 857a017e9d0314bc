package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/vision"
)

// referencePlaceholders is how many image placeholders the reference's
// input_ids hold: what transformers' processor made of image.png.
func referencePlaceholders(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		InputIDs     []int `json:"input_ids"`
		ImageTokenID int   `json:"image_token_id"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, id := range ref.InputIDs {
		if id == ref.ImageTokenID {
			n++
		}
	}
	if n == 0 {
		t.Fatal("reference.json has no image placeholders")
	}
	return n
}

// checkVisionReport: every batch size ran with its images and without,
// with image placeholders as many as the reference's for each image, the
// encode timed apart from the language prefill.
func checkVisionReport(t *testing.T, rep *OneBatchReport, batches []int, inputLen, wantImageTokens int) {
	t.Helper()
	v := rep.Vision
	if v == nil {
		t.Fatal("no vision report")
	}
	// One view per image: its start marker, its placeholders, its end marker.
	if v.ViewsPerRequest != 1 || v.ImageTokens != wantImageTokens || v.PromptTokens != inputLen+2+wantImageTokens || v.TextTokens != inputLen+2 {
		t.Errorf("per request: %d views, %d image tokens, %d text, %d prompt tokens; want 1, %d, %d, %d",
			v.ViewsPerRequest, v.ImageTokens, v.TextTokens, v.PromptTokens, wantImageTokens, inputLen+2, inputLen+2+wantImageTokens)
	}
	if len(rep.Results) != len(batches) || len(v.WithoutImages) != len(batches) {
		t.Fatalf("%d results and %d without images for %d batch sizes", len(rep.Results), len(v.WithoutImages), len(batches))
	}
	for i, b := range batches {
		r, txt := rep.Results[i], v.WithoutImages[i]
		if r.Batch != b || txt.Batch != b {
			t.Errorf("batch %d: results for %d and %d", b, r.Batch, txt.Batch)
		}
		if sum := r.VisionEncodeSeconds + r.LanguagePrefillSeconds; r.VisionEncodeSeconds <= 0 || r.LanguagePrefillSeconds <= 0 || sum < r.PrefillSeconds*0.999 || sum > r.PrefillSeconds*1.001 {
			t.Errorf("batch %d: encode %v s + language prefill %v s, prefill %v s", b, r.VisionEncodeSeconds, r.LanguagePrefillSeconds, r.PrefillSeconds)
		}
		if got, want := r.VisionImagesPerS*r.VisionEncodeSeconds, float64(b); got < want*0.999 || got > want*1.001 {
			t.Errorf("batch %d: %v images/s over %v s is %v images, want %v", b, r.VisionImagesPerS, r.VisionEncodeSeconds, got, want)
		}
		if got, want := r.PrefillTokS*r.PrefillSeconds, float64(b*v.PromptTokens); got < want*0.999 || got > want*1.001 {
			t.Errorf("batch %d: prefill tok/s counts %v tokens, want %v with the image tokens", b, got, want)
		}
		if txt.VisionEncodeSeconds != 0 || txt.PrefillSeconds <= 0 || txt.DecodeTokS <= 0 {
			t.Errorf("batch %d without images: %+v", b, txt)
		}
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !strings.Contains(out.String(), "without images") || !strings.Contains(out.String(), "vision encode s") {
		t.Errorf("printed report lacks the vision table:\n%s", out.String())
	}
}

// TestOneBatchImages: bench one-batch with an image on the tiny
// Qwen2.5-VL runs end to end; every request's prompt holds as many image
// placeholders as transformers made of the image (runBatch checks each
// request's prompt), and each image is encoded once per request.
func TestOneBatchImages(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/qwen2_5_vl")
	want := referencePlaceholders(t, dir)
	img, err := vision.ReadFile(filepath.Join(dir, "image.png"), vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	batches := []int{1, 3}
	o := OneBatchOptions{Batches: batches, InputLen: 8, OutputLen: 3, Images: []engine.Image{{Decoded: img}}}
	rep, err := OneBatch(context.Background(), engine.Config{ModelPath: dir, Threads: 1}, o, Roofline{})
	if err != nil {
		t.Fatal(err)
	}
	checkVisionReport(t, rep, batches, o.InputLen, want)

	// Dummy weights from config.json alone: the vision tower at the
	// config's shapes and the published checkpoints' processor, which,
	// like the tiny model's, leaves an image of image.png's size
	// (80×64) at 84×56 pixels, 6×4 patches.
	dummy := t.TempDir()
	cfgJSON, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dummy, "config.json"), cfgJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	o.Images = []engine.Image{{Decoded: SyntheticImage(img.W, img.H)}}
	rep, err = OneBatch(context.Background(), engine.Config{ModelPath: dummy, LoadFormat: "dummy", DType: "float32", Threads: 1}, o, Roofline{})
	if err != nil {
		t.Fatal(err)
	}
	checkVisionReport(t, rep, batches, o.InputLen, want)
}

// TestOneBatchImagesTextModel: images for a model without a vision tower
// are refused before any batch runs, naming the reason.
func TestOneBatchImagesTextModel(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/llama_gqa")
	o := OneBatchOptions{Batches: []int{1}, InputLen: 4, OutputLen: 2, Images: []engine.Image{{Decoded: SyntheticImage(32, 32)}}}
	_, err := OneBatch(context.Background(), engine.Config{ModelPath: dir, Threads: 1}, o, Roofline{})
	if err == nil || !strings.Contains(err.Error(), "reads no images") {
		t.Fatalf("images for a text-only model: %v", err)
	}
}

// TestSyntheticImage: the same pixels every time, different per size.
func TestSyntheticImage(t *testing.T) {
	a, b, c := SyntheticImage(64, 48), SyntheticImage(64, 48), SyntheticImage(48, 64)
	if a.W != 64 || a.H != 48 || len(a.Pix) != 64*48*3 || !slices.Equal(a.Pix, b.Pix) || a.Hash != b.Hash || a.Hash == c.Hash {
		t.Fatal("synthetic images are not deterministic per size")
	}
}
