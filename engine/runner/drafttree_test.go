package runner

import (
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/fakedevice"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/sample"
	"github.com/gosling-ai/gosling/tensor"
)

// logRow is a logits row whose log-softmax is log(p) for the given
// probabilities (the logits are log p themselves).
func logRow(p ...float64) []float32 {
	row := make([]float32, len(p))
	for i, x := range p {
		row[i] = float32(math.Log(x))
	}
	return row
}

// TestDraftTreeExpand: table of trees grown level by level from host
// logits (top-k children by cumulative log-probability, the k best of
// all of them kept, ties to the earlier candidate) and from device argmax
// ids (one child each, mapped through id, at its parent's score), then
// picked down to numDraftTokens nodes.
func TestDraftTreeExpand(t *testing.T) {
	type level struct {
		rows [][]float32 // one per frontier node, in order
	}
	cases := []struct {
		name     string
		topK     int
		id       func(int) int
		levels   []level
		pick     int
		tokens   []int // the picked tree's tokens, root first
		parents  []int
		frontier []int // the tokens of the last frontier
	}{
		{
			name: "chain, top-1",
			topK: 1,
			levels: []level{
				{[][]float32{logRow(0.1, 0.2, 0.7)}},
				{[][]float32{logRow(0.6, 0.3, 0.1)}},
				{[][]float32{logRow(0.3, 0.3, 0.4)}},
			},
			pick:     4,
			tokens:   []int{9, 2, 0, 2},
			parents:  []int{-1, 0, 1, 2},
			frontier: []int{2},
		},
		{
			// Root: children 2 (0.5) and 1 (0.4). Level 2: from 2, 0 (0.5·0.9)
			// and 1 (0.5·0.1); from 1, 2 (0.4·0.8) and 0 (0.4·0.2): the best two
			// are 2→0 (0.45) and 1→2 (0.32).
			name: "tree, top-2",
			topK: 2,
			levels: []level{
				{[][]float32{logRow(0.1, 0.4, 0.5)}},
				{[][]float32{logRow(0.9, 0.1, 0.0001), logRow(0.2, 0.0001, 0.8)}},
			},
			pick:     5,
			tokens:   []int{9, 2, 1, 0, 2},
			parents:  []int{-1, 0, 0, 1, 2},
			frontier: []int{0, 2},
		},
		{
			// The same tree picked to 4 nodes: 2 (0.5), 2→0 (0.45), 1 (0.4).
			name: "tree, top-2, picked to three drafts",
			topK: 2,
			levels: []level{
				{[][]float32{logRow(0.1, 0.4, 0.5)}},
				{[][]float32{logRow(0.9, 0.1, 0.0001), logRow(0.2, 0.0001, 0.8)}},
			},
			pick:     4,
			tokens:   []int{9, 2, 1, 0},
			parents:  []int{-1, 0, 0, 1},
			frontier: []int{0, 2},
		},
		{
			// Equal probabilities: the earlier candidate (lower id) wins.
			name: "ties go to the lower id",
			topK: 2,
			levels: []level{
				{[][]float32{logRow(0.25, 0.25, 0.25, 0.25)}},
			},
			pick:     3,
			tokens:   []int{9, 0, 1},
			parents:  []int{-1, 0, 0},
			frontier: []int{0, 1},
		},
		{
			name: "draft vocabulary mapped to the target's",
			topK: 1,
			id:   func(tok int) int { return 100 + tok },
			levels: []level{
				{[][]float32{logRow(0.1, 0.9)}},
			},
			pick:     2,
			tokens:   []int{9, 101},
			parents:  []int{-1, 0},
			frontier: []int{101},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewDraftTree(9)
			for i, l := range c.levels {
				var data []float32
				for _, r := range l.rows {
					data = append(data, r...)
				}
				logits := DraftLogits{Host: tensor.Host{Shape: []int{len(l.rows), len(l.rows[0])}, Data: data}}
				if i == 0 {
					tr.ExpandRoot(logits, 0, c.topK, c.id)
					continue
				}
				if len(tr.Frontier) != len(l.rows) {
					t.Fatalf("level %d: frontier %v for %d rows", i+1, tr.Frontier, len(l.rows))
				}
				tr.Expand(logits, rowRange(0, len(l.rows)), c.topK, c.id)
			}
			var front []int
			for _, n := range tr.Frontier {
				front = append(front, tr.Nodes[n].Token)
			}
			if !slices.Equal(front, c.frontier) {
				t.Errorf("frontier tokens %v, want %v", front, c.frontier)
			}
			got := tr.Pick(c.pick)
			if !slices.Equal(got.Tokens, c.tokens) || !slices.Equal(got.Parents, c.parents) {
				t.Errorf("picked %v / %v, want %v / %v", got.Tokens, got.Parents, c.tokens, c.parents)
			}
		})
	}
}

// rowRange is first, first+1, …, first+n−1.
func rowRange(first, n int) []int {
	rows := make([]int, n)
	for i := range rows {
		rows[i] = first + i
	}
	return rows
}

