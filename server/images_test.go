package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/server"
	"github.com/gosling-ai/gosling/vision"
)

// gemmaVL returns the tiny Gemma 3 vision reference's folder in ../shared.
func gemmaVL(t testing.TB) string {
	t.Helper()
	return shared.Path(t, "models/reference-tiny/gemma3_vl")
}

// vlmServer serves the tiny Gemma 3 vision reference (no tokenizer:
// prompts go as input_ids).
func vlmServer(t *testing.T) (*httptest.Server, *engine.Engine, []int) {
	t.Helper()
	return vlmServerOf(t, gemmaVL(t), server.Options{})
}

// vlmServerOf serves the vision reference in dir with at most 2 images a
// request, and returns its reference prompt.
func vlmServerOf(t *testing.T, dir string, opts server.Options) (*httptest.Server, *engine.Engine, []int) {
	t.Helper()
	eng, err := engine.New(engine.Config{ModelPath: dir, PageSize: 1, MaxImages: 2, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	opts.Logger = quietLogger()
	srv, err := server.New(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	var ref struct {
		InputIDs []int `json:"input_ids"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil || json.Unmarshal(data, &ref) != nil {
		t.Fatalf("reference.json: %v", err)
	}
	return ts, eng, ref.InputIDs
}

func dataURL(data []byte) string {
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(data)
}

// TestGenerateImageData: /generate with the reference image as a data: URL
// scores the prompt exactly as the engine does, and a second request with
// the same image reuses the cached prompt (image tokens included), while
// a different image does not share the image's tokens.
func TestGenerateImageData(t *testing.T) {
	ts, eng, ids := vlmServer(t)
	pngBytes, err := os.ReadFile(filepath.Join(gemmaVL(t), "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := vision.Decode(pngBytes, vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	p := sample.DefaultParams()
	p.Temperature, p.MaxNewTokens = 0, 0
	res, err := eng.Generate(context.Background(), engine.Request{InputIDs: ids, Images: []engine.Image{{Decoded: img}},
		Sampling: p, PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"input_ids": ids, "image_data": dataURL(pngBytes), "return_logprob": true, "logprob_start_len": 0,
		"sampling_params": map[string]any{"max_new_tokens": 0}}
	status, out := call(t, "POST", ts.URL+"/generate", body)
	if status != 200 {
		t.Fatalf("status %d: %v", status, out)
	}
	entries := get(out, "meta_info", "input_token_logprobs").([]any)
	worst := 0.0
	for i := 1; i < len(ids); i++ {
		got := get(entries[i], 0).(float64)
		worst = max(worst, math.Abs(got-float64(*res.PromptLogprobs[i])))
	}
	t.Logf("server vs engine: max |Δ prompt logprob| %.2e", worst)
	if worst > 1e-6 {
		t.Errorf("server and engine differ by %.2e", worst)
	}

	// Prefix reuse: without prompt scoring, a repeat hits the cache through
	// the image; another image matches only the text before it.
	plain := map[string]any{"input_ids": ids, "image_data": dataURL(pngBytes), "sampling_params": map[string]any{"max_new_tokens": 1}}
	call(t, "POST", ts.URL+"/generate", plain)
	_, again := call(t, "POST", ts.URL+"/generate", plain)
	imageAt := 12
	if c := num(get(again, "meta_info", "cached_tokens")); c <= imageAt+4 {
		t.Errorf("same image: %d cached tokens, want past the image (tokens %d..%d)", c, imageAt, imageAt+4)
	}
	other := image.NewGray(image.Rect(0, 0, 8, 8))
	var buf bytes.Buffer
	png.Encode(&buf, other)
	plain["image_data"] = dataURL(buf.Bytes())
	_, diff := call(t, "POST", ts.URL+"/generate", plain)
	if c := num(get(diff, "meta_info", "cached_tokens")); c > imageAt {
		t.Errorf("different image: %d cached tokens, want at most the %d before the image", c, imageAt)
	}
}

// TestImageErrors: each bad image is a 400 naming the problem, and the
// server keeps serving.
func TestImageErrors(t *testing.T) {
	ts, _, ids := vlmServer(t)
	good, _ := os.ReadFile(filepath.Join(gemmaVL(t), "image.png"))
	huge := bytes.Clone(good[:33]) // PNG signature and IHDR of the reference image
	copy(huge[16:24], []byte{0, 0, 0x4e, 0x20, 0, 0, 0x4e, 0x20})
	putCRC(huge)
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`)
	two := []string{dataURL(good), dataURL(good), dataURL(good)}
	for _, tc := range []struct {
		name  string
		image any
		want  string
	}{
		{"truncated png", dataURL(good[:len(good)/2]), "cannot decode"},
		{"svg", "data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(svg), "cannot decode image"},
		{"20000x20000", dataURL(huge), "over the limit of 50000000 pixels"},
		{"remote url", "https://example.com/cat.png", "remote image URLs are not fetched"},
		{"local path without the flag", "/etc/passwd", "--allow-local-images"},
		{"too many images", two, "at most 2 are allowed"},
	} {
		status, out := call(t, "POST", ts.URL+"/generate", map[string]any{"input_ids": ids, "image_data": tc.image, "sampling_params": map[string]any{"max_new_tokens": 1}})
		msg := fmt.Sprint(get(out, "error", "message"))
		if status != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: status %d, message %q; want 400 containing %q", tc.name, status, msg, tc.want)
		}
	}
	if status, _ := call(t, "GET", ts.URL+"/health", nil); status != 200 {
		t.Errorf("server unhealthy after bad images: %d", status)
	}
}

// TestImageForTextModel: an image for a text-only model is a 400.
func TestImageForTextModel(t *testing.T) {
	ts, _ := newServer(t)
	status, out := call(t, "POST", ts.URL+"/generate", map[string]any{"input_ids": []int{1, 2}, "image_data": "data:image/png;base64,AAAA"})
	if msg := fmt.Sprint(get(out, "error", "message")); status != 400 || !strings.Contains(msg, "does not accept images") {
		t.Errorf("status %d, %q", status, msg)
	}
	status, out = call(t, "POST", ts.URL+"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA"}}}}}})
	if msg := fmt.Sprint(get(out, "error", "message")); status != 400 || !strings.Contains(msg, "does not accept images") {
		t.Errorf("chat: status %d, %q", status, msg)
	}
	status, out = call(t, "POST", ts.URL+"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "video", "video": []string{"data:image/png;base64,AAAA"}}}}}})
	if msg := fmt.Sprint(get(out, "error", "message")); status != 400 || !strings.Contains(msg, "reads no video") {
		t.Errorf("chat video: status %d, %q", status, msg)
	}
}

