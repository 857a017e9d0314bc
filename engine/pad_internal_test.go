package engine

import (
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/forward"
)

// TestPadDecodeMRope: a Qwen2-VL decode batch padded to a captured graph
// size keeps three M-RoPE sections of one position per token (the GPU
// refused a batch of 7 padded to 8 before: "21 M-RoPE positions for 8
// tokens").
func TestPadDecodeMRope(t *testing.T) {
	b := &forward.Batch{Mode: forward.Decode}
	for r := range 7 {
		b.ReqRows = append(b.ReqRows, int32(r+1))
		b.PrefixLens = append(b.PrefixLens, 10)
		b.ExtendLens = append(b.ExtendLens, 1)
		b.LogitRows = append(b.LogitRows, int32(r))
		b.InputIDs = append(b.InputIDs, int32(100+r))
		b.Positions = append(b.Positions, 10)
		b.OutSlots = append(b.OutSlots, int32(r))
	}
	for s := range 3 {
		for r := range 7 {
			b.MRopePositions = append(b.MRopePositions, int32(100*s+r))
		}
	}
	padDecode(b, 8, 0)
	if len(b.InputIDs) != 8 || len(b.MRopePositions) != 24 {
		t.Fatalf("%d tokens, %d M-RoPE positions, want 8 and 24", len(b.InputIDs), len(b.MRopePositions))
	}
	for s := range 3 {
		want := []int32{int32(100 * s), int32(100*s + 1), int32(100*s + 2), int32(100*s + 3), int32(100*s + 4), int32(100*s + 5), int32(100*s + 6), 0}
		if got := b.MRopePositions[8*s : 8*s+8]; !slices.Equal(got, want) {
			t.Errorf("section %d: %v, want %v", s, got, want)
		}
	}
}