// TestDraftLevelBatch: a level's frontier becomes one request of a
// DraftExtend at scratch slots past the request's base (node n at
// sequence index base+n−1, all at position base+level−2, a logits row
// each), and its mask lets each node see the request's tokens and its own
// ancestors only.
func TestDraftLevelBatch(t *testing.T) {
	// Root 9; level 1: nodes 1 (token 5), 2 (token 6); level 2 from node 1:
	// nodes 3 (token 7), 4 (token 8).
	tr := NewDraftTree(9)
	tr.Nodes = append(tr.Nodes, DraftNode{Parent: 0, Token: 5}, DraftNode{Parent: 0, Token: 6}, DraftNode{Parent: 1, Token: 7}, DraftNode{Parent: 1, Token: 8})
	tr.Frontier = []int{3, 4}
	slots := make([]int32, 20)
	for i := range slots {
		slots[i] = int32(100 + i)
	}
	b := &forward.Batch{Mode: forward.DraftExtend}
	const base, level = 4, 3 // the request holds 4 tokens; the frontier is level 2
	AppendDraftLevel(b, 7, slots, base, level, tr)
	AttachDraftMasks(b, []*DraftTree{tr})
	if !slices.Equal(b.ReqRows, []int32{7}) || !slices.Equal(b.PrefixLens, []int32{base + 3 - 1}) || !slices.Equal(b.ExtendLens, []int32{2}) {
		t.Fatalf("request: rows %v prefix %v extend %v", b.ReqRows, b.PrefixLens, b.ExtendLens)
	}
	if !slices.Equal(b.InputIDs, []int32{7, 8}) || !slices.Equal(b.Positions, []int32{base + level - 2, base + level - 2}) ||
		!slices.Equal(b.OutSlots, []int32{slots[base+2], slots[base+3]}) || !slices.Equal(b.LogitRows, []int32{0, 1}) {
		t.Fatalf("tokens %v positions %v slots %v logits %v", b.InputIDs, b.Positions, b.OutSlots, b.LogitRows)
	}
	// Keys: the 4 tokens, then nodes 1..4 at base+0..base+3.
	want := []bool{
		true, true, true, true, true, false, true, false, // node 3: tokens, node 1, itself
		true, true, true, true, true, false, false, true, // node 4: tokens, node 1, itself
	}
	if !slices.Equal(b.CustomMask, want) || !slices.Equal(b.MaskStarts, []int32{0}) {
		t.Fatalf("mask %v starts %v, want %v", b.CustomMask, b.MaskStarts, want)
	}
	if err := b.Finalize(); err != nil {
		t.Fatal(err)
	}
}

// TestDraftLogitsOnDevice: a top-1 drafter's device logits are argmaxed
// by the device sampler (its own rows only, temperature 0) and only the
// ids come back; Expand chains them, mapped through id, each child at its
// parent's score. Host logits, or a wider top-k, keep the rows: the
// children are the top-k by log-probability.
func TestDraftLogitsOnDevice(t *testing.T) {
	w := cpu.NewWorkers(1)
	defer w.Close()
	rt := cpu.NewRuntime(w)
	defer rt.Close()
	f := fakedevice.New()
	dev := struct {
		device.Runtime
		*fakedevice.Sampler
	}{rt, f}
	host := tensor.From([]float32{0, 3, 1, 2, 5, 4, 9, 0, 1, 7, 7, 7}, 4, 3) // the last row: padding
	got, err := DraftLogitsOf(dev, f.Put(host), 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.IDs, []int{1000, 1001, 1002}) || f.Copies != 0 || len(f.Sampled) != 1 {
		t.Fatalf("ids %v, %d copies, %d sample calls; want the device's draw of the 3 rows and no copy", got.IDs, f.Copies, len(f.Sampled))
	}
	for i, r := range f.Sampled[0] {
		if !reflect.DeepEqual(r, device.SampleRow{Row: i}) {
			t.Errorf("row %d drawn with %+v, want the greedy draw", i, r)
		}
	}
	tr := NewDraftTree(7)
	tr.Nodes[0].Score = -0.5
	tr.ExpandRoot(got, 2, 1, func(tok int) int { return tok + 1 })
	if len(tr.Frontier) != 1 || tr.Nodes[1] != (DraftNode{Parent: 0, Token: 1003, Score: -0.5, Row: 2}) {
		t.Fatalf("chain node %+v", tr.Nodes[1:])
	}

	onHost, err := DraftLogitsOf(dev, host, 1, 3)
	if err != nil || onHost.IDs != nil || onHost.Host.Rows() != 4 {
		t.Fatalf("host logits: %+v, %v", onHost, err)
	}
	onHost.Host.Data[3] = 99 // a copy: the forward's memory is recycled
	if host.HostData()[3] != 2 {
		t.Fatalf("host logits not copied")
	}
	onHost.Host.Data[3] = 2
	tr = NewDraftTree(7)
	tr.ExpandRoot(onHost, 1, 2, nil)
	if len(tr.Frontier) != 2 || tr.Nodes[1].Token != 1 || tr.Nodes[2].Token != 2 || tr.Nodes[1].Score <= tr.Nodes[2].Score {
		t.Fatalf("top-2 of row 1 (2 5 4): %+v", tr.Nodes[1:])
	}
	lp := make([]float32, 3)
	sample.LogSoftmax([]float32{2, 5, 4}, lp)
	if math.Abs(tr.Nodes[1].Score-float64(lp[1])) > 1e-6 {
		t.Errorf("score %g, want log p %g", tr.Nodes[1].Score, lp[1])
	}
}

