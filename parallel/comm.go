// Package parallel holds what tensor parallelism needs beside the engine:
// the Communicator contract with an in-process implementation for CPU
// ranks (NCCL's is device/nccl), Megatron-style sharding plans for every
// architecture gosling runs, a weight source that hands each rank only its
// slices, device ops that insert the collectives, and a driver that runs a
// model over N in-process ranks.
package parallel

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/tensor"
)

// Communicator is one rank's handle on a group of Size ranks. Every
// collective must be called by all ranks of the group in the same order
// with buffers of the same dtype and length; a mismatch or a rank that
// leaves (Close) makes the collective fail on every rank rather than hang.
type Communicator interface {
	Rank() int
	Size() int
	// AllReduceSum sets buf, on every rank, to the element-wise sum of all
	// ranks' buf.
	AllReduceSum(buf Buffer) error
	// AllGather sets dst [Size()*src.Len] to the ranks' src concatenated in
	// rank order.
	AllGather(dst, src Buffer) error
	// Broadcast sets buf, on every rank, to root's buf.
	Broadcast(buf Buffer, root int) error
	// Close leaves the group; collectives still waiting on this rank fail.
	Close() error
}

// Buffer is Len elements of DType (F32 or BF16): host memory (for the
// in-process communicator) or device memory at Dev (for NCCL).
type Buffer struct {
	DType tensor.DType
	Len   int
	Dev   uintptr
	f32   []float32
	bf16  []uint16
}

// HostF32 is a host float32 buffer.
func HostF32(x []float32) Buffer { return Buffer{DType: tensor.F32, Len: len(x), f32: x} }

// HostBF16 is a host bfloat16 buffer (raw bits).
func HostBF16(x []uint16) Buffer { return Buffer{DType: tensor.BF16, Len: len(x), bf16: x} }

// DeviceBuffer is n elements of dt at device address ptr.
func DeviceBuffer(ptr uintptr, dt tensor.DType, n int) Buffer {
	return Buffer{DType: dt, Len: n, Dev: ptr}
}

// Of is the buffer holding t's values: its host data, or its device memory.
func Of(t tensor.T) Buffer {
	if t.OnDevice() {
		return DeviceBuffer(t.DevPtr(), t.DType, t.NumElements())
	}
	return HostF32(t.HostData())
}

// OnHost reports whether the buffer is host memory.
func (b Buffer) OnHost() bool { return b.Dev == 0 }

func (b Buffer) check() error {
	if b.DType != tensor.F32 && b.DType != tensor.BF16 {
		return fmt.Errorf("collectives take F32 or BF16 buffers, not %v", b.DType)
	}
	return nil
}

// at reads element i as float32 (host buffers).
func (b Buffer) at(i int) float32 {
	if b.DType == tensor.BF16 {
		return tensor.BF16ToF32(b.bf16[i])
	}
	return b.f32[i]
}

// copyFrom copies src (same dtype) into b at element offset off.
func (b Buffer) copyFrom(off int, src Buffer) {
	if b.DType == tensor.BF16 {
		copy(b.bf16[off:off+src.Len], src.bf16)
		return
	}
	copy(b.f32[off:off+src.Len], src.f32)
}

// store writes float32 values into b, rounding to b's dtype.
func (b Buffer) store(vals []float32) {
	if b.DType == tensor.BF16 {
		for i, v := range vals {
			b.bf16[i] = tensor.F32ToBF16(v)
		}
		return
	}
	copy(b.f32, vals)
}

// Each runs fn(rank) for ranks 0..n-1, each on its own goroutine (every
// rank must be inside a collective together), and joins their errors.
func Each(n int, fn func(rank int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
