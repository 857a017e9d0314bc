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

// TestMedianRun: the median run by decode tok/s (the lower middle one of
// an even count) carries the count and range of all.
func TestMedianRun(t *testing.T) {
	runs := func(toks ...float64) []BatchResult {
		var rs []BatchResult
		for i, v := range toks {
			// Prefill tok/s in the reverse order of decode's.
			rs = append(rs, BatchResult{Batch: 8, DecodeTokS: v, DecodeStepMs: float64(i), PrefillTokS: 100 - v, PrefillSeconds: float64(i)})
		}
		return rs
	}
	m := medianRun(runs(50, 10, 30))
	if m.DecodeTokS != 30 || m.DecodeStepMs != 2 || m.Runs != 3 || m.DecodeTokSMin != 10 || m.DecodeTokSMax != 50 {
		t.Errorf("median of 50, 10, 30: %+v", m)
	}
	// Prefill 50, 90, 70: the median is 70, run 2's.
	if m.PrefillTokS != 70 || m.PrefillSeconds != 2 || m.PrefillTokSMin != 50 || m.PrefillTokSMax != 90 {
		t.Errorf("prefill median of 50, 90, 70: %+v", m)
	}
	m = medianRun(runs(40, 10, 30, 20))
	if m.DecodeTokS != 20 || m.DecodeStepMs != 3 || m.Runs != 4 || m.DecodeTokSMin != 10 || m.DecodeTokSMax != 40 {
		t.Errorf("median of 40, 10, 30, 20: %+v", m)
	}
	// Prefill 60, 90, 70, 80: the lower middle is 70, run 2's.
	if m.PrefillTokS != 70 || m.PrefillSeconds != 2 {
		t.Errorf("prefill median of 60, 90, 70, 80: %+v", m)
	}
	if m = medianRun(runs(7)); m.DecodeTokS != 7 || m.Runs != 1 || m.DecodeTokSMin != 7 || m.DecodeTokSMax != 7 {
		t.Errorf("median of one run: %+v", m)
	}
}
