// Package kvcache owns the paged KV cache: the page Allocator, the
// token-granular ReqToToken table and the per-layer K/V Pool.
//
// Memory model (slots are token positions in the pool):
//
//	pool slots:   [ page 0 (reserved dummy) | page 1 | page 2 | ... ]
//	               slot = page*PageSize + offset
//	ReqToToken:   row r, entry i = slot holding token i of the request in row r
//
// Page 0 is never handed out: its slots are a safe write target for padded
// tokens (CUDA-graph padding, idle batches). A natively paged kernel derives
// a token's page as slot/PageSize; a token-indexed kernel reads slots as is.
package kvcache

import "fmt"

// Allocator hands out whole pages. Running out is a normal outcome reported
// by a false return, never an error or a panic.
type Allocator struct {
	pageSize int
	numPages int // including the reserved page 0
	free     []int32
}

// NewAllocator manages numPages pages (page 0 reserved) of pageSize tokens.
func NewAllocator(pageSize, numPages int) (*Allocator, error) {
	if pageSize <= 0 {
		return nil, fmt.Errorf("page size must be positive, got %d", pageSize)
	}
	if numPages < 2 {
		return nil, fmt.Errorf("the KV cache needs at least 2 pages (one is reserved), got %d", numPages)
	}
	a := &Allocator{pageSize: pageSize, numPages: numPages}
	a.Reset()
	return a, nil
}

// Reset returns every page to the free list.
func (a *Allocator) Reset() {
	a.free = a.free[:0]
	// Free list is a stack; push in reverse so low pages go out first.
	for p := a.numPages - 1; p >= 1; p-- {
		a.free = append(a.free, int32(p))
	}
}

func (a *Allocator) PageSize() int { return a.pageSize }
func (a *Allocator) NumPages() int { return a.numPages }
func (a *Allocator) NumFree() int  { return len(a.free) }

// Alloc takes n pages, or none and false when fewer than n are free.
func (a *Allocator) Alloc(n int) ([]int32, bool) {
	if n > len(a.free) {
		return nil, false
	}
	pages := make([]int32, n)
	copy(pages, a.free[len(a.free)-n:])
	a.free = a.free[:len(a.free)-n]
	return pages, true
}

// Free returns pages to the allocator.
func (a *Allocator) Free(pages []int32) {
	for _, p := range pages {
		if p <= 0 || int(p) >= a.numPages {
			panic(fmt.Sprintf("kvcache: freeing invalid page %d", p))
		}
	}
	a.free = append(a.free, pages...)
}

// ReqToToken maps (request row, token index) to a KV slot.
type ReqToToken struct {
	maxContext int
	table      []int32 // [rows+1, maxContext]; the last row is PadRow
	freeRows   []int
	padRow     int
}

// NewReqToToken makes a table for rows concurrent requests of up to
// maxContext tokens each.
//
// One more row, PadRow, is never handed out and maps every position to
// slot 0 of the reserved page 0: the row of the padding requests a CUDA
// graph's fixed batch size adds (they write and read only that slot).
func NewReqToToken(rows, maxContext int) *ReqToToken {
	t := &ReqToToken{maxContext: maxContext, table: make([]int32, (rows+1)*maxContext), padRow: rows}
	for r := rows - 1; r >= 0; r-- {
		t.freeRows = append(t.freeRows, r)
	}
	return t
}

func (t *ReqToToken) MaxContext() int { return t.maxContext }

// Row is the slot list of row r (length MaxContext; only the first
// seq-length entries are meaningful).
func (t *ReqToToken) Row(r int) []int32 {
	return t.table[r*t.maxContext : (r+1)*t.maxContext]
}

// PadRow is the row of padding requests: all zeros (the reserved slot 0),
// never allocated.
func (t *ReqToToken) PadRow() int { return t.padRow }

// AllocRow takes a free row, or false when all are in use.
func (t *ReqToToken) AllocRow() (int, bool) {
	if len(t.freeRows) == 0 {
		return 0, false
	}
	r := t.freeRows[len(t.freeRows)-1]
	t.freeRows = t.freeRows[:len(t.freeRows)-1]
	return r, true
}

// FreeRow returns a row.
func (t *ReqToToken) FreeRow(r int) { t.freeRows = append(t.freeRows, r) }

// NumFreeRows is the number of rows available.
func (t *ReqToToken) NumFreeRows() int { return len(t.freeRows) }
