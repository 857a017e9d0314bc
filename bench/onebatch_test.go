package bench

import (
	"testing"

	"github.com/gosling-ai/gosling/model"
)

func TestCounts(t *testing.T) {
	// stories110M: 12 layers of q, k, v, o (768×768) and gate, up, down
	// (768×2048), and a 32000×768 output layer.
	c := &model.Config{HiddenSize: 768, IntermediateSize: 2048, NumLayers: 12, NumHeads: 12, NumKVHeads: 12, HeadDim: 64, VocabSize: 32000}
	perLayer := 4.0*768*768 + 3*768*2048
	if got, want := linearFLOPs(c, false), 2*12*perLayer; got != want {
		t.Errorf("linear FLOPs without head %v, want %v", got, want)
	}
	if got, want := linearFLOPs(c, true), 2*(12*perLayer+768*32000); got != want {
		t.Errorf("linear FLOPs with head %v, want %v", got, want)
	}
	// 2 tokens: pairs (0,0), (1,0), (1,1).
	if got, want := attentionFLOPs(c, 2), 4*3.0*64*12*12; got != want {
		t.Errorf("attention FLOPs %v, want %v", got, want)
	}
	if got := kvBytes(c, "auto"); got != 12*2*12*64*4 {
		t.Errorf("KV bytes per token %d", got)
	}
	if got := kvBytes(c, "bf16"); got != 12*2*12*64*2 {
		t.Errorf("bf16 KV bytes per token %d", got)
	}
}
