package hugemem

import (
	"sync"
)

// Arena hands out long-lived buffers carved from memory outside the Go heap
// (Map) and returns them all at once (Free): the weights a model packs at
// load, which live exactly as long as the model. Off the
// heap they neither raise the collector's goal (gigabytes of live weights
// would let as many gigabytes of load-time garbage pile up between
// collections) nor count as heap the collector must account for.
//
// Buffers are 64-byte aligned and zeroed. Chunks start at one huge page
// and double up to maxArenaChunk, so a tiny model maps little; a buffer
// over half a chunk gets a mapping of its own. The zero Arena is ready.
type Arena struct {
	mu     sync.Mutex
	maps   [][]byte // every mapping, for Free
	free   []byte   // the unused tail of the current chunk
	next   int      // size of the next chunk
	bytes  int64    // handed out
	closed bool
}

const maxArenaChunk = 16 * PageSize

// Alloc returns n zeroed bytes that stay valid until Free. Where a mapping
// fails (the system refuses anonymous memory) it falls back to the Go heap,
// which would refuse as much; Alloc after Free panics, since the caller
// would hold memory its owner already gave back.
func (a *Arena) Alloc(n int) []byte {
	if n <= 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		panic("hugemem: Arena.Alloc after Free")
	}
	a.bytes += int64(n)
	if n > maxArenaChunk/2 {
		return a.mapped(n)
	}
	if len(a.free) < n {
		size := max(a.next, PageSize)
		for size < n {
			size *= 2 // n <= maxArenaChunk/2: size stays within maxArenaChunk
		}
		a.free = a.mapped(size)
		a.next = min(2*size, maxArenaChunk)
	}
	buf := a.free[:n:n]
	a.free = a.free[min(len(a.free), (n+63)&^63):]
	return buf
}

// mapped maps n bytes and records the mapping (the heap's on failure).
func (a *Arena) mapped(n int) []byte {
	buf, err := Map(n)
	if err != nil {
		return Huge(n)
	}
	a.maps = append(a.maps, buf)
	return buf
}

// Bytes is what Alloc has handed out.
func (a *Arena) Bytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bytes
}

// Free unmaps every buffer the arena handed out; nothing may touch them
// after. Free of a freed arena does nothing.
func (a *Arena) Free() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first error
	for _, m := range a.maps {
		if err := Unmap(m); err != nil && first == nil {
			first = err
		}
	}
	a.maps, a.free, a.closed = nil, nil, true
	return first
}
