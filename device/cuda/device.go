package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Info describes a device.
type Info struct {
	Ordinal        int
	Name           string
	Major, Minor   int // compute capability
	SMs            int
	TotalMem       uint64 // bytes
	L2Bytes        int
	MaxSharedOptin int // bytes of shared memory a block may opt in to
	DriverVersion  int // 1000·major + 10·minor
}

// Arch is the compute capability as NVRTC names it: 90 for sm_90.
func (i Info) Arch() int { return i.Major*10 + i.Minor }

func (i Info) String() string {
	return fmt.Sprintf("%s (sm_%d, %d SMs, %.1f GiB, driver CUDA %d.%d)",
		i.Name, i.Arch(), i.SMs, float64(i.TotalMem)/(1<<30), i.DriverVersion/1000, i.DriverVersion%1000/10)
}

// Device is one GPU with its primary context made current on a dedicated,
// locked OS thread. All its methods are safe from any goroutine: they run on
// that thread, directly when already there (inside Do), else by handing the
// work over and waiting.
type Device struct {
	Info Info
	// Stream is the device's work stream (non-blocking, so it never
	// serialises with the legacy default stream and can be captured).
	Stream Stream
	// Mem is the caching allocator over this device's memory.
	Mem *Allocator

	d      *driverAPI
	dev    int32
	ctx    uintptr
	work   chan func()
	tid    int     // the device thread's id
	g      uintptr // the device goroutine (currentG), when haveCurrentG
	closed sync.Once
	rec    recorder                      // graph recording state (record.go), device thread only
	prof   *profiler                     // kernel profile (profile.go), device thread only; nil: off
	params [maxKernelArgs]unsafe.Pointer // a launch's argument addresses, device thread only
}

// Open starts device ordinal's thread, retains its primary context and
// creates its work stream. The error is one user-facing sentence when the
// driver or the device is missing.
func Open(ordinal int) (*Device, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	var count int32
	if err := check("cuDeviceGetCount", d.cuDeviceGetCount(&count)); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= int(count) {
		return nil, fmt.Errorf("CUDA device %d does not exist (%d visible; check CUDA_VISIBLE_DEVICES)", ordinal, count)
	}
	dev := &Device{d: d, work: make(chan func())}
	started := make(chan error, 1)
	go dev.loop(ordinal, started)
	if err := <-started; err != nil {
		return nil, err
	}
	dev.Mem = NewAllocator(deviceMemory{dev})
	return dev, nil
}

// loop is the device thread. It never unlocks: when it returns, the runtime
// ends the OS thread, so no other goroutine inherits its current context.
func (dev *Device) loop(ordinal int, started chan<- error) {
	runtime.LockOSThread()
	dev.tid, dev.g = threadID(), currentG()
	if err := dev.init(ordinal); err != nil {
		started <- err
		return
	}
	started <- nil
	for fn := range dev.work {
		fn()
	}
}

func (dev *Device) init(ordinal int) error {
	d := dev.d
	if err := check("cuDeviceGet", d.cuDeviceGet(&dev.dev, int32(ordinal))); err != nil {
		return err
	}
	if err := check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&dev.ctx, dev.dev)); err != nil {
		return err
	}
	if err := check("cuCtxSetCurrent", d.cuCtxSetCurrent(dev.ctx)); err != nil {
		return err
	}
	info, err := dev.query(ordinal)
	if err != nil {
		return err
	}
	dev.Info = info
	if err := check("cuStreamCreate", d.cuStreamCreate(&dev.Stream, streamNonBlocking)); err != nil {
		return err
	}
	return nil
}

