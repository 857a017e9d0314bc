// Package fakedevice is a device.Sampler over host memory, for the tests
// of code that places logits on a device and reads them back (the
// runner's drawing, the drafters): which rows were drawn there, gathered
// and copied is what those tests check, and no GPU is needed to see it.
package fakedevice

import (
	"slices"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// Sampler keeps "device" tensors as handles into host tensors. Its draw
// of logits row r is token 1000+r, so a test sees which row each draw
// came from.
type Sampler struct {
	Data    map[uintptr]tensor.T
	next    uintptr
	Sampled [][]device.SampleRow // each Sample call's rows
	Gathers [][]int32            // each GatherRows call's rows
	Copies  int                  // ToHost calls
}

// New is an empty Sampler.
func New() *Sampler { return &Sampler{Data: map[uintptr]tensor.T{}} }

// Put keeps h and returns its device handle.
func (f *Sampler) Put(h tensor.T) tensor.T {
	f.next += 0x100
	f.Data[f.next] = h
	return tensor.Device{Shape: slices.Clone(h.Shape), Ptr: f.next, DType: tensor.F32}.T()
}

// Sample draws 1000 + the logits row of each of rows.
func (f *Sampler) Sample(logits tensor.T, rows []device.SampleRow) ([]int32, error) {
	f.Sampled = append(f.Sampled, rows)
	ids := make([]int32, len(rows))
	for i, r := range rows {
		ids[i] = int32(1000 + r.Row)
	}
	return ids, nil
}

// GatherRows is rows of x, in order, as a new device tensor.
func (f *Sampler) GatherRows(x tensor.T, rows []int32) tensor.T {
	f.Gathers = append(f.Gathers, rows)
	h := f.Data[x.DevPtr()]
	out := tensor.New(len(rows), h.Cols())
	for i, r := range rows {
		copy(out.Row(i), h.Row(int(r)))
	}
	return f.Put(out)
}

// ToHost is the host tensor behind x.
func (f *Sampler) ToHost(x tensor.T) tensor.T {
	f.Copies++
	return f.Data[x.DevPtr()]
}

var _ device.Sampler = (*Sampler)(nil)
