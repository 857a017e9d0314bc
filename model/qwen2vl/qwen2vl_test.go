package qwen2vl_test

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
	"github.com/gosling-ai/gosling/model/qwen2vl"
	"github.com/gosling-ai/gosling/vision"
)

const refDir = "models/reference-tiny/qwen2_5_vl"

func load(t *testing.T) *qwen2vl.Model {
	t.Helper()
	ck, err := model.Open(shared.Path(t, refDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	w := cpu.NewWorkers(1)
	t.Cleanup(w.Close)
	m, err := qwen2vl.New(&ck.Config, ck.Weights, cpu.NewOps(w))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReference compares the prompt log-probabilities with transformers'.
// The reference was made by calling the model with input_ids, pixel_values
// and image_grid_thw only: transformers 5 then gives every token one
// text position (its sequence index) in all three M-RoPE streams, since
// it places images by the processor's mm_token_type_ids, which the call
// did not pass. With those positions the vision tower and the splicing
// match to float32 rounding. With the model's own 3-D positions (what
// the engine serves, as SGLang and vLLM do) only the image tokens' height
// and width streams differ, by at most the grid size on the three
// lowest-frequency sections, which moves the log-probabilities by 3e-4.
func TestReference(t *testing.T) {
	m := load(t)
	ref, px := modeltest.LoadVisionReference(t, shared.Path(t, refDir), [3]int{1, 4, 6})
	if got := m.ImageTokens(px); got != 6 {
		t.Fatalf("ImageTokens = %d, want 6", got)
	}
	flat := modeltest.VisionPromptDelta(t, m, ref, px, nil, nil)
	t.Logf("max |Δ prompt logprob| with the reference's 1-D positions: %.2e", flat)
	if flat > 2e-4 {
		t.Errorf("max |Δ| %.2e > 2e-4", flat)
	}
	start := slices.Index(ref.InputIDs, ref.ImageTokenID)
	pos, _, _ := m.Layout(ref.InputIDs, []model.ImageSpan{{Start: start, Len: 6, Grid: [3]int{1, 4, 6}}})
	mrope := modeltest.VisionPromptDelta(t, m, ref, px, pos, nil)
	t.Logf("max |Δ prompt logprob| with 3-D M-RoPE positions: %.2e", mrope)
	if mrope < 10*flat || mrope > 1e-3 {
		t.Errorf("M-RoPE positions moved the log-probabilities by %.2e; want a small but visible change", mrope)
	}
}

// TestLayout checks get_rope_index's positions for the reference prompt:
// text counts up; the 2×3 merged image grid starts at the position after
// the text before it; text resumes after the image's largest position.
func TestLayout(t *testing.T) {
	m := load(t)
	ids := make([]int, 20)
	pos, delta, spans := m.Layout(ids, []model.ImageSpan{{Start: 12, Len: 6, Grid: [3]int{1, 4, 6}}})
	n := len(ids)
	stream := func(s int) []int32 { return pos[s*n : (s+1)*n] }
	wantT := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 12, 12, 12, 12, 12, 15, 16}
	wantH := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 12, 12, 13, 13, 13, 15, 16}
	wantW := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 12, 13, 14, 15, 16}
	if !slices.Equal(stream(0), wantT) || !slices.Equal(stream(1), wantH) || !slices.Equal(stream(2), wantW) {
		t.Errorf("positions\n t %v\n h %v\n w %v", stream(0), stream(1), stream(2))
	}
	if delta != 17-20 || spans != nil {
		t.Errorf("delta %d (want -3), spans %v (want none: causal)", delta, spans)
	}

	// Two images of different grids with text between: each starts after
	// the position before it, and the second's 1×4 merged grid spreads
	// over the width only.
	ids = make([]int, 16)
	pos, delta, _ = m.Layout(ids, []model.ImageSpan{{Start: 2, Len: 6, Grid: [3]int{1, 4, 6}}, {Start: 10, Len: 4, Grid: [3]int{1, 2, 8}}})
	n = len(ids)
	wantT = []int32{0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7, 7, 7, 7, 11, 12}
	wantH = []int32{0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7, 7, 7, 7, 11, 12}
	wantW = []int32{0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if !slices.Equal(stream(0), wantT) || !slices.Equal(stream(1), wantH) || !slices.Equal(stream(2), wantW) {
		t.Errorf("two images: positions\n t %v\n h %v\n w %v", stream(0), stream(1), stream(2))
	}
	if delta != 13-16 {
		t.Errorf("two images: delta %d, want -3", delta)
	}
}

// TestWeightShapes: the list matches the tiny checkpoint, dummy weights
// load, and Qwen2.5-VL-7B's config counts its published 8,292,166,656
// parameters.
func TestWeightShapes(t *testing.T) {
	modeltest.CheckWeightShapes(t, modeltest.Architecture{WeightShapes: qwen2vl.WeightShapes,
		New: func(cfg *model.Config, ws model.WeightSource, ops device.Ops) error {
			_, err := qwen2vl.New(cfg, ws, ops)
			return err
		}}, shared.Path(t, refDir), shared.Path(t, "configs/qwen2.5-vl-7b/config.json"), 8_292_166_656)
}

// TestVideoFramesApart: the vision tower attends within each temporal
// patch of a video (full-attention blocks per frame group, as
// cu_seqlens repeats h·w per t; windows within a frame group), so a
// video whose patches are image A's and then image B's encodes, patch
// by patch, exactly as the two images alone.
func TestVideoFramesApart(t *testing.T) {
	m := load(t)
	w := cpu.NewWorkers(1)
	t.Cleanup(w.Close)
	kv, err := kvcache.NewCache(m.KVSpec(), 1, 16, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	attn, err := native.Entry.New(attention.Options{Device: "cpu", KV: kv, Runtime: cpu.NewRuntime(w)})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := vision.LoadProcessor(filepath.Join(shared.Path(t, refDir), "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	frame := func(seed int) vision.RGB {
		img := vision.RGB{W: 80, H: 64, Pix: make([]uint8, 80*64*3)}
		for i := range img.Pix {
			img.Pix[i] = uint8(i*seed + i/7)
		}
		return img
	}
	a, b := frame(3), frame(11)
	video, err := proc.PreprocessVideo([]vision.RGB{a, a, b, b})
	if err != nil {
		t.Fatal(err)
	}
	if video.Grid != [3]int{2, 4, 6} {
		t.Fatalf("video grid %v, want [2 4 6]", video.Grid)
	}
	enc, err := m.EncodeImage(&video, attn)
	if err != nil {
		t.Fatal(err)
	}
	half := len(enc.HostData()) / 2
	for i, img := range []vision.RGB{a, b} {
		views, err := proc.Preprocess(img)
		if err != nil {
			t.Fatal(err)
		}
		alone, err := m.EncodeImage(&views[0], attn)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for j, v := range alone.HostData() {
			worst = max(worst, math.Abs(float64(v-enc.HostData()[i*half+j])))
		}
		t.Logf("temporal patch %d: max |Δ| from the image alone %.2e", i, worst)
		if worst > 1e-5 {
			t.Errorf("temporal patch %d encodes %.2e away from its image alone", i, worst)
		}
	}
}

// TestVideoLayout: a video's temporal positions are its patches' start in
// seconds (temporal_patch_size / fps = 2/2) times tokens_per_second (4
// here); text after it resumes past its largest position.
func TestVideoLayout(t *testing.T) {
	m := load(t)
	ids := make([]int, 16)
	pos, delta, _ := m.Layout(ids, []model.ImageSpan{{Start: 2, Len: 12, Grid: [3]int{2, 4, 6}, SecondsPerGrid: 1}})
	n := len(ids)
	stream := func(s int) []int32 { return pos[s*n : (s+1)*n] }
	wantT := []int32{0, 1, 2, 2, 2, 2, 2, 2, 6, 6, 6, 6, 6, 6, 7, 8}
	wantH := []int32{0, 1, 2, 2, 2, 3, 3, 3, 2, 2, 2, 3, 3, 3, 7, 8}
	wantW := []int32{0, 1, 2, 3, 4, 2, 3, 4, 2, 3, 4, 2, 3, 4, 7, 8}
	if !slices.Equal(stream(0), wantT) || !slices.Equal(stream(1), wantH) || !slices.Equal(stream(2), wantW) {
		t.Errorf("positions\n t %v\n h %v\n w %v", stream(0), stream(1), stream(2))
	}
	if delta != 9-16 {
		t.Errorf("delta %d, want -7", delta)
	}
}

// TestPublishedProcessor: dummy weights' processor preprocesses like
// the reference's, and at Qwen2.5-VL-7B's config a 448×448 image is
// 32×32 patches, 256 tokens.
func TestPublishedProcessor(t *testing.T) {
	ck, err := model.Open(shared.Path(t, refDir))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	modeltest.CheckPublishedProcessor(t, shared.Path(t, refDir), qwen2vl.Processor(&ck.Config))

	data, err := os.ReadFile(shared.Path(t, "configs/qwen2.5-vl-7b/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	p, err := vision.NewProcessor(qwen2vl.Processor(&cfg))
	if err != nil {
		t.Fatal(err)
	}
	views, grid, err := p.Plan(448, 448, 1)
	if err != nil {
		t.Fatal(err)
	}
	if views != 1 || grid != [3]int{1, 32, 32} || cfg.Vision.ImageTokens(grid) != 256 {
		t.Errorf("448×448 at 7B: %d views, grid %v, %d tokens; want 1, [1 32 32], 256", views, grid, cfg.Vision.ImageTokens(grid))
	}
}
