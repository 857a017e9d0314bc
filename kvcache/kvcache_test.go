package kvcache

import (
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

func TestAllocatorExhaustionIsNormal(t *testing.T) {
	a, err := NewAllocator(16, 5) // pages 1..4 allocatable
	if err != nil {
		t.Fatal(err)
	}
	p, ok := a.Alloc(3)
	if !ok || len(p) != 3 {
		t.Fatalf("Alloc(3) = %v, %v", p, ok)
	}
	for _, id := range p {
		if id == 0 {
			t.Fatal("page 0 is reserved but was handed out")
		}
	}
	if _, ok := a.Alloc(2); ok {
		t.Fatal("Alloc(2) succeeded with 1 page free")
	}
	if a.NumFree() != 1 {
		t.Fatalf("a failed Alloc changed the free count to %d", a.NumFree())
	}
	a.Free(p)
	if a.NumFree() != 4 {
		t.Fatalf("free = %d after Free, want 4", a.NumFree())
	}
}

func TestInvalidSizes(t *testing.T) {
	if _, err := NewAllocator(0, 4); err == nil {
		t.Error("page size 0 accepted")
	}
	if _, err := NewCache(Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 4, HeadDimV: 4}, -3, 10, 1, 10); err == nil {
		t.Error("negative page size accepted")
	}
}

// TestSlotsAreTokenGranular checks slot = page*pageSize + offset for every
// page size, and that sequences never share a slot.
func TestSlotsAreTokenGranular(t *testing.T) {
	for _, ps := range []int{1, 3, 16, 64} {
		c, err := NewCache(Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 2, HeadDimV: 2}, ps, 300, 4, 200)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int32]bool{}
		var seqs []*Seq
		for range 2 {
			s, ok := c.NewSeq()
			if !ok {
				t.Fatal("no row")
			}
			for _, n := range []int{1, 5, 17, 70} { // grow in steps
				if ok, err := c.Grow(s, n); !ok || err != nil {
					t.Fatalf("page %d: Grow(%d) = %v, %v", ps, n, ok, err)
				}
			}
			row := c.Table.Row(s.Row)
			for i := range s.Len {
				slot := row[i]
				if int(slot)/ps != int(s.Pages[i/ps]) || int(slot)%ps != i%ps {
					t.Fatalf("page size %d: token %d in slot %d, pages %v", ps, i, slot, s.Pages)
				}
				if seen[slot] || slot < int32(ps) {
					t.Fatalf("page size %d: slot %d reused or in the reserved page", ps, slot)
				}
				seen[slot] = true
			}
			seqs = append(seqs, s)
		}
		if _, err := c.Grow(seqs[0], 201); err == nil {
			t.Errorf("growing past the context limit did not fail")
		}
		for _, s := range seqs {
			c.Release(s)
		}
		if c.Alloc.NumFree() != c.Alloc.NumPages()-1 {
			t.Errorf("page size %d: %d pages free after release, want %d", ps, c.Alloc.NumFree(), c.Alloc.NumPages()-1)
		}
	}
}

func TestGrowFailsWithoutSideEffects(t *testing.T) {
	c, err := NewCache(Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 2, HeadDimV: 2}, 4, 8, 2, 64) // 2 usable pages
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.NewSeq()
	if ok, _ := c.Grow(s, 12); ok {
		t.Fatal("Grow(12) fit in 8 tokens")
	}
	if len(s.Pages) != 0 || s.Len != 0 || c.Alloc.NumFree() != 2 {
		t.Fatalf("failed Grow left pages=%v len=%d free=%d", s.Pages, s.Len, c.Alloc.NumFree())
	}
}

// TestPadRowIsNeverHandedOut: the padding row stays out of allocation and
// maps every position to the reserved slot 0, however rows are used.
func TestPadRowIsNeverHandedOut(t *testing.T) {
	tab := NewReqToToken(3, 8)
	pad := tab.PadRow()
	var got []int
	for {
		r, ok := tab.AllocRow()
		if !ok {
			break
		}
		if r == pad {
			t.Fatalf("AllocRow handed out the pad row %d", pad)
		}
		for i := range tab.Row(r) {
			tab.Row(r)[i] = int32(100 + i) // a request writing its slots
		}
		got = append(got, r)
	}
	if len(got) != 3 {
		t.Fatalf("allocated %d rows, want 3", len(got))
	}
	for i, s := range tab.Row(pad) {
		if s != 0 {
			t.Fatalf("pad row position %d maps to slot %d, want 0", i, s)
		}
	}
}

// TestShrinkAndMoveSlot: Shrink returns the pages past the kept
// tokens and Grow can take them again; MoveSlot copies K and V.
func TestShrinkAndMoveSlot(t *testing.T) {
	spec := Spec{NumLayers: 2, NumKVHeads: 1, HeadDim: 4, HeadDimV: 4, DType: tensor.F32}
	c, err := NewCache(spec, 4, 64, 2, 64)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.NewSeq()
	free := c.Alloc.NumFree()
	if ok, err := c.Grow(s, 13); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if got := free - c.Alloc.NumFree(); got != 4 {
		t.Fatalf("13 tokens took %d pages, want 4", got)
	}
	c.Shrink(s, 6)
	if got := free - c.Alloc.NumFree(); got != 2 || len(s.Pages) != 2 || s.Len != 6 {
		t.Fatalf("after Shrink(6): %d pages taken, %d held, Len %d; want 2, 2, 6", got, len(s.Pages), s.Len)
	}
	if ok, _ := c.Grow(s, 10); !ok || len(s.Pages) != 3 {
		t.Fatalf("Grow after Shrink: %v, %d pages", ok, len(s.Pages))
	}
	row := c.Table.Row(s.Row)
	h, err := c.Pool.Host()
	if err != nil {
		t.Fatal(err)
	}
	for l := range 2 {
		h.StoreK(l, row[9], []float32{1, 2, 3, float32(l)})
		h.StoreV(l, row[9], []float32{5, 6, 7, float32(l)})
	}
	h.MoveSlot(row[7], row[9])
	var scratch []float32
	for l := range 2 {
		if k := h.K(l, row[7], 1, &scratch); k[3] != float32(l) || k[0] != 1 {
			t.Fatalf("layer %d: moved K %v", l, k)
		}
		if v := h.V(l, row[7], 1, &scratch); v[3] != float32(l) || v[0] != 5 {
			t.Fatalf("layer %d: moved V %v", l, v)
		}
	}
	c.Release(s)
	if c.Alloc.NumFree() != free {
		t.Fatalf("%d pages free after release, want %d", c.Alloc.NumFree(), free)
	}
}
