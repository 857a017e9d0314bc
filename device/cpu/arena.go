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
}

// arenaAlign keeps every tensor on a cache line.
const arenaAlign = 64 / 4

func (a *arena) begin() {
	if a.want > len(a.buf) {
		n := a.want + a.want/8
		a.buf = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(hugemem.Aligned(4*n)))), n)
	}
	a.off, a.want, a.on = 0, 0, true
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
	// From copies the shape: a tensor's shape outlives the forward where
	// its data does not (a speculative drafter's host copies keep it), so
	// it is not recycled with the data.
	return tensor.From(data, shape...)
}
