package kvcache

import "fmt"

// Cache ties the allocator, the request table and the pool together and
// tracks which pages each sequence owns.
type Cache struct {
	Alloc *Allocator
	Table *ReqToToken
	Pool  *Pool
	// SWA allocates pages of the sliding-window region (nil when the model
	// has no windowed layers or the region is disabled); see swa.go.
	SWA *Allocator
}

// Seq is one request's footprint in the cache.
type Seq struct {
	Row   int     // row in the ReqToToken table
	Pages []int32 // pages in token order
	Len   int     // tokens with slots assigned
	// Shared is how many leading pages belong to the radix cache (a
	// matched prefix); the sequence owns only Pages[Shared:].
	Shared int
	// SWA region bookkeeping (swa.go): owned pages in [Shared, SWALive)
	// have had their window pages freed; pages in [SWALive, SWAEnd) have
	// them; pages from SWAEnd on do not have them yet.
	SWALive, SWAEnd int
}

// NewCache sizes a cache for numTokens tokens (rounded up to whole pages,
// plus the reserved page), maxReqs concurrent requests and maxContext
// tokens per request.
func NewCache(spec Spec, pageSize, numTokens, maxReqs, maxContext int) (*Cache, error) {
	return NewCacheWithPool(spec, pageSize, numTokens, maxReqs, maxContext, func(spec Spec, slots, pageSize int) (*Pool, error) {
		return NewPool(spec, slots, pageSize)
	})
}

// NewCacheWithPool is NewCache with the pool made by newPool (a GPU pool,
// for instance).
func NewCacheWithPool(spec Spec, pageSize, numTokens, maxReqs, maxContext int, newPool func(spec Spec, slots, pageSize int) (*Pool, error)) (*Cache, error) {
	if pageSize <= 0 {
		return nil, fmt.Errorf("--page-size must be positive, got %d", pageSize)
	}
	numPages := (numTokens+pageSize-1)/pageSize + 1
	alloc, err := NewAllocator(pageSize, numPages)
	if err != nil {
		return nil, err
	}
	pool, err := newPool(spec, numPages*pageSize, pageSize)
	if err != nil {
		return nil, err
	}
	c := &Cache{Alloc: alloc, Table: NewReqToToken(maxReqs, maxContext), Pool: pool}
	if spec.MaxWindow() > 0 {
		if c.SWA, err = NewAllocator(pageSize, swaPages(spec, pageSize)); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// PageSize is the allocation granularity in tokens.
func (c *Cache) PageSize() int { return c.Alloc.PageSize() }

// NewSeq takes a table row for a new request, or false when none is free.
func (c *Cache) NewSeq() (*Seq, bool) {
	r, ok := c.Table.AllocRow()
	if !ok {
		return nil, false
	}
	return &Seq{Row: r}, true
}

// PagesNeeded is how many more pages s needs to hold newLen tokens.
func (c *Cache) PagesNeeded(s *Seq, newLen int) int {
	ps := c.PageSize()
	return max(0, (newLen+ps-1)/ps-len(s.Pages))
}

// Grow assigns slots to tokens [s.Len, newLen), taking pages as needed. It
// returns false, changing nothing, when the pages are not available.
func (c *Cache) Grow(s *Seq, newLen int) (bool, error) {
	if newLen > c.Table.MaxContext() {
		return false, fmt.Errorf("sequence of %d tokens exceeds the context limit of %d", newLen, c.Table.MaxContext())
	}
	if need := c.PagesNeeded(s, newLen); need > 0 {
		pages, ok := c.Alloc.Alloc(need)
		if !ok {
			return false, nil
		}
		s.Pages = append(s.Pages, pages...)
	}
	ps := int32(c.PageSize())
	row := c.Table.Row(s.Row)
	for i := s.Len; i < newLen; i++ {
		row[i] = s.Pages[i/int(ps)]*ps + int32(i)%ps
	}
	s.Len = max(s.Len, newLen)
	return true, nil
}

// Shrink gives back the pages s holds beyond its first newLen tokens
// (speculative decoding's rejected drafts), keeping the pages of the
// radix-owned prefix. Slots of tokens [newLen, Len) in the table are stale
// afterwards; Grow rewrites them.
func (c *Cache) Shrink(s *Seq, newLen int) {
	keep := max((newLen+c.PageSize()-1)/c.PageSize(), s.Shared)
	if keep >= len(s.Pages) {
		s.Len = min(s.Len, max(newLen, s.Shared*c.PageSize()))
		return
	}
	c.FreePages(s.Pages[keep:])
	s.Pages = s.Pages[:keep]
	s.SWAEnd = min(s.SWAEnd, keep)
	s.SWALive = min(s.SWALive, s.SWAEnd)
	s.Len = min(s.Len, max(newLen, s.Shared*c.PageSize()))
}

// SetSharedPrefix makes the sequence's first len(pages) pages the given
// radix-owned pages (replacing any it held there, which the caller has
// dealt with) and maps their tokens in the table.
func (c *Cache) SetSharedPrefix(s *Seq, pages []int32) {
	if len(pages) > len(s.Pages) {
		s.Pages = append(s.Pages, make([]int32, len(pages)-len(s.Pages))...)
	}
	copy(s.Pages, pages)
	s.Shared = len(pages)
	s.SWALive = max(s.SWALive, s.Shared)
	s.SWAEnd = max(s.SWAEnd, s.Shared)
	ps := int32(c.PageSize())
	row := c.Table.Row(s.Row)
	for i := range len(pages) * int(ps) {
		row[i] = pages[i/int(ps)]*ps + int32(i)%ps
	}
	s.Len = max(s.Len, len(pages)*int(ps))
}

// Release frees the pages the sequence owns and its row.
func (c *Cache) Release(s *Seq) {
	c.FreePages(s.Pages[s.Shared:])
	s.Pages = nil
	s.Len, s.Shared, s.SWALive, s.SWAEnd = 0, 0, 0, 0
	c.Table.FreeRow(s.Row)
}

// FreePages returns pages, and their window pages if any, to the allocators.
func (c *Cache) FreePages(pages []int32) {
	if c.SWA != nil {
		for _, p := range pages {
			if w := c.Pool.swaPage[p]; w != 0 {
				c.SWA.Free([]int32{w})
				c.Pool.swaPage[p] = 0
			}
		}
	}
	c.Alloc.Free(pages)
}

// NewRadixCache makes a prefix cache whose evictions free through FreePages.
func (c *Cache) NewRadixCache() *RadixCache {
	r := NewRadixCache(c.Alloc)
	r.free = c.FreePages
	return r
}