// putCRC fixes the CRC of a PNG's IHDR chunk after its size was edited.
func putCRC(png []byte) {
	binary.BigEndian.PutUint32(png[29:33], crc32.ChecksumIEEE(png[12:29]))
}

// collapsed is ids with each run of image placeholders (500) cut to one.
func collapsed(ids []int) []int {
	var out []int
	for i, id := range ids {
		if id != 500 || i == 0 || ids[i-1] != 500 {
			out = append(out, id)
		}
	}
	return out
}

// TestImageProcessorOptions: mm_processor_kwargs reach the processor
// (pan-and-scan adds crops, each with its tokens, in prompt_tokens), and
// every option the model cannot use is a 400 naming it.
func TestImageProcessorOptions(t *testing.T) {
	ts, _, ids := vlmServer(t)
	good, err := os.ReadFile(filepath.Join(gemmaVL(t), "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	// The reference prompt, then placeholders for the two crops.
	three := append(collapsed(ids), 501, 500, 502, 501, 500, 502)
	body := func(kwargs any, ids []int) map[string]any {
		return map[string]any{"input_ids": ids, "image_data": dataURL(good), "mm_processor_kwargs": kwargs,
			"sampling_params": map[string]any{"max_new_tokens": 1}}
	}
	panScan := map[string]any{"do_pan_and_scan": true, "pan_and_scan_min_crop_size": 32}
	status, out := call(t, "POST", ts.URL+"/generate", body(panScan, three))
	if status != 200 {
		t.Fatalf("pan-and-scan: status %d: %v", status, out)
	}
	if got, want := num(get(out, "meta_info", "prompt_tokens")), len(three)+3*(4-1); got != want {
		t.Errorf("pan-and-scan: prompt_tokens %d, want %d (3 views of 4 tokens)", got, want)
	}
	for _, tc := range []struct {
		name    string
		kwargs  any
		ids     []int
		param   string
		message string
	}{
		{"pan-and-scan off, placeholders for crops", nil, three, "input_ids", "3 image placeholders for 1 images"},
		{"crops without their placeholders", panScan, collapsed(ids), "input_ids", "make 3 views"},
		{"unknown key", map[string]any{"do_pan_and_scan": true, "zoom": 2}, three, "mm_processor_kwargs.zoom", "unknown image processor option"},
		{"wrong type", map[string]any{"pan_and_scan_max_num_crops": "four"}, three, "mm_processor_kwargs.pan_and_scan_max_num_crops", "must be int"},
		{"Qwen2-VL's key", map[string]any{"max_pixels": 3136}, three, "mm_processor_kwargs.max_pixels", "has no such option"},
		{"bad value", map[string]any{"pan_and_scan_min_crop_size": 0}, three, "mm_processor_kwargs.pan_and_scan_min_crop_size", "must be positive"},
		{"not an object", []int{1}, three, "mm_processor_kwargs", "JSON object"},
	} {
		status, out := call(t, "POST", ts.URL+"/generate", body(tc.kwargs, tc.ids))
		msg, param := fmt.Sprint(get(out, "error", "message")), fmt.Sprint(get(out, "error", "param"))
		if status != 400 || param != tc.param || !strings.Contains(msg, tc.message) {
			t.Errorf("%s: status %d, param %q, message %q; want 400, %q, containing %q", tc.name, status, param, msg, tc.param, tc.message)
		}
	}
	tts, _ := newServer(t)
	status, out = call(t, "POST", tts.URL+"/generate", map[string]any{"input_ids": []int{1, 2}, "mm_processor_kwargs": panScan})
	if msg := fmt.Sprint(get(out, "error", "message")); status != 400 || !strings.Contains(msg, "does not accept images") {
		t.Errorf("text-only model: status %d, %q", status, msg)
	}
}

// TestImageTokenBudget (Qwen2.5-VL, whose prompts hold one placeholder an
// image): the image's tokens count against the context before the
// request runs, so a max_new_tokens that fits the placeholder but not the
// image is a 400, not a silently shortened reply; prompt_tokens counts
// them; a max_pixels past --max-image-pixels is a 400.
func TestImageTokenBudget(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/qwen2_5_vl")
	ts, _, _ := vlmServerOf(t, dir, server.Options{MaxImagePixels: 10_000})
	png, err := os.ReadFile(filepath.Join(dir, "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	ids := append(slices.Repeat([]int{7}, 1000), 501, 500, 502) // the image is 6 tokens
	gen := func(maxNew int, kwargs any) (int, map[string]any) {
		return call(t, "POST", ts.URL+"/generate", map[string]any{"input_ids": ids, "image_data": dataURL(png),
			"mm_processor_kwargs": kwargs, "sampling_params": map[string]any{"max_new_tokens": maxNew, "ignore_eos": true}})
	}
	status, out := gen(16, nil)
	if status != 200 || num(get(out, "meta_info", "prompt_tokens")) != 1008 || num(get(out, "meta_info", "completion_tokens")) != 16 {
		t.Errorf("fitting request: status %d, meta %v; want 1008 prompt and 16 completion tokens", status, get(out, "meta_info"))
	}
	status, out = gen(17, nil)
	if msg := fmt.Sprint(get(out, "error", "message")); status != 400 || !strings.Contains(msg, "1008 in the prompt") {
		t.Errorf("one token past the context: status %d, %q", status, msg)
	}
	// One merge window (28×28 = 784 pixels): the image is 1 token.
	status, out = gen(16, map[string]any{"min_pixels": 784, "max_pixels": 784})
	if status != 200 || num(get(out, "meta_info", "prompt_tokens")) != 1003 {
		t.Errorf("max_pixels 784: status %d, meta %v; want 1003 prompt tokens", status, get(out, "meta_info"))
	}
	status, out = gen(1, map[string]any{"max_pixels": 20_000})
	if msg := fmt.Sprint(get(out, "error", "message")); status != 400 || fmt.Sprint(get(out, "error", "param")) != "mm_processor_kwargs.max_pixels" ||
		!strings.Contains(msg, "--max-image-pixels") {
		t.Errorf("max_pixels past the server's limit: status %d, %v", status, out)
	}
	long := append(slices.Repeat([]int{7}, 1020), 501, 500, 502)
	status, out = call(t, "POST", ts.URL+"/generate", map[string]any{"input_ids": long, "image_data": dataURL(png)})
	if msg := fmt.Sprint(get(out, "error", "message")); status != 400 || !strings.Contains(msg, "1028 tokens with its images (1023 without)") {
		t.Errorf("image past the context: status %d, %q", status, msg)
	}
}

// TestVideoData (Qwen2.5-VL): /generate's video_data takes a video as its
// frames; a video of the reference image twice scores the prompt as the
// image does (the placeholders themselves aside). A video file, too many
// frames, and a video for Gemma 3 are 400s.
func TestVideoData(t *testing.T) {
	dir := shared.Path(t, "models/reference-tiny/qwen2_5_vl")
	ts, _, ids := vlmServerOf(t, dir, server.Options{})
	png, err := os.ReadFile(filepath.Join(dir, "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	frame := dataURL(png)
	at := slices.Index(ids, 500)
	end := at + 6
	video := slices.Concat(ids[:at], []int{503}, ids[end:])
	logprobs := func(body map[string]any) []float64 {
		body["return_logprob"], body["logprob_start_len"] = true, 0
		body["sampling_params"] = map[string]any{"max_new_tokens": 1}
		status, out := call(t, "POST", ts.URL+"/generate", body)
		if status != 200 {
			t.Fatalf("status %d: %v", status, out)
		}
		if n := num(get(out, "meta_info", "prompt_tokens")); n != len(ids) {
			t.Errorf("prompt_tokens %d, want %d", n, len(ids))
		}
		var lp []float64
		for _, e := range get(out, "meta_info", "input_token_logprobs").([]any)[1:] {
			lp = append(lp, get(e, 0).(float64))
		}
		return lp
	}
	asImage := logprobs(map[string]any{"input_ids": ids, "image_data": frame})
	asVideo := logprobs(map[string]any{"input_ids": video, "video_data": []string{frame, frame}})
	worst := 0.0
	for i := range asImage {
		if i+1 < at || i+1 >= end {
			worst = max(worst, math.Abs(asImage[i]-asVideo[i]))
		}
	}
	if worst > 1e-6 {
		t.Errorf("video of the image twice: max |Δ prompt logprob| %.2e from the image", worst)
	}
	gts, _, gids := vlmServer(t)
	for _, tc := range []struct {
		name  string
		url   string
		body  map[string]any
		param string
		want  string
	}{
		{"a video file", ts.URL, map[string]any{"input_ids": video, "video_data": "data:video/mp4;base64,AAAA"}, "video_data", "video files are not decoded"},
		{"three frames, two allowed", ts.URL, map[string]any{"input_ids": video, "video_data": []string{frame, frame, frame}}, "video_data", "at most 2 are allowed"},
		{"no frames", ts.URL, map[string]any{"input_ids": video, "video_data": [][]string{{frame}, {}}}, "video_data[1]", "has no frames"},
		{"video for Gemma 3", gts.URL, map[string]any{"input_ids": gids, "video_data": []string{frame, frame}}, "video_data", "reads no video"},
	} {
		status, out := call(t, "POST", tc.url+"/generate", tc.body)
		msg, param := fmt.Sprint(get(out, "error", "message")), fmt.Sprint(get(out, "error", "param"))
		if status != 400 || param != tc.param || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: status %d, param %q, message %q; want 400, %q, containing %q", tc.name, status, param, msg, tc.param, tc.want)
		}
	}
}
