package spec

import (
	"slices"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	good := []struct {
		in   Config
		want Config
	}{
		{Config{}, Config{}},
		{Config{Algorithm: "ngram"}, Config{Algorithm: NGram, NumSteps: 7, TopK: 4, NumDraftTokens: 8}},
		{Config{Algorithm: "NGRAM", NumDraftTokens: 4, TopK: 1}, Config{Algorithm: NGram, NumSteps: 3, TopK: 1, NumDraftTokens: 4}},
		{Config{Algorithm: "STANDALONE", DraftModelPath: "d"}, Config{Algorithm: Standalone, DraftModelPath: "d", NumSteps: 3, TopK: 1, NumDraftTokens: 4}},
		{Config{Algorithm: "STANDALONE", DraftModelPath: "d", NumSteps: 3, TopK: 2}, Config{Algorithm: Standalone, DraftModelPath: "d", NumSteps: 3, TopK: 2, NumDraftTokens: 7}},
		{Config{Algorithm: "eagle3", DraftModelPath: "d"}, Config{Algorithm: Eagle3, DraftModelPath: "d", NumSteps: 5, TopK: 4, NumDraftTokens: 8}},
		{Config{Algorithm: "EAGLE", DraftModelPath: "d", NumSteps: 3, TopK: 1}, Config{Algorithm: Eagle, DraftModelPath: "d", NumSteps: 3, TopK: 1, NumDraftTokens: 4}},
	}
	for _, g := range good {
		got, err := g.in.Normalize()
		if err != nil || got != g.want {
			t.Errorf("Normalize(%+v) = %+v, %v; want %+v", g.in, got, err, g.want)
		}
	}
	bad := []struct {
		in   Config
		want string
	}{
		{Config{Algorithm: "MEDUSA"}, "must be NGRAM, STANDALONE, EAGLE or EAGLE3"},
		{Config{NumSteps: 3}, "need --speculative-algorithm"},
		{Config{Algorithm: "EAGLE"}, "needs --speculative-draft-model-path"},
		{Config{Algorithm: "EAGLE3"}, "needs --speculative-draft-model-path"},
		{Config{Algorithm: "EAGLE3", DraftModelPath: "d", NumSteps: 2, TopK: 2, NumDraftTokens: 6}, "more than a EAGLE3 tree"},
		{Config{Algorithm: "EAGLE", DraftModelPath: "d", NumSteps: 3, TopK: 1, NumDraftTokens: 3}, "the tree is a chain"},
		{Config{Algorithm: "STANDALONE"}, "needs --speculative-draft-model-path"},
		{Config{Algorithm: "NGRAM", DraftModelPath: "d"}, "remove --speculative-draft-model-path"},
		{Config{Algorithm: "NGRAM", TopK: -1}, "--speculative-eagle-topk must be positive"},
		{Config{Algorithm: "NGRAM", NumDraftTokens: 1}, "at least 2"},
		{Config{Algorithm: "STANDALONE", DraftModelPath: "d", NumSteps: 2, TopK: 2, NumDraftTokens: 6}, "more than a STANDALONE tree"},
		{Config{Algorithm: "NGRAM", NumSteps: 2, TopK: 1, NumDraftTokens: 5}, "more than a NGRAM tree"},
	}
	for _, b := range bad {
		if _, err := b.in.Normalize(); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Normalize(%+v) = %v, want an error with %q", b.in, err, b.want)
		}
	}
}

