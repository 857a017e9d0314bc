package runner

import (
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/spec"
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

// TestPadVerify: a verify batch padded to a graph's size gains requests
// of n tokens on the pad row (slot 0, positions 0..n−1, token 0, causal,
// a logits row per token) after the real ones, which keep their rows;
// uniformVerify tells the batches a verify graph can hold.
func TestPadVerify(t *testing.T) {
	tab := kvcache.NewReqToToken(4, 64)
	kv := &kvcache.Cache{Table: tab}
	b := &forward.Batch{Mode: forward.TargetVerify, KV: kv}
	var trees []*spec.Tree
	for r := range 3 {
		tr := spec.NewTree(100 + r)
		tr.Add(0, 200+r)
		if r == 1 {
			tr.Add(0, 300) // a branching tree: the batch has a mask
		} else {
			tr.Add(1, 300)
		}
		trees = append(trees, &tr)
		b.ReqRows = append(b.ReqRows, int32(r))
		b.PrefixLens = append(b.PrefixLens, 10)
		b.ExtendLens = append(b.ExtendLens, 3)
		slots := make([]int32, 64)
		for i := range slots {
			slots[i] = int32(64*r + i + 1)
		}
		AppendTree(b, slots, 10, &tr)
	}
	AttachTreeMasks(b, trees)
	if !uniformVerify(b) {
		t.Fatal("three requests of 3 tokens, every row with logits: not uniform")
	}
	rn := &Runner[*testReq]{graphs: &Graphs{sizes: device.GraphBatchSizes(8)}}
	size, n, ok := rn.graphSize(b)
	if !ok || size != 4 || n != 3 {
		t.Fatalf("graph size %d, %d tokens, %v; want 4 requests of 3", size, n, ok)
	}
	ids := slices.Clone(b.InputIDs)
	padVerify(b, size, n, tab.PadRow())
	if b.NumReqs() != 4 || b.NumTokens() != 12 || len(b.LogitRows) != 12 || len(b.MaskStarts) != 4 || b.MaskStarts[3] != -1 {
		t.Fatalf("padded to %d requests, %d tokens, %d logits rows, mask starts %v", b.NumReqs(), b.NumTokens(), len(b.LogitRows), b.MaskStarts)
	}
	if !slices.Equal(b.InputIDs[:9], ids) {
		t.Fatalf("real tokens moved: %v, want %v first", b.InputIDs, ids)
	}
	if b.ReqRows[3] != int32(tab.PadRow()) || b.PrefixLens[3] != 0 || !slices.Equal(b.Positions[9:], []int32{0, 1, 2}) ||
		!slices.Equal(b.OutSlots[9:], []int32{0, 0, 0}) || !slices.Equal(b.LogitRows[9:], []int32{9, 10, 11}) {
		t.Fatalf("padding request: row %d prefix %d positions %v slots %v logits rows %v", b.ReqRows[3], b.PrefixLens[3], b.Positions[9:], b.OutSlots[9:], b.LogitRows[9:])
	}
	if err := b.Finalize(); err != nil {
		t.Fatalf("padded batch: %v", err)
	}
	if key := GraphKey(size, n); key == size || key <= 256 {
		t.Errorf("verify key %d collides with the decode sizes", key)
	}

	uneven := &forward.Batch{Mode: forward.TargetVerify, ReqRows: []int32{0, 1}, PrefixLens: []int32{4, 4}, ExtendLens: []int32{3, 2},
		InputIDs: make([]int32, 5), Positions: make([]int32, 5), OutSlots: make([]int32, 5), LogitRows: []int32{0, 1, 2, 3, 4}}
	if uniformVerify(uneven) {
		t.Error("trees of 3 and 2 tokens: uniform")
	}
	prefill := &forward.Batch{Mode: forward.TargetVerify, ReqRows: []int32{0, 1}, PrefixLens: []int32{4, 0}, ExtendLens: []int32{2, 2},
		InputIDs: make([]int32, 4), Positions: make([]int32, 4), OutSlots: make([]int32, 4), LogitRows: []int32{0, 1, 3}}
	if uniformVerify(prefill) {
		t.Error("a prompt chunk without logits rows: uniform")
	}
	rn.graphs.verifyOff = true
	if _, _, ok := rn.graphSize(b); ok {
		t.Error("verify graphs off, yet a size")
	}
}
