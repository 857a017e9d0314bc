package cuda

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"
)

// The per-forward memory of a ModelOps: the arena of device buffers, the
// pinned staging of host→device index uploads and the cache of this
// forward's uploads. None of it touches a GPU directly, so all of it is
// tested without one (modelops_test.go).

// bufferSource is where an arena gets device memory: the device's caching
// allocator (a fake one in tests).
type bufferSource interface {
	Alloc(n int) (Buffer, error)
	Free(b Buffer) error
}

// arena holds the device buffers of one forward pass. Every activation a
// ModelOps returns is one of them; reset (BeginForward) hands them all back
// to the caching allocator, which gives them out again to the next forward.
//
// Invariant: all work reading or writing an arena buffer is on the
// ModelOps's one stream, so a buffer may be reused while that work is still
// queued (the one-stream rule of Allocator.Free).
//
// A forward that makes the same calls as the previous one gets the same
// addresses back, which is what a captured CUDA graph needs (RunGraph
// compares a dry run with the capture that follows it). The allocator's
// free lists are stacks, so the arena keeps to a stack discipline with
// them: it takes blocks from the allocator only when it has none of the
// class to spare, and gives every block back only at reset, newest first,
// which leaves the free lists as the forward found them. A block released
// early (release) waits in the arena's own per-class stack for the next
// request of its class in this forward; freeing it to the allocator at
// once would reorder the free lists whenever a release is not of the
// newest block, and the next forward would get the same blocks in another
// order.
type arena struct {
	mem   bufferSource
	bufs  []Buffer          // every block taken this forward, in order taken; freed entries have Ptr 0
	index map[DevicePtr]int // held buffer → its position in bufs
	spare map[int][]int     // size class → positions in bufs of released blocks, a stack
	bytes int               // bytes asked for by the held buffers (adopted ones count 0)
	// taken are the buffers in the order this forward took them, a block
	// taken again from spare once more: what releaseSince walks.
	taken []DevicePtr
}

func newArena(mem bufferSource) arena {
	return arena{mem: mem, index: map[DevicePtr]int{}, spare: map[int][]int{}}
}

// alloc takes a buffer of n bytes (at least one allocator block, so even an
// empty tensor has a non-zero device address): a released block of its
// class if the arena has one, else a block from the allocator.
func (a *arena) alloc(n int) (Buffer, error) {
	n = max(n, 1)
	class := SizeClass(n)
	if s := a.spare[class]; len(s) > 0 {
		i := s[len(s)-1]
		a.spare[class] = s[:len(s)-1]
		a.bufs[i].Bytes = n
		a.index[a.bufs[i].Ptr] = i
		a.bytes += n
		a.taken = append(a.taken, a.bufs[i].Ptr)
		return a.bufs[i], nil
	}
	b, err := a.mem.Alloc(n)
	if err != nil && a.freeSpare() {
		// Out of memory with blocks to spare: they go back to the
		// allocator, which frees its cache before failing.
		b, err = a.mem.Alloc(n)
	}
	if err != nil {
		return Buffer{}, err
	}
	a.hold(b)
	return b, nil
}

// freeSpare gives the released blocks back to the allocator now; it
// reports whether there were any.
func (a *arena) freeSpare() bool {
	freed := false
	for class, s := range a.spare {
		for _, i := range s {
			_ = a.mem.Free(a.bufs[i])
			a.bufs[i] = Buffer{}
			freed = true
		}
		delete(a.spare, class)
	}
	return freed
}

func (a *arena) hold(b Buffer) {
	a.index[b.Ptr] = len(a.bufs)
	a.bufs = append(a.bufs, b)
	a.bytes += b.Bytes
	a.taken = append(a.taken, b.Ptr)
}

// adopt makes the arena own a buffer allocated elsewhere from the same
// allocator (an attention backend's output), freeing it with the rest. A
// buffer the arena already holds (an output the backend took from the
// arena, ModelOps.ForwardAlloc) stays as it is.
func (a *arena) adopt(p DevicePtr) error {
	if p == 0 {
		return errors.New("adopt a null device pointer")
	}
	if _, ok := a.index[p]; ok {
		return nil
	}
	a.hold(Buffer{Ptr: p})
	return nil
}

// mark is where the buffers taken from now on start (releaseSince).
func (a *arena) mark() int { return len(a.taken) }

