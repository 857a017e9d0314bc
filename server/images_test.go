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
	dir := gemmaVL(t)
	eng, err := engine.New(engine.Config{ModelPath: dir, PageSize: 1, MaxImages: 2, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := server.New(eng, server.Options{Logger: quietLogger()})
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
}

// putCRC fixes the CRC of a PNG's IHDR chunk after its size was edited.
func putCRC(png []byte) {
	binary.BigEndian.PutUint32(png[29:33], crc32.ChecksumIEEE(png[12:29]))
}
