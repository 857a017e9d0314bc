package cpu

import (
	"unsafe"

	"github.com/gosling-ai/gosling/internal/hugemem"
	"github.com/gosling-ai/gosling/tensor"
)

// arena recycles the activations of one forward (device.Ops allows it:
// tensors made between BeginForward and EndForward may be reused by the
// next BeginForward). Fresh heap memory for every activation costs a
// decode step of a batch thousands of page faults (the allocator hands out
// tens of megabytes per step that the runtime returns to the kernel in
// between) and their zeroing; the arena is one huge-page-backed buffer,
// sized to the largest forward so far, whose tensors are not zeroed: every
// caller overwrites all of a tensor's values.
//
// It serves one forward at a time, as an Ops does; outside a forward (and
// for a forward larger than any before, past the buffer's end) tensors
// come from the heap as usual.
type arena struct {
	buf  []float32
	off  int  // floats handed out in this forward
	want int  // floats this forward asked for (grows the next buffer)
	on   bool // between begin and end
	// dims holds the shapes of this forward's tensors, recycled like
	// buf: a decode step makes a few hundred tensors, and a fresh shape
	// slice for each was one heap allocation each, in memory the
	// streamed weights had evicted from the caches. When it is full a
	// larger one replaces it; the old one stays with its tensors.
	dims []int
}

// arenaAlign keeps every tensor on a cache line.
const arenaAlign = 64 / 4

func (a *arena) begin() {
	if a.want > len(a.buf) {
		n := a.want + a.want/8
		a.buf = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(hugemem.Aligned(4*n)))), n)
	}
	a.off, a.want, a.on = 0, 0, true
	a.dims = a.dims[:0]
}

func (a *arena) end() { a.on = false }

// new returns an uninitialised tensor of the shape.
func (a *arena) new(shape ...int) tensor.T {
	n := 1
	for _, d := range shape {
		n *= d
	}
	padded := (n + arenaAlign - 1) / arenaAlign * arenaAlign
	if !a.on {
		return tensor.New(shape...)
	}
	a.want += padded
	if a.off+padded > len(a.buf) {
		return tensor.New(shape...)
	}
	data := a.buf[a.off : a.off+n : a.off+n]
	a.off += padded
	return tensor.FromShape(data, a.shape(shape))
}

// shape is a copy of shape in dims, valid until the next begin.
func (a *arena) shape(shape []int) []int {
	if len(a.dims)+len(shape) > cap(a.dims) {
		a.dims = make([]int, 0, max(256, 2*cap(a.dims), len(shape)))
	}
	n := len(a.dims)
	a.dims = append(a.dims, shape...)
	return a.dims[n:len(a.dims):len(a.dims)]
}
