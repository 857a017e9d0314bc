// Package nccl binds NCCL (libnccl.so.2), loaded at run time through
// purego like the CUDA libraries: unique ids, communicators by rank, the
// all-reduce, all-gather and broadcast collectives on a given CUDA stream
// (so they can be captured in CUDA graphs), and group calls. Comm is a
// parallel.Communicator over device buffers.
//
// NVLink multicast (NVLS) stays off unless the user asks for it: Open sets
// NCCL_NVLS_ENABLE=0 in the process environment when it is unset, because
// multicast objects can outlive a failed process and take shared GPUs out
// of service. It also sets NCCL_RUNTIME_CONNECT=0 when unset, and the
// engine warms each communicator (Comm.Warm) before any capture: a CUDA
// graph may capture collectives only once NCCL has connected the peers.
package nccl

import (
	"fmt"
	"os"
	"sync"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const UniqueIDBytes = 128

// UniqueID is ncclUniqueId: made by one rank (GetUniqueID) and handed to
// every other (over TCP across hosts) before they create the communicator.
type UniqueID struct{ Internal [UniqueIDBytes]byte }

// ncclDataType_t and ncclRedOp_t values (nccl.h).
const (
	typeFloat32  int32 = 7
	typeBfloat16 int32 = 9
	opSum        int32 = 0
)

// Collectives as the graph recorder signs them (cuda.Device.RecordCollective).
const (
	collAllReduce uint64 = iota + 1
	collAllGather
	collBroadcast
)

// result is ncclResult_t.
type result int32

const resultSuccess result = 0

// api is the bound library.
type api struct {
	getVersion        func(v *int32) result
	getUniqueID       func(id *UniqueID) result
	commInitRank      func(comm *uintptr, nranks int32, id UniqueID, rank int32) result
	commDestroy       func(comm uintptr) result
	commAbort         func(comm uintptr) result
	commGetAsyncError func(comm uintptr, err *result) result
	allReduce         func(send, recv uintptr, count uintptr, dt, op int32, comm, stream uintptr) result
	allGather         func(send, recv uintptr, count uintptr, dt int32, comm, stream uintptr) result
	broadcast         func(send, recv uintptr, count uintptr, dt, root int32, comm, stream uintptr) result
	groupStart        func() result
	groupEnd          func() result
	getErrorString    func(r result) string
	getLastError      func(comm uintptr) string
}

// Lib is the opened library.
type Lib struct {
	Path    string
	Version int // NCCL_VERSION_CODE: major*10000 + minor*100 + patch
	a       api
}

var (
	libOnce sync.Once
	lib     *Lib
	libErr  error
)

// defaults are the NCCL settings gosling makes unless the environment
// already has them, before NCCL reads its environment:
//
//   - NCCL_NVLS_ENABLE=0: no NVLink multicast (see the package comment);
//   - NCCL_RUNTIME_CONNECT=0: every peer connection is made in
//     ncclCommInitRank instead of in a communicator's first collectives
//     (NCCL 2.22 and later connect lazily), because decode steps capture
//     their collectives in CUDA graphs and a stream capture cannot make
//     connections ("operation not permitted when stream is capturing").
var defaults = []struct{ name, value string }{
	{"NCCL_NVLS_ENABLE", "0"},
	{"NCCL_RUNTIME_CONNECT", "0"},
}

// setDefaults sets each of defaults the environment does not have, and
// reports which it set.
func setDefaults(lookup func(string) (string, bool), set func(k, v string) error) ([]string, error) {
	var done []string
	for _, d := range defaults {
		if _, ok := lookup(d.name); ok {
			continue
		}
		if err := set(d.name, d.value); err != nil {
			return done, err
		}
		done = append(done, d.name)
	}
	return done, nil
}

// Open loads libnccl.so.2 once per process and binds its functions. The
// error names the folders searched when the library is absent.
func Open() (*Lib, error) {
	libOnce.Do(func() {
		// Before NCCL reads its environment (at its first call).
		if _, err := setDefaults(os.LookupEnv, os.Setenv); err != nil {
			libErr = err
			return
		}
		h, path, err := cuda.OpenLibrary(cuda.LibNCCL)
		if err != nil {
			libErr = err
			return
		}
		l := &Lib{Path: path}
		for _, s := range []struct {
			fptr any
			name string
		}{
			{&l.a.getVersion, "ncclGetVersion"},
			{&l.a.getUniqueID, "ncclGetUniqueId"},
			{&l.a.commInitRank, "ncclCommInitRank"},
			{&l.a.commDestroy, "ncclCommDestroy"},
			{&l.a.commAbort, "ncclCommAbort"},
			{&l.a.commGetAsyncError, "ncclCommGetAsyncError"},
			{&l.a.allReduce, "ncclAllReduce"},
			{&l.a.allGather, "ncclAllGather"},
			{&l.a.broadcast, "ncclBroadcast"},
			{&l.a.groupStart, "ncclGroupStart"},
			{&l.a.groupEnd, "ncclGroupEnd"},
			{&l.a.getErrorString, "ncclGetErrorString"},
			{&l.a.getLastError, "ncclGetLastError"},
		} {
			if err := cuda.Bind(h, s.fptr, s.name); err != nil {
				libErr = fmt.Errorf("%s at %s lacks %s (gosling needs NCCL 2.13 or later): %w", cuda.LibNCCL, path, s.name, err)
				return
			}
		}
		var v int32
		if err := l.check("ncclGetVersion", l.a.getVersion(&v), 0); err != nil {
			libErr = err
			return
		}
		l.Version = int(v)
		lib = l
	})
	return lib, libErr
}

// check turns a result into an error naming the call, NCCL's description
// and, with a communicator, its last error message.
func (l *Lib) check(call string, r result, comm uintptr) error {
	if r == resultSuccess {
		return nil
	}
	msg := fmt.Sprintf("%s: %s (ncclResult %d)", call, l.a.getErrorString(r), int32(r))
	if last := l.a.getLastError(comm); last != "" {
		msg += ": " + last
	}
	return fmt.Errorf("nccl: %s", msg)
}

// VersionString is the version as major.minor.patch.
func (l *Lib) VersionString() string {
	return fmt.Sprintf("%d.%d.%d", l.Version/10000, l.Version/100%100, l.Version%100)
}

// GetUniqueID makes the id every rank of a new communicator must share.
func (l *Lib) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	return id, l.check("ncclGetUniqueId", l.a.getUniqueID(&id), 0)
}