// TestDraftGraphSize: a drafter's Decode batch, a DraftExtend whose
// requests extend by the same n tokens with a logits row each (a tree
// level), and one with a logits row at each request's last token (a
// catch-up on as many tokens each) are padded to the captured size and
// kept under keys of their own, above every target key; a catch-up of
// different lengths or of more tokens than a verify step accepts (a new
// prompt's), or a batch over the largest size, runs eagerly.
func TestDraftGraphSize(t *testing.T) {
	kv := &kvcache.Cache{Table: kvcache.NewReqToToken(4, 32)}
	d := NewDraft(nil, nil, kv, nil)
	d.SetGraphs(NewGraphs(nil, []int{1, 2, 4}), 3)
	req := func(b *forward.Batch, prefix, n int, rows bool) {
		b.ReqRows = append(b.ReqRows, 0)
		b.PrefixLens = append(b.PrefixLens, int32(prefix))
		b.ExtendLens = append(b.ExtendLens, int32(n))
		for i := range n {
			if rows || i == n-1 {
				b.LogitRows = append(b.LogitRows, int32(len(b.InputIDs)))
			}
			b.InputIDs = append(b.InputIDs, 1)
			b.Positions = append(b.Positions, int32(prefix+i))
			b.OutSlots = append(b.OutSlots, 1)
		}
	}
	cases := []struct {
		name      string
		mode      forward.Mode
		lens      []int
		allRows   bool
		size, n   int
		step      DraftStep
		graphOK   bool
		tokens    int // after padding
		logitRows int
	}{
		{"chain level of 3", forward.Decode, []int{1, 1, 1}, true, 4, 1, DraftChain, true, 4, 4},
		{"tree level, top-2, one request", forward.DraftExtend, []int{2}, true, 1, 2, DraftLevel, true, 2, 2},
		{"tree level, top-2, three requests", forward.DraftExtend, []int{2, 2, 2}, true, 4, 2, DraftLevel, true, 8, 8},
		{"catch-up of one token each", forward.DraftExtend, []int{1, 1}, true, 2, 1, DraftLevel, true, 2, 2},
		{"catch-up of three tokens each", forward.DraftExtend, []int{3, 3, 3}, false, 4, 3, DraftCatchUp, true, 12, 4},
		{"catch-up of different lengths", forward.DraftExtend, []int{3, 1}, false, 0, 0, 0, false, 0, 0},
		{"catch-up over what a verify step accepts", forward.DraftExtend, []int{4}, false, 0, 0, 0, false, 0, 0},
		{"over the largest size", forward.Decode, []int{1, 1, 1, 1, 1}, true, 0, 1, DraftChain, false, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &forward.Batch{Mode: c.mode, KV: kv}
			for _, n := range c.lens {
				req(b, 5, n, c.allRows)
			}
			size, n, step, ok := d.graphSize(b)
			if ok != c.graphOK || size != c.size || n != c.n || step != c.step {
				t.Fatalf("graphSize = %d, %d, %v, %v; want %d, %d, %v, %v", size, n, step, ok, c.size, c.n, c.step, c.graphOK)
			}
			if !ok {
				return
			}
			keys := map[int]bool{}
			for _, s := range []DraftStep{DraftChain, DraftLevel, DraftCatchUp} {
				keys[DraftGraphKey(s, size, n)] = true
			}
			if key := DraftGraphKey(step, size, n); key <= GraphKey(size, 1<<10) || len(keys) != 3 {
				t.Errorf("key %#x is not apart from the target's and the other kinds'", key)
			}
			if step == DraftChain {
				padDecode(b, size, kv.Table.PadRow())
			} else {
				padExtend(b, size, n, kv.Table.PadRow(), step == DraftLevel)
			}
			if err := b.Finalize(); err != nil {
				t.Fatal(err)
			}
			if b.NumReqs() != size || len(b.InputIDs) != c.tokens || len(b.LogitRows) != c.logitRows {
				t.Errorf("padded to %d requests, %d tokens, %d logits rows; want %d, %d, %d", b.NumReqs(), len(b.InputIDs), len(b.LogitRows), size, c.tokens, c.logitRows)
			}
			if _, _, again, ok := d.graphSize(b); !ok || again != step {
				t.Errorf("the padded batch is no longer a %v batch", step)
			}
		})
	}
}
