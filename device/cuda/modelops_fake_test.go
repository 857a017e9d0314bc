package cuda

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"unsafe"
)

// fakeGPU is a host emulation of the driver and cuBLASLt calls ModelOps
// makes, so the ModelOps suites also run on machines without a GPU.
//
// It keeps the properties that matter for correctness: device memory is a
// separate address space whose every access is bounds-checked (a write past
// a buffer or a use after free is an error, not silent corruption); work on
// a stream is queued and runs only when something waits for it (stream or
// event synchronisation, or the implicit sync of cuMemFree), so a missing
// synchronisation reads stale data and an upload whose pinned source is
// reused too early copies the wrong values; kernels are restated in Go
// from kernels/*.cu, in float32 like the device. Stream capture keeps the
// work enqueued on the capturing stream as a graph, which a launch
// enqueues again with the arguments it was captured with; as on a GPU,
// allocating, freeing or synchronising while a capture is under way
// fails and invalidates the capture.
type fakeGPU struct {
	mu      sync.Mutex
	next    uintptr // handles and device addresses
	blocks  map[uintptr][]byte
	pinned  map[uintptr][]byte
	streams map[Stream]*fakeStream
	events  map[Event]fakeEventMark
	fns     map[uintptr]string
	descs   map[uintptr]*fakeDesc
	layouts map[uintptr]fakeLayout
	err     error // first failure of queued work

	capturing map[Stream]*fakeCapture
	graphs    map[uintptr][]func() error // captured graphs and their instantiations

	launchesOn map[Stream]int
	launches   map[string]int // by kernel name

	noRowScales bool // cuBLASLt has no outer-vector scaled algorithm (as on sm_90)
}

type fakeStream struct {
	queue []func() error
	done  int
}

type fakeCapture struct {
	ops         []func() error
	invalidated bool
}

// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and _INVALIDATED.
const (
	resultCaptureUnsupported Result = 900
	resultCaptureInvalidated Result = 901
)

// refuseInCapture fails a call that cannot be made while a capture is
// under way, invalidating the captures.
func (f *fakeGPU) refuseInCapture() bool {
	for _, c := range f.capturing {
		c.invalidated = true
	}
	return len(f.capturing) > 0
}

type fakeEventMark struct {
	s  Stream
	at int
}

type fakeDesc struct {
	transA, transB int32
	aMode, bMode   int32     // A/B_SCALE_MODE: 0, or ltScaleOuterVec32F
	aScale, bScale DevicePtr // A/B_SCALE_POINTER
}

type fakeLayout struct {
	dtype      int32
	rows, cols int
	ld         int
}

// resultIllegalAddress is CUDA_ERROR_ILLEGAL_ADDRESS.
const resultIllegalAddress Result = 700

func newFakeGPU() *fakeGPU {
	return &fakeGPU{
		next: 0x7000_0000_0000, blocks: map[uintptr][]byte{}, pinned: map[uintptr][]byte{},
		streams: map[Stream]*fakeStream{}, events: map[Event]fakeEventMark{}, fns: map[uintptr]string{},
		descs: map[uintptr]*fakeDesc{}, layouts: map[uintptr]fakeLayout{}, launchesOn: map[Stream]int{}, launches: map[string]int{},
		capturing: map[Stream]*fakeCapture{}, graphs: map[uintptr][]func() error{},
	}
}

func (f *fakeGPU) handle() uintptr {
	f.next += 0x1000
	return f.next
}

// resolve is the n bytes of device memory at p.
func (f *fakeGPU) resolve(p DevicePtr, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	for base, b := range f.blocks {
		if uintptr(p) >= base && uintptr(p) < base+uintptr(len(b)) {
			off := int(uintptr(p) - base)
			if off+n > len(b) {
				return nil, fmt.Errorf("fake: %d bytes at %#x overrun a %d-byte buffer by %d", n, uintptr(p), len(b), off+n-len(b))
			}
			return b[off : off+n], nil
		}
	}
	return nil, fmt.Errorf("fake: %#x (%d bytes) is not allocated device memory", uintptr(p), n)
}

func (f *fakeGPU) stream(s Stream) *fakeStream {
	st := f.streams[s]
	if st == nil {
		st = &fakeStream{}
		f.streams[s] = st
	}
	return st
}

