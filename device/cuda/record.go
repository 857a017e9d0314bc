package cuda

import (
	"errors"
	"math/bits"
)

// Recording: how a forward becomes a reusable CUDA graph.
//
// A captured graph replays the exact kernels, arguments and copies it saw.
// It is valid for a later forward only if that forward would enqueue the
// same operations with the same arguments (same device addresses, sizes
// and scalars); the inputs that change from step to step must travel
// through memory the graph reads (pinned staging its copies read, device
// buffers filled before the launch).
//
// The recorder proves that property instead of assuming it. Every stream
// operation of the device (kernel launch, cuBLAS/cuBLASLt call, async copy
// or memset) reports itself to the recorder, which folds the operation and
// its arguments into a 64-bit signature. In a dry run the operations are
// not enqueued at all: the host code of a forward runs (choosing kernels,
// allocating activations, writing its inputs into pinned staging) and
// leaves only the signature. If a graph captured earlier has the same
// signature, launching it does exactly what the dry run would have
// enqueued; otherwise the forward is captured again (GraphCache).
//
// The recorder is touched only on the device thread.
type recorder struct {
	mode recordMode
	sig  uint64 // running signature
	ops  int    // operations recorded
	err  error  // first operation that cannot be part of a graph
}

type recordMode int

const (
	recordOff     recordMode = iota // operations run
	recordDry                       // operations are signed, not enqueued
	recordCapture                   // operations are signed and enqueued on a capturing stream
)

// Operation kinds folded into the signature.
const (
	opLaunch uint64 = iota + 1
	opMatmul
	opGemmBatched
	opCopyHtoD
	opCopyDtoD
	opMemset
	opCollective
)

func (r *recorder) begin(m recordMode) {
	*r = recorder{mode: m, sig: 0x9e3779b97f4a7c15}
}

func (r *recorder) end() (sig uint64, ops int, err error) {
	sig, ops, err = r.sig, r.ops, r.err
	*r = recorder{}
	return
}

// mix folds one word into the signature (a multiply-rotate hash: order
// and value of every word matter).
func (r *recorder) mix(w uint64) {
	r.sig ^= w * 0xbf58476d1ce4e5b9
	r.sig = bits.RotateLeft64(r.sig, 29) * 0x94d049bb133111eb
}

// record folds an operation into the signature and reports whether it
// must be skipped (a dry run). With recording off it does nothing.
func (r *recorder) record(kind uint64, words ...uint64) (skip bool) {
	if r.mode == recordOff {
		return false
	}
	r.ops++
	r.mix(kind<<56 | uint64(len(words)))
	for _, w := range words {
		r.mix(w)
	}
	return r.mode == recordDry
}

// refuse marks the recording as unusable for a graph (an operation that
// reads back to the host or synchronises), keeping the first reason.
func (r *recorder) refuse(why string) {
	if r.mode != recordOff && r.err == nil {
		r.err = errors.New(why)
	}
}

// RecordCollective reports a collective that another library (NCCL)
// enqueues on the device's stream, with the words that identify it
// (operation, buffers, count, dtype): it is signed like a kernel, and
// must be skipped when it returns true (a dry run). Call it on the device
// thread.
func (dev *Device) RecordCollective(words ...uint64) (skip bool) {
	return dev.rec.record(opCollective, words...)
}

// Recording reports whether the device thread is in a dry run or a
// capture: code that must behave identically in both (ModelOps staging)
// checks it. Call it on the device thread.
func (dev *Device) Recording() bool { return dev.rec.mode != recordOff }