// GroupStart and GroupEnd bracket collectives issued together by the
// calling OS thread (NCCL keeps group state per thread): Comm.Group is
// the form that runs on a rank's device thread.
func (l *Lib) GroupStart() error { return l.check("ncclGroupStart", l.a.groupStart(), 0) }
func (l *Lib) GroupEnd() error   { return l.check("ncclGroupEnd", l.a.groupEnd(), 0) }

// Comm is one rank's NCCL communicator on one GPU. Its collectives are
// enqueued on Stream (the device's work stream unless changed) from the
// device's thread, and are asynchronous like any kernel launch.
type Comm struct {
	Stream cuda.Stream

	lib        *Lib
	dev        *cuda.Device
	h          uintptr
	rank, size int
	once       sync.Once // the communicator is destroyed or aborted once
}

// NewComm joins rank of a communicator of size ranks identified by id, on
// dev. It blocks until every rank has joined, so the ranks of one process
// must call it from different goroutines (or inside GroupStart/GroupEnd).
func (l *Lib) NewComm(dev *cuda.Device, id UniqueID, size, rank int) (*Comm, error) {
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("nccl: rank %d outside a communicator of %d", rank, size)
	}
	c := &Comm{Stream: dev.Stream, lib: l, dev: dev, rank: rank, size: size}
	err := dev.Do(func() error {
		return l.check("ncclCommInitRank", l.a.commInitRank(&c.h, int32(size), id, int32(rank)), 0)
	})
	if err != nil {
		return nil, fmt.Errorf("rank %d of %d on GPU %d: %w", rank, size, dev.Info.Ordinal, err)
	}
	return c, nil
}

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// dtype maps a buffer to NCCL's type, refusing host memory.
func dtype(b parallel.Buffer) (int32, error) {
	if b.OnHost() {
		return 0, fmt.Errorf("nccl: collectives take device buffers, not host memory")
	}
	switch b.DType {
	case tensor.F32:
		return typeFloat32, nil
	case tensor.BF16:
		return typeBfloat16, nil
	}
	return 0, fmt.Errorf("nccl: collectives take F32 or BF16 buffers, not %v", b.DType)
}

// AllReduceSum sums buf over the ranks in place.
func (c *Comm) AllReduceSum(buf parallel.Buffer) error {
	dt, err := dtype(buf)
	if err != nil {
		return err
	}
	return c.dev.Do(func() error {
		if c.dev.RecordCollective(collAllReduce, uint64(buf.Dev), uint64(buf.Len), uint64(dt)) {
			return nil
		}
		return c.lib.check("ncclAllReduce", c.lib.a.allReduce(buf.Dev, buf.Dev, uintptr(buf.Len), dt, opSum, c.h, uintptr(c.Stream)), c.h)
	})
}

