package kvcache

import (
	"slices"
	"testing"
)

func seqTokens(n, base int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

func TestRadixMatchInsertSplit(t *testing.T) {
	for _, ps := range []int{1, 4} {
		alloc, _ := NewAllocator(ps, 64)
		c := NewRadixCache(alloc)
		a := seqTokens(10, 100) // 10 tokens: 2 full pages at ps=4
		pagesA, _ := alloc.Alloc((len(a) + ps - 1) / ps)
		dup, node := c.Insert(a, pagesA)
		full := len(a) / ps
		if dup != 0 || c.CachedPages() != full {
			t.Fatalf("ps %d: dup %d cached %d, want 0 %d", ps, dup, c.CachedPages(), full)
		}
		alloc.Free(pagesA[full:]) // the partial page stays with the caller
		_ = node

		// b shares the first 8 tokens with a, then diverges.
		b := append(seqTokens(8, 100), 7, 7, 7, 7, 7)
		got, _ := c.Match(b)
		if want := pagesA[:8/ps]; !slices.Equal(got, want) {
			t.Fatalf("ps %d: match %v, want %v", ps, got, want)
		}
		pagesB, _ := alloc.Alloc((len(b) + ps - 1) / ps)
		dup, _ = c.Insert(b, pagesB)
		if dup != 8/ps {
			t.Fatalf("ps %d: dup %d, want %d", ps, dup, 8/ps)
		}
		// a itself still matches whole.
		got, _ = c.Match(a)
		if !slices.Equal(got, pagesA[:full]) {
			t.Fatalf("ps %d: after split, match(a) %v, want %v", ps, got, pagesA[:full])
		}
		// A token sequence with no common first page matches nothing.
		if got, n := c.Match(seqTokens(6, 900)); len(got) != 0 || n != c.Root() {
			t.Fatalf("unexpected match %v", got)
		}
	}
}

func TestRadixLockAndEvict(t *testing.T) {
	alloc, _ := NewAllocator(2, 32)
	c := NewRadixCache(alloc)
	insert := func(tokens []int) *RadixNode {
		pages, ok := alloc.Alloc(len(tokens) / 2)
		if !ok {
			t.Fatal("alloc")
		}
		dup, node := c.Insert(tokens, pages)
		alloc.Free(pages[:dup])
		return node
	}
	old := insert(seqTokens(6, 0))
	pinned := insert(seqTokens(6, 50))
	newer := insert(seqTokens(4, 80))
	_ = old
	c.Lock(pinned)
	if c.EvictablePages() != 5 {
		t.Fatalf("evictable %d, want 5", c.EvictablePages())
	}
	free := alloc.NumFree()
	if n := c.Evict(1); n != 3 { // the least recently used leaf (old) goes whole
		t.Fatalf("evicted %d pages, want 3", n)
	}
	if got, _ := c.Match(seqTokens(6, 0)); len(got) != 0 {
		t.Fatal("evicted prefix still matches")
	}
	if n := c.Evict(100); n != 2 { // only newer is left unpinned
		t.Fatalf("evicted %d, want 2", n)
	}
	if got, _ := c.Match(seqTokens(6, 50)); len(got) != 3 {
		t.Fatal("pinned prefix was evicted")
	}
	if alloc.NumFree() != free+5 {
		t.Fatalf("free pages %d, want %d", alloc.NumFree(), free+5)
	}
	if c.Reset() == nil {
		t.Fatal("Reset succeeded with a pinned path")
	}
	c.Unlock(pinned)
	if err := c.Reset(); err != nil || c.CachedPages() != 0 || alloc.NumFree() != alloc.NumPages()-1 {
		t.Fatalf("reset: %v, cached %d, free %d", err, c.CachedPages(), alloc.NumFree())
	}
	_ = newer
}

// TestRadixLockSurvivesSplit: pinning a node and then splitting its edge
// keeps both halves pinned.
func TestRadixLockSurvivesSplit(t *testing.T) {
	alloc, _ := NewAllocator(1, 32)
	c := NewRadixCache(alloc)
	pages, _ := alloc.Alloc(6)
	_, node := c.Insert(seqTokens(6, 0), pages)
	c.Lock(node)
	c.Match(seqTokens(3, 0)) // splits the edge after 3 pages
	if c.EvictablePages() != 0 {
		t.Fatalf("evictable %d after split of a pinned edge", c.EvictablePages())
	}
	c.Unlock(node)
	if c.EvictablePages() != 6 {
		t.Fatalf("evictable %d after unlock, want 6", c.EvictablePages())
	}
}
