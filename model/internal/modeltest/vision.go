package modeltest

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/vision"
)

// VisionReference is a vision-language reference.json.
type VisionReference struct {
	InputIDs       []int     `json:"input_ids"`
	PromptLogprobs []float64 `json:"prompt_logprobs"`
	ImageTokenID   int       `json:"image_token_id"`
}

// LoadVisionReference reads dir's reference.json and the stored
// pixel_values (copied: the memory map is closed).
func LoadVisionReference(t testing.TB, dir string, grid [3]int) (VisionReference, *vision.Pixels) {
	t.Helper()
	var ref VisionReference
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err == nil {
		err = json.Unmarshal(data, &ref)
	}
	if err != nil {
		t.Fatal(err)
	}
	px, err := vision.ReadPixelValues(filepath.Join(dir, "pixel_values.safetensors"), grid)
	if err != nil {
		t.Fatal(err)
	}
	return ref, px
}

// VisionPromptDelta runs one prefill of ref's prompt through m with the
// native backend, the image's embeddings at its placeholders, and
// returns the largest |Δ| of the prompt log-probabilities from ref.
// positions3, when set, are M-RoPE streams [3*len]; spans are
// bidirectional token ranges.
func VisionPromptDelta(t testing.TB, m model.VisionRunnable, ref VisionReference, px *vision.Pixels, positions3 []int32, spans [][2]int) float64 {
	t.Helper()
	logits := prefill(t, m, ref.InputIDs, func(b *forward.Batch, attn attention.Backend) {
		emb, err := m.EncodeImage(px, attn)
		if err != nil {
			t.Fatal(err)
		}
		b.MRopePositions = positions3
		for i, id := range ref.InputIDs {
			if id == ref.ImageTokenID {
				b.EmbedRows = append(b.EmbedRows, int32(i))
			}
		}
		if len(b.EmbedRows) != emb.Rows() {
			t.Fatalf("%d placeholders for %d image embeddings", len(b.EmbedRows), emb.Rows())
		}
		b.EmbedData = emb.Data
		for _, s := range spans {
			b.Spans = append(b.Spans, forward.Span{Start: int32(s[0]), End: int32(s[1])})
		}
	})
	lp := make([]float32, logits.Cols())
	worst := 0.0
	for i, want := range ref.PromptLogprobs {
		sample.LogSoftmax(logits.Row(i), lp)
		worst = max(worst, math.Abs(float64(lp[ref.InputIDs[i+1]])-want))
	}
	return worst
}