// releaseSince releases every buffer taken since mark that is still held,
// newest first, except those keep names: a model's layer gives back its
// activations this way, so that the next layer reuses their blocks.
func (a *arena) releaseSince(mark int, keep func(DevicePtr) bool) error {
	if mark < 0 || mark > len(a.taken) {
		return fmt.Errorf("release since mark %d of %d buffers taken", mark, len(a.taken))
	}
	var errs []error
	for i := len(a.taken) - 1; i >= mark; i-- {
		p := a.taken[i]
		if _, held := a.index[p]; !held || (keep != nil && keep(p)) {
			continue
		}
		_, err := a.release(p)
		errs = append(errs, err)
	}
	a.taken = a.taken[:mark]
	return errors.Join(errs...)
}

// release ends one held buffer's use in this forward: its block serves the
// next request of its class (an adopted buffer, whose class the arena does
// not know, waits for reset). It reports whether the arena held it.
func (a *arena) release(p DevicePtr) (bool, error) {
	i, ok := a.index[p]
	if !ok {
		return false, nil
	}
	delete(a.index, p)
	b := a.bufs[i]
	a.bytes -= b.Bytes
	if b.class > 0 {
		a.spare[b.class] = append(a.spare[b.class], i)
	}
	return true, nil
}

// reset gives every block back to the allocator, newest first.
func (a *arena) reset() error {
	var errs []error
	for i := len(a.bufs) - 1; i >= 0; i-- {
		if a.bufs[i].Ptr != 0 {
			errs = append(errs, a.mem.Free(a.bufs[i]))
		}
	}
	a.bufs = a.bufs[:0]
	a.taken = a.taken[:0]
	clear(a.index)
	clear(a.spare)
	a.bytes = 0
	return errors.Join(errs...)
}

// held is the number of buffers and the bytes asked for.
func (a *arena) held() (buffers, bytes int) { return len(a.index), a.bytes }

// stagingBackend is what the staging needs from the device: page-locked
// host memory and a fence per half on the ModelOps stream.
type stagingBackend interface {
	HostAlloc(bytes int) ([]byte, error)
	HostFree(b []byte) error
	// Record marks the work enqueued on the stream so far as half's fence.
	Record(half int) error
	// Wait blocks until the work before half's last Record has run.
	Wait(half int) error
}

// staging is page-locked host memory for the small uploads of a forward
// (token ids, positions, row lists). An asynchronous copy reads its source
// when the stream reaches it, so the source must stay unchanged until then;
// copies from pinned memory are also the only host→device copies a CUDA
// graph can capture. Each upload takes a fresh slice, so nothing is
// overwritten within a forward.
//
// Two halves alternate between forwards. flip (BeginForward) fences the
// half just used and makes the other current, first waiting for that
// one's fence, which was set a whole forward ago and has almost always
// passed: reusing staging never waits for the forward just enqueued.
//
// A half grows by chunks when a forward needs more (a long prefill); the
// next time it is current, its chunks are merged into one of their total
// size, so the steady state is one chunk per half.
type staging struct {
	be     stagingBackend
	halves [2]stagingHalf
	cur    int
}

type stagingHalf struct {
	chunks     [][]byte
	chunk, off int  // where the next slice starts
	pending    bool // copies from this half were enqueued since its last fence
	fenced     bool // recorded and not yet waited for
}

const (
	stagingMinChunk = 64 << 10
	stagingAlign    = 16
)

// take returns n bytes of pinned memory for one upload, aligned to 16 bytes.
func (s *staging) take(n int) ([]byte, error) {
	h := &s.halves[s.cur]
	need := (max(n, 1) + stagingAlign - 1) / stagingAlign * stagingAlign
	for h.chunk < len(h.chunks) {
		if c := h.chunks[h.chunk]; h.off+need <= len(c) {
			b := c[h.off : h.off+n : h.off+n]
			h.off += need
			h.pending = true
			return b, nil
		}
		h.chunk++
		h.off = 0
	}
	size := stagingMinChunk
	if k := len(h.chunks); k > 0 {
		size = max(size, 2*len(h.chunks[k-1]))
	}
	size = max(size, need)
	c, err := s.be.HostAlloc(size)
	if err != nil {
		return nil, fmt.Errorf("pinned staging of %d bytes: %w", size, err)
	}
	h.chunks = append(h.chunks, c)
	h.chunk, h.off = len(h.chunks)-1, need
	h.pending = true
	return c[:n:n], nil
}