func (dev *Device) query(ordinal int) (Info, error) {
	d := dev.d
	info := Info{Ordinal: ordinal}
	var name [256]byte
	if err := check("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), dev.dev)); err != nil {
		return info, err
	}
	info.Name = cString(&name[0])
	attrs := []struct {
		attr int32
		dst  *int
	}{
		{attrComputeCapabilityMajor, &info.Major},
		{attrComputeCapabilityMinor, &info.Minor},
		{attrMultiprocessorCount, &info.SMs},
		{attrL2CacheSize, &info.L2Bytes},
		{attrMaxSharedPerBlockOptin, &info.MaxSharedOptin},
	}
	for _, a := range attrs {
		var v int32
		if err := check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, a.attr, dev.dev)); err != nil {
			return info, err
		}
		*a.dst = int(v)
	}
	if err := check("cuDeviceTotalMem", d.cuDeviceTotalMem(&info.TotalMem, dev.dev)); err != nil {
		return info, err
	}
	var v int32
	if err := check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return info, err
	}
	info.DriverVersion = int(v)
	return info, nil
}

// errClosed is returned by every method of a closed Device.
var errClosed = errors.New("cuda: device is closed")

// Do runs fn on the device thread and returns its error. Calls nest: the
// Device's methods called inside fn run directly. A panic in fn is re-raised
// in the caller's goroutine.
func (dev *Device) Do(fn func() error) error {
	if dev.onThread() {
		return fn()
	}
	done := make(chan taskResult, 1)
	if !dev.submit(func() {
		var res taskResult
		defer func() {
			if p := recover(); p != nil {
				res.panic = p
			}
			done <- res
		}()
		res.err = fn()
	}) {
		return errClosed
	}
	res := <-done
	if res.panic != nil {
		panic(res.panic)
	}
	return res.err
}

// onThread reports whether the caller is the device goroutine.
func (dev *Device) onThread() bool {
	if haveCurrentG {
		return currentG() == dev.g
	}
	return threadID() == dev.tid
}

type taskResult struct {
	err   error
	panic any
}

// submit hands task to the device thread; false once the Device is closed.
func (dev *Device) submit(task func()) (ok bool) {
	defer func() {
		if recover() != nil { // send on the closed work channel
			ok = false
		}
	}()
	dev.work <- task
	return true
}

// Close waits for outstanding work, destroys the stream, frees the cached
// memory and releases the primary context. Buffers still allocated from Mem
// are freed with the context.
func (dev *Device) Close() error {
	var err error
	dev.closed.Do(func() {
		err = dev.Do(func() error {
			errs := []error{
				check("cuCtxSynchronize", dev.d.cuCtxSynchronize()),
				dev.Mem.ReleaseCached(),
				check("cuStreamDestroy", dev.d.cuStreamDestroy(dev.Stream)),
				check("cuDevicePrimaryCtxRelease", dev.d.cuDevicePrimaryCtxRelease(dev.dev)),
			}
			return errors.Join(errs...)
		})
		close(dev.work)
	})
	return err
}

// MemInfo is the free and total device memory in bytes.
func (dev *Device) MemInfo() (free, total uint64, err error) {
	err = dev.Do(func() error { return check("cuMemGetInfo", dev.d.cuMemGetInfo(&free, &total)) })
	return
}

// Synchronize waits for all work on the device.
func (dev *Device) Synchronize() error {
	return dev.Do(func() error { return check("cuCtxSynchronize", dev.d.cuCtxSynchronize()) })
}

// Malloc allocates device memory directly (cuMemAlloc). Per-step buffers go
// through dev.Mem instead, which reuses freed blocks.
func (dev *Device) Malloc(bytes int) (DevicePtr, error) {
	var p DevicePtr
	err := dev.Do(func() error { return check("cuMemAlloc", dev.d.cuMemAlloc(&p, uint64(bytes))) })
	return p, err
}

// Free releases memory from Malloc.
func (dev *Device) Free(p DevicePtr) error {
	return dev.Do(func() error { return check("cuMemFree", dev.d.cuMemFree(p)) })
}

// deviceMemory is the Device as the allocator's backend.
type deviceMemory struct{ dev *Device }

func (m deviceMemory) Malloc(bytes int) (DevicePtr, error) { return m.dev.Malloc(bytes) }
func (m deviceMemory) Free(p DevicePtr) error              { return m.dev.Free(p) }
func (m deviceMemory) IsOutOfMemory(err error) bool {
	var r Result
	return errors.As(err, &r) && r == resultOutOfMemory
}