func (f *fakeGPU) enqueue(s Stream, op func() error) Result {
	if c := f.capturing[s]; c != nil {
		c.ops = append(c.ops, op)
		return resultSuccess
	}
	st := f.stream(s)
	st.queue = append(st.queue, op)
	return resultSuccess
}

// run executes s's queued work up to position upto.
func (f *fakeGPU) run(s Stream, upto int) Result {
	st := f.stream(s)
	for st.done < upto {
		op := st.queue[st.done]
		st.done++
		if err := op(); err != nil && f.err == nil {
			// The driver's error code says little; the cause goes to the log.
			fmt.Fprintln(os.Stderr, "fake GPU:", err)
			f.err = err
		}
	}
	if f.err != nil {
		return resultIllegalAddress
	}
	return resultSuccess
}

func (f *fakeGPU) runAll() Result {
	r := resultSuccess
	for s, st := range f.streams {
		if rr := f.run(s, len(st.queue)); rr != resultSuccess {
			r = rr
		}
	}
	return r
}

func (f *fakeGPU) isPinned(p unsafe.Pointer, n int) bool {
	for base, b := range f.pinned {
		if uintptr(p) >= base && uintptr(p)+uintptr(n) <= base+uintptr(len(b)) {
			return true
		}
	}
	return false
}

