package runner

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
)

// TestGraphSizeAndPadding: decode batches up to --cuda-graph-max-bs are
// padded to the next captured size with requests on the pad row (slot 0,
// position 0, token 0, a logits row each); larger batches, prefill and
// mixed batches run eagerly.
func TestGraphSizeAndPadding(t *testing.T) {
	e := &Runner[*testReq]{graphs: &Graphs{sizes: device.GraphBatchSizes(12)}}
	if want := []int{1, 2, 4, 8, 12}; !slices.Equal(e.graphs.sizes, want) {
		t.Fatalf("sizes %v, want %v", e.graphs.sizes, want)
	}
	decode := func(n int) *forward.Batch {
		b := &forward.Batch{Mode: forward.Decode}
		for r := range n {
			b.ReqRows = append(b.ReqRows, int32(r))
			b.PrefixLens = append(b.PrefixLens, int32(10+r))
			b.ExtendLens = append(b.ExtendLens, 1)
			b.InputIDs = append(b.InputIDs, int32(100+r))
			b.Positions = append(b.Positions, int32(10+r))
			b.OutSlots = append(b.OutSlots, int32(50+r))
			b.LogitRows = append(b.LogitRows, int32(r))
		}
		return b
	}
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 5: 8, 9: 12, 12: 12} {
		if got, tokens, ok := e.graphSize(decode(n)); !ok || got != want || tokens != 1 {
			t.Errorf("%d requests: size %d %v, want %d", n, got, ok, want)
		}
	}
	if _, _, ok := e.graphSize(decode(13)); ok {
		t.Error("13 requests are over --cuda-graph-max-bs 12 and must run eagerly")
	}
	for _, mode := range []forward.Mode{forward.Extend, forward.Mixed} {
		b := decode(2)
		b.Mode = mode
		if _, _, ok := e.graphSize(b); ok {
			t.Errorf("%v batch got a graph", mode)
		}
	}
	if _, _, ok := (&Runner[*testReq]{}).graphSize(decode(1)); ok {
		t.Error("graphs off, yet a size")
	}

	tab := kvcache.NewReqToToken(4, 16)
	b := decode(3)
	padDecode(b, 8, tab.PadRow())
	if b.NumReqs() != 8 || b.NumTokens() != 8 || len(b.LogitRows) != 8 {
		t.Fatalf("padded to %d requests, %d tokens, %d logits rows; want 8 each", b.NumReqs(), b.NumTokens(), len(b.LogitRows))
	}
	if !slices.Equal(b.InputIDs[:3], []int32{100, 101, 102}) || !slices.Equal(b.LogitRows[:3], []int32{0, 1, 2}) {
		t.Fatalf("real rows moved: ids %v, logits rows %v", b.InputIDs, b.LogitRows)
	}
	for r := 3; r < 8; r++ {
		if b.ReqRows[r] != int32(tab.PadRow()) || b.PrefixLens[r] != 0 || b.ExtendLens[r] != 1 ||
			b.InputIDs[r] != 0 || b.Positions[r] != 0 || b.OutSlots[r] != 0 || b.LogitRows[r] != int32(r) {
			t.Fatalf("padding request %d: row %d prefix %d extend %d id %d pos %d slot %d logits %d", r,
				b.ReqRows[r], b.PrefixLens[r], b.ExtendLens[r], b.InputIDs[r], b.Positions[r], b.OutSlots[r], b.LogitRows[r])
		}
	}
	if err := b.Finalize(); err != nil {
		t.Fatalf("padded batch: %v", err)
	}
}

// TestGiveUpGraphs: a kind of step gives its graphs up after
// maxEagerStreak eager steps in a row, and only then; a graph run
// (replayed or captured) ends the streak, and a step held off graphs
// (profiled) is counted without touching it. Every step is counted by
// its path.
func TestGiveUpGraphs(t *testing.T) {
	E, R, C, H := device.GraphRun{Path: device.GraphEager, Reason: "a read-back"}, device.GraphRun{Path: device.GraphReplayed},
		device.GraphRun{Path: device.GraphCaptured}, device.GraphRun{Path: device.GraphEager, Held: true, Reason: "profiled"}
	for _, tc := range []struct {
		name   string
		runs   []device.GraphRun
		giveUp int // index of the step that gives up; -1: none
	}{
		{"three eager", []device.GraphRun{E, E, E}, 2},
		{"a replay between", []device.GraphRun{E, E, R, E, E}, -1},
		{"a capture between", []device.GraphRun{E, C, E, E, R}, -1},
		{"held steps in the streak", []device.GraphRun{E, H, E, H, E}, 4},
		{"held steps alone", []device.GraphRun{H, H, H, H}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c pathCounter
			streak, at := 0, -1
			for i, res := range tc.runs {
				if giveUpGraphs(&c, &streak, slog.New(slog.DiscardHandler), res, "off", "step") {
					if at >= 0 {
						t.Fatalf("gave up at steps %d and %d", at, i)
					}
					at = i
				}
			}
			if at != tc.giveUp {
				t.Errorf("gave up at step %d, want %d", at, tc.giveUp)
			}
			replays, captures, eager, reason := c.load()
			want := map[device.GraphPath]int{}
			for _, r := range tc.runs {
				want[r.Path]++
			}
			if replays != want[device.GraphReplayed] || captures != want[device.GraphCaptured] || eager != want[device.GraphEager] {
				t.Errorf("counted %d replays, %d captures, %d eager; want %v", replays, captures, eager, want)
			}
			if eager > 0 && reason == "" {
				t.Error("no eager reason kept")
			}
		})
	}
}