// HostAlloc allocates page-locked host memory, which asynchronous copies need
// to overlap with compute (and graph-captured copies need at all).
func (dev *Device) HostAlloc(bytes int) ([]byte, error) {
	var p unsafe.Pointer
	if err := dev.Do(func() error { return check("cuMemAllocHost", dev.d.cuMemAllocHost(&p, uint64(bytes))) }); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), bytes), nil
}

// HostFree releases memory from HostAlloc.
func (dev *Device) HostFree(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return dev.Do(func() error { return check("cuMemFreeHost", dev.d.cuMemFreeHost(unsafe.Pointer(&b[0]))) })
}

// bytesOf views a slice's backing array as bytes.
func bytesOf[T any](s []T) (unsafe.Pointer, int) {
	if len(s) == 0 {
		return nil, 0
	}
	var zero T
	return unsafe.Pointer(&s[0]), len(s) * int(unsafe.Sizeof(zero))
}

// The synchronous copies run on the device stream and wait for it, so they
// are ordered after the kernels already enqueued there and complete on
// return. (The driver's own synchronous copies use the legacy default stream,
// which a non-blocking stream does not wait for, and a pageable
// host-to-device copy may return before its DMA has landed.)

// CopyHtoD copies src to device memory at dst and waits for it.
func CopyHtoD[T any](dev *Device, dst DevicePtr, src []T) error {
	p, n := bytesOf(src)
	if n == 0 {
		return nil
	}
	err := dev.Do(func() error {
		if err := check("cuMemcpyHtoDAsync", dev.d.cuMemcpyHtoDAsync(dst, p, uint64(n), dev.Stream)); err != nil {
			return err
		}
		return check("cuStreamSynchronize", dev.d.cuStreamSynchronize(dev.Stream))
	})
	runtime.KeepAlive(src)
	return err
}

// CopyDtoH waits for the device stream, then copies device memory at src
// into dst.
func CopyDtoH[T any](dev *Device, dst []T, src DevicePtr) error {
	p, n := bytesOf(dst)
	if n == 0 {
		return nil
	}
	err := dev.Do(func() error {
		if err := check("cuMemcpyDtoHAsync", dev.d.cuMemcpyDtoHAsync(p, src, uint64(n), dev.Stream)); err != nil {
			return err
		}
		return check("cuStreamSynchronize", dev.d.cuStreamSynchronize(dev.Stream))
	})
	runtime.KeepAlive(dst)
	return err
}

// CopyDtoD copies bytes between device buffers on the device stream and
// waits for it.
func (dev *Device) CopyDtoD(dst, src DevicePtr, bytes int) error {
	return dev.Do(func() error {
		if err := check("cuMemcpyDtoDAsync", dev.d.cuMemcpyDtoDAsync(dst, src, uint64(bytes), dev.Stream)); err != nil {
			return err
		}
		return check("cuStreamSynchronize", dev.d.cuStreamSynchronize(dev.Stream))
	})
}

// CopyHtoDAsync enqueues a host-to-device copy on s. src must stay unchanged
// until s reaches the copy: use HostAlloc memory, or synchronise first.
func CopyHtoDAsync[T any](dev *Device, dst DevicePtr, src []T, s Stream) error {
	p, n := bytesOf(src)
	if n == 0 {
		return nil
	}
	err := dev.Do(func() error {
		if dev.rec.record(opCopyHtoD, uint64(dst), uint64(uintptr(p)), uint64(n), uint64(s)) {
			return nil
		}
		ev := dev.profBegin(s)
		defer dev.profEnd(s, ev, func() string { return "copy host to device" })
		return check("cuMemcpyHtoDAsync", dev.d.cuMemcpyHtoDAsync(dst, p, uint64(n), s))
	})
	runtime.KeepAlive(src)
	return err
}