// driver is the fake as the driver-API table.
func (f *fakeGPU) driver() *driverAPI {
	ok := func() Result { return resultSuccess }
	locked := func(fn func() Result) Result {
		f.mu.Lock()
		defer f.mu.Unlock()
		return fn()
	}
	return &driverAPI{
		cuDeviceGet:               func(dev *int32, ordinal int32) Result { *dev = ordinal; return ok() },
		cuDevicePrimaryCtxRetain:  func(ctx *uintptr, dev int32) Result { *ctx = 1; return ok() },
		cuDevicePrimaryCtxRelease: func(dev int32) Result { return ok() },
		cuCtxSetCurrent:           func(ctx uintptr) Result { return ok() },
		cuDeviceGetName: func(name *byte, n int32, dev int32) Result {
			copy(unsafe.Slice(name, n), "fake GPU\x00")
			return ok()
		},
		cuDeviceGetAttribute: func(v *int32, attr int32, dev int32) Result {
			*v = map[int32]int32{attrComputeCapabilityMajor: 9, attrMultiprocessorCount: 4, attrL2CacheSize: 1 << 20, attrMaxSharedPerBlockOptin: 227 << 10}[attr]
			return ok()
		},
		cuDeviceTotalMem: func(b *uint64, dev int32) Result { *b = 1 << 34; return ok() },
		// Kernels past 48 KiB of shared memory (the tensor-core attention)
		// ask for it per function; the emulation has no limit to raise.
		cuFuncSetAttribute: func(uintptr, int32, int32) Result { return ok() },
		cuDriverGetVersion: func(v *int32) Result { *v = 13000; return ok() },
		cuCtxSynchronize: func() Result {
			return locked(func() Result {
				if f.refuseInCapture() {
					return resultCaptureUnsupported
				}
				return f.runAll()
			})
		},
		cuMemAlloc: func(p *DevicePtr, n uint64) Result {
			return locked(func() Result {
				if f.refuseInCapture() {
					return resultCaptureUnsupported
				}
				base := f.handle()
				f.next += uintptr(n+0xfff) &^ 0xfff // never reused: a stale pointer stays invalid
				f.blocks[base] = make([]byte, n)
				*p = DevicePtr(base)
				return resultSuccess
			})
		},
		cuMemFree: func(p DevicePtr) Result {
			return locked(func() Result {
				if f.refuseInCapture() {
					return resultCaptureUnsupported
				}
				r := f.runAll() // cuMemFree synchronises the device
				if _, ok := f.blocks[uintptr(p)]; !ok {
					return resultIllegalAddress
				}
				delete(f.blocks, uintptr(p))
				return r
			})
		},
		cuMemAllocHost: func(p *unsafe.Pointer, n uint64) Result {
			return locked(func() Result {
				if f.refuseInCapture() {
					return resultCaptureUnsupported
				}
				b := make([]byte, n)
				f.pinned[uintptr(unsafe.Pointer(&b[0]))] = b
				*p = unsafe.Pointer(&b[0])
				return resultSuccess
			})
		},
		cuMemFreeHost: func(p unsafe.Pointer) Result {
			return locked(func() Result {
				if f.refuseInCapture() {
					return resultCaptureUnsupported
				}
				r := f.runAll()
				if _, ok := f.pinned[uintptr(p)]; !ok {
					return resultIllegalAddress
				}
				delete(f.pinned, uintptr(p))
				return r
			})
		},
		cuMemcpyHtoDAsync: func(dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) Result {
			return locked(func() Result {
				// Pageable memory is staged by the driver before the call
				// returns; pinned memory is read when the copy runs.
				from := unsafe.Slice((*byte)(src), n)
				if !f.isPinned(src, int(n)) {
					from = append([]byte(nil), from...)
				}
				return f.enqueue(s, func() error {
					to, err := f.resolve(dst, int(n))
					copy(to, from)
					return err
				})
			})
		},
		cuMemcpyDtoHAsync: func(dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) Result {
			return locked(func() Result {
				return f.enqueue(s, func() error {
					from, err := f.resolve(src, int(n))
					copy(unsafe.Slice((*byte)(dst), n), from)
					return err
				})
			})
		},
		cuMemcpyDtoDAsync: func(dst, src DevicePtr, n uint64, s Stream) Result {
			return locked(func() Result {
				return f.enqueue(s, func() error {
					from, err := f.resolve(src, int(n))
					to, err2 := f.resolve(dst, int(n))
					copy(to, from)
					return errors.Join(err, err2)
				})
			})
		},
		cuMemsetD8Async: func(dst DevicePtr, v uint8, n uint64, s Stream) Result {
			return locked(func() Result {
				return f.enqueue(s, func() error {
					to, err := f.resolve(dst, int(n))
					for i := range to {
						to[i] = v
					}
					return err
				})
			})
		},
		cuStreamCreate: func(s *Stream, flags uint32) Result {
			return locked(func() Result { *s = Stream(f.handle()); f.stream(*s); return resultSuccess })
		},
		cuStreamDestroy: func(s Stream) Result {
			return locked(func() Result {
				r := f.run(s, len(f.stream(s).queue))
				delete(f.streams, s)
				return r
			})
		},
		cuStreamSynchronize: func(s Stream) Result {
			return locked(func() Result {
				if f.capturing[s] != nil {
					f.capturing[s].invalidated = true
					return resultCaptureUnsupported
				}
				return f.run(s, len(f.stream(s).queue))
			})
		},
		cuStreamBeginCapture: func(s Stream, mode int32) Result {
			return locked(func() Result {
				if f.capturing[s] != nil {
					return Result(1)
				}
				f.capturing[s] = &fakeCapture{}
				return resultSuccess
			})
		},
		cuStreamEndCapture: func(s Stream, g *uintptr) Result {
			return locked(func() Result {
				c := f.capturing[s]
				delete(f.capturing, s)
				switch {
				case c == nil:
					return Result(1)
				case c.invalidated:
					*g = 0
					return resultCaptureInvalidated
				}
				*g = f.handle()
				f.graphs[*g] = c.ops
				return resultSuccess
			})
		},
		cuGraphGetNodes: func(g uintptr, nodes *uintptr, n *uint64) Result {
			return locked(func() Result {
				ops, ok := f.graphs[g]
				if !ok || nodes != nil {
					return Result(1)
				}
				*n = uint64(len(ops))
				return resultSuccess
			})
		},
		cuGraphInstantiateWithFlags: func(exec *uintptr, g uintptr, flags uint64) Result {
			return locked(func() Result {
				ops, ok := f.graphs[g]
				if !ok {
					return Result(1)
				}
				*exec = f.handle()
				f.graphs[*exec] = ops
				return resultSuccess
			})
		},
		cuGraphLaunch: func(exec uintptr, s Stream) Result {
			return locked(func() Result {
				ops, ok := f.graphs[exec]
				if !ok {
					return Result(1)
				}
				for _, op := range ops {
					f.enqueue(s, op)
				}
				return resultSuccess
			})
		},
		cuGraphExecDestroy: func(exec uintptr) Result {
			return locked(func() Result { delete(f.graphs, exec); return resultSuccess })
		},
		cuGraphDestroy: func(g uintptr) Result {
			return locked(func() Result { delete(f.graphs, g); return resultSuccess })
		},
		cuEventCreate: func(e *Event, flags uint32) Result {
			return locked(func() Result { *e = Event(f.handle()); return resultSuccess })
		},
		cuEventRecord: func(e Event, s Stream) Result {
			return locked(func() Result {
				f.events[e] = fakeEventMark{s, len(f.stream(s).queue)}
				return resultSuccess
			})
		},
		cuEventSynchronize: func(e Event) Result {
			return locked(func() Result {
				m, ok := f.events[e]
				if !ok {
					return resultSuccess // never recorded: complete
				}
				return f.run(m.s, m.at)
			})
		},
		cuEventDestroy: func(e Event) Result {
			return locked(func() Result { delete(f.events, e); return resultSuccess })
		},
		launchKernel: func(fn uintptr, grid, block [3]uint32, smem uint32, s Stream, params unsafe.Pointer) Result {
			return locked(func() Result {
				name := f.fns[fn]
				k, ok := fakeKernels[name]
				if !ok {
					return resultIllegalAddress
				}
				if int(smem)+fakeStaticSmem[name] > 48<<10 { // the default per-block limit, as the driver refuses it
					return Result(1) // CUDA_ERROR_INVALID_VALUE
				}
				// The argument block belongs to the caller: copy it now.
				args := make([]uint64, k.nargs)
				ps := unsafe.Slice((*unsafe.Pointer)(params), k.nargs)
				for i := range args {
					args[i] = *(*uint64)(ps[i])
				}
				f.launchesOn[s]++
				f.launches[name]++
				g := [3]int{int(grid[0]), int(grid[1]), int(grid[2])}
				return f.enqueue(s, func() error {
					if err := k.run(f, name, g, fakeArgs(args)); err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					return nil
				})
			})
		},
	}
}

