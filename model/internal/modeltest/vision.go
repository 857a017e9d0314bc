package modeltest

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
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
		b.EmbedData = emb.HostData()
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

// CheckPublishedProcessor: the processor an architecture gives dummy
// weights (its published checkpoints') preprocesses the reference's
// image.png exactly as the reference's preprocessor_config.json does
// (transformers' processor, class defaults but for the image size): the
// same resampling, normalisation and patching. Returns the processor.
func CheckPublishedProcessor(t testing.TB, dir string, published vision.ProcessorConfig) *vision.Processor {
	t.Helper()
	ref, err := vision.LoadProcessor(filepath.Join(dir, "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := vision.NewProcessor(published)
	if err != nil {
		t.Fatalf("published processor: %v", err)
	}
	img, err := vision.ReadFile(filepath.Join(dir, "image.png"), vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Preprocess(img.RGB)
	if err != nil {
		t.Fatal(err)
	}
	have, err := got.Preprocess(img.RGB)
	if err != nil {
		t.Fatal(err)
	}
	if len(have) != len(want) {
		t.Fatalf("published processor: %d views, the reference's %d", len(have), len(want))
	}
	for v := range want {
		if have[v].Grid != want[v].Grid || !slices.Equal(have[v].Shape, want[v].Shape) || !slices.Equal(have[v].Data, want[v].Data) {
			t.Errorf("view %d: the published processor's pixels (grid %v, shape %v) differ from the reference processor's (grid %v, shape %v)",
				v, have[v].Grid, have[v].Shape, want[v].Grid, want[v].Shape)
		}
	}
	return got
}