func TestTreeMaskAndTruncate(t *testing.T) {
	tr := NewTree(10)
	a := tr.Add(0, 11) // 1
	tr.Add(0, 12)      // 2
	b := tr.Add(a, 13) // 3
	tr.Add(b, 14)      // 4
	if tr.IsChain() || tr.Child(a, 13) != b || tr.Child(a, 12) != -1 || tr.Depth(4) != 3 {
		t.Fatalf("tree bookkeeping wrong: %+v", tr)
	}
	mask := tr.AppendMask(nil, 2)
	want := [][]bool{ // keys: 2 prefix tokens, then nodes 0..4
		{true, true, true, false, false, false, false},
		{true, true, true, true, false, false, false},
		{true, true, true, false, true, false, false},
		{true, true, true, true, false, true, false},
		{true, true, true, true, false, true, true},
	}
	for i, row := range want {
		if got := mask[i*7 : (i+1)*7]; !slices.Equal(got, row) {
			t.Errorf("mask row %d = %v, want %v", i, got, row)
		}
	}
	if got := tr.Truncate(4, 2); !slices.Equal(got.Tokens, []int{10, 11, 12, 13}) || !slices.Equal(got.Parents, []int{-1, 0, 0, 1}) {
		t.Errorf("Truncate(4, 2) = %+v", got)
	}
	if got := tr.Truncate(10, 1); !slices.Equal(got.Tokens, []int{10, 11, 12}) {
		t.Errorf("Truncate(10, 1) = %+v", got)
	}
	if got := tr.FirstPath(); !got.IsChain() || !slices.Equal(got.Tokens, []int{10, 11, 13, 14}) {
		t.Errorf("FirstPath = %+v", got)
	}
}

// TestPadTo: padding lengthens a tree to a fixed size as a chain under
// its last node (a chain stays a chain), is never a drafted child and
// is not counted as a draft; its mask rows come after every drafted
// node's, which see no padding.
func TestPadTo(t *testing.T) {
	chain := NewTree(5)
	chain.Add(0, 6)
	chain.PadTo(4)
	if chain.Len() != 4 || chain.Pad != 2 || chain.Drafts() != 1 || !chain.IsChain() || !slices.Equal(chain.Tokens, []int{5, 6, 5, 5}) {
		t.Fatalf("padded chain %+v", chain)
	}
	if got := chain.Children(1); len(got) != 0 {
		t.Errorf("the drafted leaf has children %v", got)
	}
	tr := NewTree(10)
	tr.Add(0, 11)
	tr.Add(0, 12)
	tr.PadTo(5)
	if tr.Drafts() != 2 || !slices.Equal(tr.Parents, []int{-1, 0, 0, 2, 3}) || !slices.Equal(tr.Children(0), []int{1, 2}) || len(tr.Children(2)) != 0 {
		t.Fatalf("padded tree %+v, children of the root %v, of node 2 %v", tr, tr.Children(0), tr.Children(2))
	}
	mask := tr.AppendMask(nil, 0)
	for i := range 3 { // drafted rows see no padding key
		if row := mask[i*5 : (i+1)*5]; row[3] || row[4] {
			t.Errorf("row %d sees padding: %v", i, row)
		}
	}
	root := NewTree(7)
	root.PadTo(3)
	if root.Drafts() != 0 || len(root.Children(0)) != 0 {
		t.Errorf("padded root %+v", root)
	}
	root.PadTo(2) // no shorter
	if root.Len() != 3 {
		t.Errorf("PadTo(2) of 3 nodes: %d", root.Len())
	}
}

func TestNGramDraft(t *testing.T) {
	g := &NGramDrafter{MinMatch: 1, MaxMatch: 4, MaxDepth: 4, MaxNodes: 8, TopK: 2}
	// "1 2 3" occurred twice, followed by 4 5 6 and by 7 8: both branch
	// from the root, the longer and more recent match first.
	tokens := []int{1, 2, 3, 7, 8, 9, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3}
	tr := g.Draft(tokens)
	if tr.Tokens[0] != 3 {
		t.Fatalf("root %d, want the last token 3", tr.Tokens[0])
	}
	first := tr.FirstPath()
	if !slices.Equal(first.Tokens, []int{3, 4, 5, 6, 0}) {
		t.Errorf("first path %v, want the most recent continuation 3 4 5 6 0", first.Tokens)
	}
	if tr.Child(0, 7) < 0 {
		t.Errorf("the older continuation 7 is not a branch: %+v", tr)
	}
	if tr.Len() > g.MaxNodes {
		t.Errorf("%d nodes, limit %d", tr.Len(), g.MaxNodes)
	}
	for i := 1; i < tr.Len(); i++ {
		if len(tr.Children(tr.Parents[i])) > g.TopK {
			t.Errorf("node %d has more than %d children", tr.Parents[i], g.TopK)
		}
	}
	if got := g.Draft([]int{5, 6, 7}); got.Len() != 1 {
		t.Errorf("nothing repeats, yet drafted %+v", got)
	}
}