// openFakeDevice starts a Device, kernels and cuBLASLt handle over a fakeGPU.
func openFakeDevice(t testing.TB) (*Device, *Kernels, *BlasLt, *fakeGPU) {
	t.Helper()
	f := newFakeGPU()
	dev := &Device{d: f.driver(), work: make(chan func())}
	started := make(chan error, 1)
	go dev.loop(0, started)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	dev.Mem = NewAllocator(deviceMemory{dev})
	k := &Kernels{dev: dev, fns: map[string]Function{}}
	names := make([]string, 0, len(fakeKernels))
	for name := range fakeKernels {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		h := f.handle()
		f.fns[h] = name
		k.fns[name] = Function{h: h, Name: name}
	}
	lt := &BlasLt{dev: dev, api: f.lt(), h: 1, plans: map[Gemm]*ltPlan{}}
	return dev, k, lt, f
}

// The fake itself: queued work runs only when waited for, and bad
// accesses are errors.
func TestFakeGPU(t *testing.T) {
	dev, _, _, f := openFakeDevice(t)
	defer dev.Close()
	p, err := dev.Malloc(64)
	if err != nil {
		t.Fatal(err)
	}
	src := []float32{1, 2, 3}
	pinned, err := dev.HostAlloc(12)
	if err != nil {
		t.Fatal(err)
	}
	copy(unsafe.Slice((*float32)(unsafe.Pointer(&pinned[0])), 3), src)
	if err := CopyHtoDAsync(dev, p, pinned, dev.Stream); err != nil {
		t.Fatal(err)
	}
	pinned[0] = 0xff // before the stream runs: the copy sees it
	got := make([]byte, 12)
	if err := CopyDtoH(dev, got, p); err != nil {
		t.Fatal(err)
	}
	if got[0] != 0xff {
		t.Error("a pinned upload read its source at enqueue time")
	}
	if _, err := f.resolve(p.Add(60), 8); err == nil {
		t.Error("an overrun was not caught")
	}
	if err := dev.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := CopyHtoD(dev, p, src); err == nil {
		t.Error("a use after free was not caught")
	}
	dev.HostFree(pinned)
}