// flip starts a new forward on the other half.
func (s *staging) flip() error {
	if h := &s.halves[s.cur]; h.pending {
		if err := s.be.Record(s.cur); err != nil {
			return err
		}
		h.pending, h.fenced = false, true
	}
	s.cur ^= 1
	h := &s.halves[s.cur]
	if h.fenced {
		if err := s.be.Wait(s.cur); err != nil {
			return err
		}
		h.fenced = false
	}
	h.chunk, h.off = 0, 0
	if len(h.chunks) > 1 {
		total := 0
		for _, c := range h.chunks {
			total += len(c)
		}
		if err := s.freeHalf(h); err != nil {
			return err
		}
		// On failure the half stays empty; take allocates again on demand.
		if c, err := s.be.HostAlloc(total); err == nil {
			h.chunks = append(h.chunks, c)
		}
	}
	return nil
}

// rewind starts the current half over without a fence: for the graph
// staging, whose reuse ModelOps.RunGraph orders by waiting for the last
// graph launch. Its chunks stay, so the same uploads get the same memory.
func (s *staging) rewind() {
	h := &s.halves[s.cur]
	h.chunk, h.off = 0, 0
}

func (s *staging) freeHalf(h *stagingHalf) error {
	var errs []error
	for _, c := range h.chunks {
		errs = append(errs, s.be.HostFree(c))
	}
	h.chunks = h.chunks[:0]
	h.chunk, h.off = 0, 0
	return errors.Join(errs...)
}

// close frees all pinned memory; the stream must be idle.
func (s *staging) close() error {
	return errors.Join(s.freeHalf(&s.halves[0]), s.freeHalf(&s.halves[1]))
}

// pinnedBytes is the staging memory held, for tests and stats.
func (s *staging) pinnedBytes() int {
	n := 0
	for _, h := range s.halves {
		for _, c := range h.chunks {
			n += len(c)
		}
	}
	return n
}

// stageValues copies vals into fresh staging memory.
func stageValues[T int32 | float32](s *staging, vals []T) ([]byte, error) {
	src, n := bytesOf(vals)
	b, err := s.take(n)
	if err != nil || n == 0 {
		return b, err
	}
	copy(b, unsafe.Slice((*byte)(src), n))
	return b, nil
}

// deviceStaging is the stagingBackend of a real device: HostAlloc memory
// and one event per half, recorded on the ModelOps stream.
type deviceStaging struct {
	dev    *Device
	stream Stream
	events [2]Event
}

func (d *deviceStaging) HostAlloc(bytes int) ([]byte, error) { return d.dev.HostAlloc(bytes) }
func (d *deviceStaging) HostFree(b []byte) error             { return d.dev.HostFree(b) }

func (d *deviceStaging) Record(half int) error {
	if d.events[half] == 0 {
		e, err := d.dev.NewEvent(false)
		if err != nil {
			return err
		}
		d.events[half] = e
	}
	return d.dev.Record(d.events[half], d.stream)
}

func (d *deviceStaging) Wait(half int) error {
	if d.events[half] == 0 {
		return nil
	}
	return d.dev.EventSync(d.events[half])
}

func (d *deviceStaging) close() error {
	var errs []error
	for i, e := range d.events {
		if e != 0 {
			errs = append(errs, d.dev.DestroyEvent(e))
			d.events[i] = 0
		}
	}
	return errors.Join(errs...)
}

// uploadCache remembers this forward's last few index uploads by content:
// every layer rotates q and k at the same positions, so a forward uploads
// them once instead of twice per layer. The device copies live in the
// arena, so the cache is cleared whenever the arena is reset.
type uploadCache struct {
	entries [4]cachedUpload
	next    int
}

type cachedUpload struct {
	vals  []int32
	ptr   DevicePtr
	valid bool
}

func (c *uploadCache) find(vals []int32) (DevicePtr, bool) {
	for i := range c.entries {
		if e := &c.entries[i]; e.valid && slices.Equal(e.vals, vals) {
			return e.ptr, true
		}
	}
	return 0, false
}

// add records an upload; the cache keeps its own copy of vals, since the
// caller may change its slice before the next call.
func (c *uploadCache) add(vals []int32, p DevicePtr) {
	e := &c.entries[c.next]
	e.vals = append(e.vals[:0], vals...)
	e.ptr, e.valid = p, true
	c.next = (c.next + 1) % len(c.entries)
}

// holds reports whether p is the device copy of a cached upload.
func (c *uploadCache) holds(p DevicePtr) bool {
	for i := range c.entries {
		if e := &c.entries[i]; e.valid && e.ptr == p {
			return true
		}
	}
	return false
}

func (c *uploadCache) clear() {
	for i := range c.entries {
		c.entries[i].valid = false
	}
	c.next = 0
}
