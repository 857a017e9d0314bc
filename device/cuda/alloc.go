package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// MemBackend is where the allocator gets device memory: the Device in
// production, a fake in tests.
type MemBackend interface {
	Malloc(bytes int) (DevicePtr, error)
	Free(p DevicePtr) error
}

// Buffer is a block of device memory from an Allocator. Bytes is what was
// asked for; the block may be larger (its size class).
type Buffer struct {
	Ptr   DevicePtr
	Bytes int
	class int
}

// AllocStats counts an allocator's traffic. InUse and Cached are in bytes of
// whole size classes, which is what the device actually holds.
type AllocStats struct {
	Allocs, Frees    int // calls to Alloc and Free
	Hits             int // Allocs served from the cache
	DeviceAllocs     int // calls to the backend's Malloc
	DeviceFrees      int // calls to the backend's Free
	InUse, PeakInUse int64
	Cached           int64 // freed blocks kept for reuse
	Reserved         int64 // InUse + Cached: what the backend has handed out
}

// Allocator is a caching device-memory allocator. Freed blocks go into a
// free list per size class and are handed out again for any request of that
// class, so a steady-state forward pass makes no cuMemAlloc or cuMemFree
// calls (both synchronise the device, and cuMemAlloc is forbidden inside a
// graph capture). It is safe for concurrent use.
//
// Size classes: 512 B minimum; up to 32 MiB, four classes per power of two
// (at most 25% slack); above 32 MiB, multiples of 2 MiB (bounded slack for
// big one-off buffers). A block is reused only for its own class; blocks are
// never split or merged, which keeps the bookkeeping a map and a stack.
type Allocator struct {
	backend MemBackend
	mu      sync.Mutex
	free    map[int][]DevicePtr // size class → cached blocks
	live    map[DevicePtr]int   // block → size class
	stats   AllocStats
}

// NewAllocator makes an allocator over backend.
func NewAllocator(backend MemBackend) *Allocator {
	return &Allocator{backend: backend, free: map[int][]DevicePtr{}, live: map[DevicePtr]int{}}
}

const (
	minClass       = 512
	largeThreshold = 32 << 20
	largeGranule   = 2 << 20
)

// SizeClass is the block size an allocation of n bytes gets.
func SizeClass(n int) int {
	switch {
	case n <= minClass:
		return minClass
	case n > largeThreshold:
		return (n + largeGranule - 1) / largeGranule * largeGranule
	}
	// p: the largest power of two below n; classes p, 1.25p, 1.5p, 1.75p, 2p.
	p := 1 << (bits.Len(uint(n-1)) - 1)
	step := p / 4
	return (n + step - 1) / step * step
}

// outOfMemory is implemented by backends that can tell an out-of-memory error.
type outOfMemory interface{ IsOutOfMemory(error) bool }

// Alloc returns a block of at least n bytes. On a backend failure it frees
// every cached block and tries once more, since fragmentation across classes
// is the likely cause.
//
// The lock is never held across a backend call: the backend runs on the
// device thread, which may itself be waiting for this lock (a forward pass
// inside Device.Do allocating while another goroutine allocates).
func (a *Allocator) Alloc(n int) (Buffer, error) {
	if n < 0 {
		return Buffer{}, fmt.Errorf("cuda: allocate %d bytes", n)
	}
	class := SizeClass(n)
	a.mu.Lock()
	a.stats.Allocs++
	if list := a.free[class]; len(list) > 0 {
		p := list[len(list)-1]
		a.free[class] = list[:len(list)-1]
		a.stats.Hits++
		a.stats.Cached -= int64(class)
		a.take(p, class)
		a.mu.Unlock()
		return Buffer{Ptr: p, Bytes: n, class: class}, nil
	}
	a.mu.Unlock()

	p, err := a.backend.Malloc(class)
	if err != nil {
		if oom, ok := a.backend.(outOfMemory); !ok || oom.IsOutOfMemory(err) {
			if released, rerr := a.ReleaseCachedCount(); rerr != nil {
				return Buffer{}, errors.Join(err, rerr)
			} else if released > 0 {
				p, err = a.backend.Malloc(class)
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		return Buffer{}, fmt.Errorf("cuda: allocate %d bytes (%d in use, %d cached): %w", class, a.stats.InUse, a.stats.Cached, err)
	}
	a.stats.DeviceAllocs++
	a.stats.Reserved += int64(class)
	a.take(p, class)
	return Buffer{Ptr: p, Bytes: n, class: class}, nil
}

func (a *Allocator) take(p DevicePtr, class int) {
	a.live[p] = class
	a.stats.InUse += int64(class)
	a.stats.PeakInUse = max(a.stats.PeakInUse, a.stats.InUse)
}

// Free returns a block to its class's free list. The memory may be handed
// out again at once, so work still reading it must be on the same stream as
// the next user (the one-stream rule of a forward pass) or synchronised.
func (a *Allocator) Free(b Buffer) error {
	if b.Ptr == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	class, ok := a.live[b.Ptr]
	if !ok {
		return fmt.Errorf("cuda: free of %#x, which this allocator did not hand out or already freed", uintptr(b.Ptr))
	}
	delete(a.live, b.Ptr)
	a.stats.Frees++
	a.stats.InUse -= int64(class)
	a.stats.Cached += int64(class)
	a.free[class] = append(a.free[class], b.Ptr)
	return nil
}

// ReleaseCached gives every cached block back to the backend.
func (a *Allocator) ReleaseCached() error {
	_, err := a.ReleaseCachedCount()
	return err
}

// ReleaseCachedCount is ReleaseCached, also saying how many blocks it freed.
func (a *Allocator) ReleaseCachedCount() (int, error) {
	type block struct {
		p     DevicePtr
		class int
	}
	a.mu.Lock()
	var blocks []block
	for class, list := range a.free {
		for _, p := range list {
			blocks = append(blocks, block{p, class})
		}
		a.stats.Cached -= int64(class * len(list))
		delete(a.free, class)
	}
	a.mu.Unlock()

	var errs []error
	var freed, freedBytes int
	for _, b := range blocks {
		if err := a.backend.Free(b.p); err != nil {
			errs = append(errs, err)
			continue
		}
		freed++
		freedBytes += b.class
	}
	a.mu.Lock()
	a.stats.DeviceFrees += freed
	a.stats.Reserved -= int64(freedBytes)
	a.mu.Unlock()
	return freed, errors.Join(errs...)
}

// ResetPeak starts PeakInUse over from what is in use now, so that the
// peak of what follows can be read (a profile forward).
func (a *Allocator) ResetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.PeakInUse = a.stats.InUse
}

// Stats returns a snapshot of the counters.
func (a *Allocator) Stats() AllocStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}