// AllGather concatenates every rank's src into dst in rank order.
func (c *Comm) AllGather(dst, src parallel.Buffer) error {
	dt, err := dtype(src)
	if err != nil {
		return err
	}
	if dst.Len != c.size*src.Len || dst.DType != src.DType || dst.OnHost() {
		return fmt.Errorf("nccl: all-gather of %d %v needs a device destination of %d", src.Len, src.DType, c.size*src.Len)
	}
	return c.dev.Do(func() error {
		if c.dev.RecordCollective(collAllGather, uint64(src.Dev), uint64(dst.Dev), uint64(src.Len), uint64(dt)) {
			return nil
		}
		return c.lib.check("ncclAllGather", c.lib.a.allGather(src.Dev, dst.Dev, uintptr(src.Len), dt, c.h, uintptr(c.Stream)), c.h)
	})
}

// Broadcast copies root's buf to every rank's, in place.
func (c *Comm) Broadcast(buf parallel.Buffer, root int) error {
	dt, err := dtype(buf)
	if err != nil {
		return err
	}
	return c.dev.Do(func() error {
		if c.dev.RecordCollective(collBroadcast, uint64(buf.Dev), uint64(buf.Len), uint64(dt), uint64(root)) {
			return nil
		}
		return c.lib.check("ncclBroadcast", c.lib.a.broadcast(buf.Dev, buf.Dev, uintptr(buf.Len), dt, int32(root), c.h, uintptr(c.Stream)), c.h)
	})
}

// Group runs fn's collectives on this rank as one NCCL group (one launch
// for several all-reduces, say), on the device's thread.
func (c *Comm) Group(fn func() error) error {
	return c.dev.Do(func() error {
		if err := c.lib.GroupStart(); err != nil {
			return err
		}
		ferr := fn()
		if err := c.lib.GroupEnd(); ferr == nil {
			ferr = err
		}
		return ferr
	})
}

// warmCounts are the float32 element counts Warm runs each collective
// at: sizes on either side of NCCL's protocol changes (LL, LL128, Simple).
var warmCounts = []int{256, 64 << 10, 1 << 20}

// Warm runs one all-reduce, in-place all-gather and broadcast of each of
// warmCounts on this communicator and waits for them, so that what NCCL
// still makes at a communicator's first collectives (connections when
// NCCL_RUNTIME_CONNECT=1, per-protocol buffers) exists before a CUDA graph
// captures collectives: a capture cannot make it. Every rank of the
// communicator must call it at once, as with any collective.
func (c *Comm) Warm() error {
	most := c.size * warmCounts[len(warmCounts)-1] * 4
	return c.dev.Do(func() error {
		p, err := c.dev.Malloc(most)
		if err != nil {
			return fmt.Errorf("nccl: warming rank %d: %w", c.rank, err)
		}
		defer c.dev.Free(p)
		if err := c.dev.MemsetAsync(p, 0, most, c.Stream); err != nil {
			return err
		}
		for _, n := range warmCounts {
			all := parallel.DeviceBuffer(uintptr(p), tensor.F32, c.size*n)
			mine := parallel.DeviceBuffer(uintptr(p)+uintptr(c.rank*n*4), tensor.F32, n) // in place: dst + rank·n
			for _, coll := range []func() error{
				func() error { return c.AllReduceSum(mine) },
				func() error { return c.AllGather(all, mine) },
				func() error { return c.Broadcast(mine, 0) },
			} {
				if err := coll(); err != nil {
					return fmt.Errorf("nccl: warming rank %d with %d floats: %w", c.rank, n, err)
				}
			}
		}
		return c.dev.StreamSync(c.Stream)
	})
}

// AsyncError is the communicator's asynchronous error (a peer that died,
// a network failure), nil while healthy: what a rank polls instead of
// hanging in a collective that will never complete.
func (c *Comm) AsyncError() error {
	var r result
	if err := c.lib.check("ncclCommGetAsyncError", c.lib.a.commGetAsyncError(c.h, &r), c.h); err != nil {
		return err
	}
	return c.lib.check("communicator", r, c.h)
}

// Abort tears the communicator down without waiting for its collectives
// (after a peer failed). It is called from the goroutine that saw the
// failure, not through the device thread: that thread may be the one
// blocked in a synchronisation behind a collective that will never
// complete, which is what the abort releases (NCCL makes the
// communicator's device current itself). Close after Abort does nothing.
func (c *Comm) Abort() error {
	var err error
	c.once.Do(func() { err = c.lib.check("ncclCommAbort", c.lib.a.commAbort(c.h), 0) })
	return err
}

// Close destroys the communicator after its work completes.
func (c *Comm) Close() error {
	var err error
	c.once.Do(func() {
		err = c.dev.Do(func() error { return c.lib.check("ncclCommDestroy", c.lib.a.commDestroy(c.h), 0) })
	})
	return err
}

var _ parallel.Communicator = (*Comm)(nil)
