package gemma3vl_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/gemma3vl"
	"github.com/gosling-ai/gosling/model/internal/modeltest"
)

const refDir = "models/reference-tiny/gemma3_vl"

// TestReference compares the prompt log-probabilities with transformers'.
// The reference was made by calling the model with input_ids and
// pixel_values only; without the processor's token_type_ids transformers
// attends causally over the image, and so matches the tower and the
// splicing to float32 rounding here. The model's own mask (what the engine
// serves, with the processor's token types in transformers, SGLang and
// vLLM) lets image tokens see their whole image, which changes every
// log-probability from the image on.
func TestReference(t *testing.T) {
	ck, err := model.Open(shared.Path(t, refDir))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	w := cpu.NewWorkers(1)
	defer w.Close()
	m, err := gemma3vl.New(&ck.Config, ck.Weights, cpu.NewOps(w))
	if err != nil {
		t.Fatal(err)
	}
	ref, px := modeltest.LoadVisionReference(t, shared.Path(t, refDir), [3]int{})
	start := slices.Index(ref.InputIDs, ref.ImageTokenID)
	_, _, spans := m.Layout(ref.InputIDs, []model.ImageSpan{{Start: start, Len: m.ImageTokens(px)}})
	bidi := modeltest.VisionPromptDelta(t, m, ref, px, nil, spans)
	causal := modeltest.VisionPromptDelta(t, m, ref, px, nil, nil)
	t.Logf("max |Δ prompt logprob|: %.2e causal (as the reference), %.2e with the image span bidirectional", causal, bidi)
	if causal > 2e-4 || bidi < 1e-2 {
		t.Errorf("max |Δ| %.2e causal (limit 2e-4), %.2e bidirectional (want a visible change)", causal, bidi)
	}
}

// TestWeightShapes: every listed tensor is in the tiny checkpoint with its
// shape. (The checkpoint also stores SigLIP's pooling head, which Gemma 3
// never reads: it takes the tower's last hidden state.)
func TestWeightShapes(t *testing.T) {
	ck, err := model.Open(shared.Path(t, refDir))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	shapes := gemma3vl.WeightShapes(&ck.Config)
	for name, shape := range shapes {
		w, err := ck.Weights.Tensor(name)
		if err != nil || !slices.Equal(w.Shape, shape) {
			t.Errorf("%s: listed %v, checkpoint %v (%v)", name, shape, w.Shape, err)
		}
	}
	for _, name := range ck.Weights.Names() {
		if _, ok := shapes[name]; !ok && !strings.HasPrefix(name, "vision_tower.head.") {
			t.Errorf("checkpoint tensor %s is not listed", name)
		}
	}
}

// TestPublishedProcessor: dummy weights' processor preprocesses like
// the reference's.
func TestPublishedProcessor(t *testing.T) {
	ck, err := model.Open(shared.Path(t, refDir))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	modeltest.CheckPublishedProcessor(t, shared.Path(t, refDir), gemma3vl.Processor(&ck.Config))
}
