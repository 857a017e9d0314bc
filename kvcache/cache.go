package kvcache

import "fmt"

// Cache ties the allocator, the request table and the pool together and
// tracks which pages each sequence owns.
type Cache struct {
	Alloc *Allocator
	Table *ReqToToken
	Pool  *Pool
}

// Seq is one request's footprint in the cache.
type Seq struct {
	Row   int     // row in the ReqToToken table
	Pages []int32 // pages in token order
	Len   int     // tokens with slots assigned
}

// NewCache sizes a cache for numTokens tokens (rounded up to whole pages,
// plus the reserved page), maxReqs concurrent requests and maxContext
// tokens per request.
func NewCache(spec Spec, pageSize, numTokens, maxReqs, maxContext int) (*Cache, error) {
	if pageSize <= 0 {
		return nil, fmt.Errorf("--page-size must be positive, got %d", pageSize)
	}
	numPages := (numTokens+pageSize-1)/pageSize + 1
	alloc, err := NewAllocator(pageSize, numPages)
	if err != nil {
		return nil, err
	}
	pool, err := NewPool(spec, numPages*pageSize)
	if err != nil {
		return nil, err
	}
	return &Cache{Alloc: alloc, Table: NewReqToToken(maxReqs, maxContext), Pool: pool}, nil
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

// Release frees the sequence's pages and row.
func (c *Cache) Release(s *Seq) {
	c.Alloc.Free(s.Pages)
	s.Pages = nil
	s.Len = 0
	c.Table.FreeRow(s.Row)
}