// CopyDtoHAsync enqueues a device-to-host copy on s; dst is valid after s
// is synchronised.
func CopyDtoHAsync[T any](dev *Device, dst []T, src DevicePtr, s Stream) error {
	p, n := bytesOf(dst)
	if n == 0 {
		return nil
	}
	err := dev.Do(func() error {
		if dev.rec.mode != recordOff {
			dev.rec.refuse("a device-to-host copy")
			return nil
		}
		return check("cuMemcpyDtoHAsync", dev.d.cuMemcpyDtoHAsync(p, src, uint64(n), s))
	})
	runtime.KeepAlive(dst)
	return err
}

// CopyDtoDAsync enqueues a device-to-device copy on s.
func (dev *Device) CopyDtoDAsync(dst, src DevicePtr, bytes int, s Stream) error {
	return dev.Do(func() error {
		if dev.rec.record(opCopyDtoD, uint64(dst), uint64(src), uint64(bytes), uint64(s)) {
			return nil
		}
		ev := dev.profBegin(s)
		defer dev.profEnd(s, ev, func() string { return "copy device to device" })
		return check("cuMemcpyDtoDAsync", dev.d.cuMemcpyDtoDAsync(dst, src, uint64(bytes), s))
	})
}

// MemsetAsync fills bytes of device memory with v on s.
func (dev *Device) MemsetAsync(dst DevicePtr, v byte, bytes int, s Stream) error {
	return dev.Do(func() error {
		if dev.rec.record(opMemset, uint64(dst), uint64(v), uint64(bytes), uint64(s)) {
			return nil
		}
		ev := dev.profBegin(s)
		defer dev.profEnd(s, ev, func() string { return "memset" })
		return check("cuMemsetD8Async", dev.d.cuMemsetD8Async(dst, v, uint64(bytes), s))
	})
}

// NewStream creates a non-blocking stream.
func (dev *Device) NewStream() (Stream, error) {
	var s Stream
	err := dev.Do(func() error { return check("cuStreamCreate", dev.d.cuStreamCreate(&s, streamNonBlocking)) })
	return s, err
}

// DestroyStream destroys a stream from NewStream.
func (dev *Device) DestroyStream(s Stream) error {
	return dev.Do(func() error { return check("cuStreamDestroy", dev.d.cuStreamDestroy(s)) })
}

// StreamSync waits until s has finished its work.
func (dev *Device) StreamSync(s Stream) error {
	return dev.Do(func() error {
		if dev.rec.mode != recordOff {
			dev.rec.refuse("a stream synchronisation")
			return nil
		}
		return check("cuStreamSynchronize", dev.d.cuStreamSynchronize(s))
	})
}

// NewEvent creates an event; timing events can be measured with Elapsed.
func (dev *Device) NewEvent(timing bool) (Event, error) {
	flags := uint32(eventNoTiming)
	if timing {
		flags = eventDefault
	}
	var e Event
	err := dev.Do(func() error { return check("cuEventCreate", dev.d.cuEventCreate(&e, flags)) })
	return e, err
}

// Record marks e at the current end of s.
func (dev *Device) Record(e Event, s Stream) error {
	return dev.Do(func() error {
		if dev.rec.mode != recordOff {
			dev.rec.refuse("an event record")
			return nil
		}
		return check("cuEventRecord", dev.d.cuEventRecord(e, s))
	})
}

// Wait makes s wait for e before running later work.
func (dev *Device) Wait(s Stream, e Event) error {
	return dev.Do(func() error { return check("cuStreamWaitEvent", dev.d.cuStreamWaitEvent(s, e, 0)) })
}

// EventSync waits until e has happened.
func (dev *Device) EventSync(e Event) error {
	return dev.Do(func() error { return check("cuEventSynchronize", dev.d.cuEventSynchronize(e)) })
}

// Elapsed is the GPU time between two recorded timing events (resolution
// about half a microsecond).
func (dev *Device) Elapsed(start, end Event) (time.Duration, error) {
	var ms float32
	err := dev.Do(func() error { return check("cuEventElapsedTime", dev.d.cuEventElapsedTime(&ms, start, end)) })
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

// DestroyEvent destroys an event from NewEvent.
func (dev *Device) DestroyEvent(e Event) error {
	return dev.Do(func() error { return check("cuEventDestroy", dev.d.cuEventDestroy(e)) })
}
