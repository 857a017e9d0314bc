package vision

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPreprocessVideo checks the video layout against the image's, which
// matches the processor's stored pixel values: a still image is a video of
// one frame repeated over the temporal patch, so the video [A, A] is
// image A exactly; [A, A, B, B] is A's patches then B's; an odd frame
// count repeats the last frame; frames of different sizes are refused.
func TestPreprocessVideo(t *testing.T) {
	proc, err := LoadProcessor(filepath.Join(refDir(t, "qwen2_5_vl"), "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	_, ref := refImage(t, "qwen2_5_vl")
	a := ref.RGB
	b := RGB{W: a.W, H: a.H, Pix: slices.Clone(a.Pix)}
	slices.Reverse(b.Pix)
	image := func(img RGB) []float32 {
		views, err := proc.Preprocess(img)
		if err != nil {
			t.Fatal(err)
		}
		return views[0].Data
	}
	video := func(frames ...RGB) Pixels {
		px, err := proc.PreprocessVideo(frames)
		if err != nil {
			t.Fatal(err)
		}
		return px
	}
	if px := video(a, a); px.Grid != [3]int{1, 4, 6} || !slices.Equal(px.Data, image(a)) {
		t.Errorf("video [A, A]: grid %v, or pixels differ from image A", px.Grid)
	}
	abab := video(a, a, b, b)
	half := len(abab.Data) / 2
	if abab.Grid != [3]int{2, 4, 6} || !slices.Equal(abab.Data[:half], image(a)) || !slices.Equal(abab.Data[half:], image(b)) {
		t.Errorf("video [A, A, B, B]: grid %v, or its temporal patches are not images A and B", abab.Grid)
	}
	if odd, even := video(a, b, b), video(a, b, b, b); !slices.Equal(odd.Data, even.Data) || odd.Grid != even.Grid {
		t.Error("video [A, B, B] differs from [A, B, B, B]: the last frame must fill the last temporal patch")
	}
	small := Resize(a, 40, 32, Bicubic, Torchvision)
	if _, err := proc.PreprocessVideo([]RGB{a, small}); err == nil || !strings.Contains(err.Error(), "of one size") {
		t.Errorf("frames of two sizes: err %v", err)
	}
	gemma, err := LoadProcessor(filepath.Join(refDir(t, "gemma3_vl"), "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gemma.PreprocessVideo([]RGB{a, a}); !IsInputError(err) {
		t.Errorf("Gemma 3 processor took a video: err %v", err)
	}
}

// TestPlan: Plan foretells Preprocess's views and grids without the
// pixels, for images of several sizes, a video, and pan-and-scan.
func TestPlan(t *testing.T) {
	qwen, err := LoadProcessor(filepath.Join(refDir(t, "qwen2_5_vl"), "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	gemma := gemmaProc(t, Options{DoPanAndScan: ptr(true), PanAndScanMinCropSize: ptr(20)})
	for _, size := range [][2]int{{80, 64}, {300, 40}, {28, 28}, {500, 500}, {33, 190}} {
		img := RGB{W: size[0], H: size[1], Pix: make([]uint8, size[0]*size[1]*3)}
		for _, p := range []*Processor{qwen, gemma} {
			views, err := p.Preprocess(img)
			if err != nil {
				t.Fatal(err)
			}
			n, grid, err := p.Plan(img.W, img.H, 1)
			if err != nil || n != len(views) || grid != views[0].Grid {
				t.Errorf("%s %v: Plan %d views, grid %v (%v); Preprocess %d, %v", p.cfg.Type, size, n, grid, err, len(views), views[0].Grid)
			}
		}
		frames := []RGB{img, img, img}
		px, err := qwen.PreprocessVideo(frames)
		if err != nil {
			t.Fatal(err)
		}
		if _, grid, _ := qwen.Plan(img.W, img.H, len(frames)); grid != px.Grid {
			t.Errorf("video %v: Plan grid %v, PreprocessVideo %v", size, grid, px.Grid)
		}
	}
}
