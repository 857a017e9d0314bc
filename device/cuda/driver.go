package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// DevicePtr is a device address (CUdeviceptr).
type DevicePtr uintptr

// Add offsets a device address by bytes.
func (p DevicePtr) Add(bytes int) DevicePtr { return p + DevicePtr(bytes) }

// Stream is a CUstream handle; 0 is the legacy default stream, which cannot
// be captured into a graph, so work goes on streams made by NewStream.
type Stream uintptr

// Event is a CUevent handle.
type Event uintptr

// Result is a CUresult: 0 is success, anything else an error.
type Result int32

// CUresult values this package tests for.
const (
	resultSuccess            Result = 0
	resultOutOfMemory        Result = 2
	resultNotInitialized     Result = 3
	resultNoDevice           Result = 100
	resultInvalidDevice      Result = 101
	resultPeerAlreadyEnabled Result = 704
	resultStreamCaptureUnsup Result = 900
)

func (r Result) Error() string {
	if drv != nil && drv.cuGetErrorName != nil {
		var name, desc *byte
		drv.cuGetErrorName(r, &name)
		drv.cuGetErrorString(r, &desc)
		if name != nil {
			return fmt.Sprintf("%s (%d): %s", cString(name), int32(r), cString(desc))
		}
	}
	return fmt.Sprintf("CUresult %d", int32(r))
}

// check turns a CUresult into an error that names the call.
func check(call string, r Result) error {
	if r == resultSuccess {
		return nil
	}
	return &CallError{Call: call, Result: r}
}

// CallError is a failed driver call.
type CallError struct {
	Call   string
	Result Result
}

func (e *CallError) Error() string { return e.Call + ": " + e.Result.Error() }
func (e *CallError) Unwrap() error { return e.Result }

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// Driver-API enum values (cuda.h, stable across CUDA 12 and 13).
const (
	attrMaxThreadsPerBlock      = 1
	attrMultiprocessorCount     = 16
	attrClockRate               = 13
	attrMemoryClockRate         = 36
	attrGlobalMemoryBusWidth    = 37
	attrL2CacheSize             = 38
	attrComputeCapabilityMajor  = 75
	attrComputeCapabilityMinor  = 76
	attrMaxSharedPerBlockOptin  = 97
	funcAttrMaxDynamicSharedMem = 8
	funcAttrLocalSizeBytes      = 3
	funcAttrNumRegs             = 4

	streamNonBlocking = 1
	eventDefault      = 0
	eventNoTiming     = 2

	// CUstreamCaptureMode: thread-local mode forbids unsafe calls (cuMemAlloc,
	// synchronous copies) only on the capturing thread, which is the device
	// thread here, so a stray allocation during capture fails loudly.
	captureModeGlobal      = 0
	captureModeThreadLocal = 1
	captureModeRelaxed     = 2
)

// driverAPI is the subset of libcuda.so.1 gosling calls. Functions that
// were versioned are bound by their current (_v2) symbols; the unversioned
// names are the 32-bit legacy entry points.
type driverAPI struct {
	cuInit                      func(flags uint32) Result
	cuDriverGetVersion          func(version *int32) Result
	cuGetErrorName              func(r Result, s **byte) Result
	cuGetErrorString            func(r Result, s **byte) Result
	cuDeviceGetCount            func(n *int32) Result
	cuDeviceGet                 func(dev *int32, ordinal int32) Result
	cuDeviceGetName             func(name *byte, length int32, dev int32) Result
	cuDeviceGetAttribute        func(v *int32, attr int32, dev int32) Result
	cuDeviceTotalMem            func(bytes *uint64, dev int32) Result
	cuDevicePrimaryCtxRetain    func(ctx *uintptr, dev int32) Result
	cuDevicePrimaryCtxRelease   func(dev int32) Result
	cuCtxSetCurrent             func(ctx uintptr) Result
	cuCtxSynchronize            func() Result
	cuDeviceCanAccessPeer       func(can *int32, dev, peer int32) Result
	cuCtxEnablePeerAccess       func(peer uintptr, flags uint32) Result
	cuMemGetInfo                func(free, total *uint64) Result
	cuMemAlloc                  func(p *DevicePtr, bytes uint64) Result
	cuMemFree                   func(p DevicePtr) Result
	cuMemAllocHost              func(p *unsafe.Pointer, bytes uint64) Result
	cuMemFreeHost               func(p unsafe.Pointer) Result
	cuMemcpyHtoD                func(dst DevicePtr, src unsafe.Pointer, n uint64) Result
	cuMemcpyDtoH                func(dst unsafe.Pointer, src DevicePtr, n uint64) Result
	cuMemcpyDtoD                func(dst, src DevicePtr, n uint64) Result
	cuMemcpyHtoDAsync           func(dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) Result
	cuMemcpyDtoHAsync           func(dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) Result
	cuMemcpyDtoDAsync           func(dst, src DevicePtr, n uint64, s Stream) Result
	cuMemsetD8Async             func(dst DevicePtr, v uint8, n uint64, s Stream) Result
	cuMemsetD32Async            func(dst DevicePtr, v uint32, n uint64, s Stream) Result
	cuStreamCreate              func(s *Stream, flags uint32) Result
	cuStreamDestroy             func(s Stream) Result
	cuStreamSynchronize         func(s Stream) Result
	cuStreamWaitEvent           func(s Stream, e Event, flags uint32) Result
	cuEventCreate               func(e *Event, flags uint32) Result
	cuEventRecord               func(e Event, s Stream) Result
	cuEventSynchronize          func(e Event) Result
	cuEventElapsedTime          func(ms *float32, start, end Event) Result
	cuEventDestroy              func(e Event) Result
	cuModuleLoadData            func(m *uintptr, image unsafe.Pointer) Result
	cuModuleUnload              func(m uintptr) Result
	cuModuleGetFunction         func(f *uintptr, m uintptr, name string) Result
	cuFuncSetAttribute          func(f uintptr, attr int32, v int32) Result
	cuFuncGetAttribute          func(v *int32, attr int32, f uintptr) Result
	cuStreamBeginCapture        func(s Stream, mode int32) Result
	cuStreamEndCapture          func(s Stream, g *uintptr) Result
	cuGraphInstantiateWithFlags func(exec *uintptr, g uintptr, flags uint64) Result
	cuGraphLaunch               func(exec uintptr, s Stream) Result
	cuGraphExecDestroy          func(exec uintptr) Result
	cuGraphDestroy              func(g uintptr) Result
	cuGraphGetNodes             func(g uintptr, nodes *uintptr, n *uint64) Result

	// cuTensorMapEncodeTiled (CUDA 12.0+) is bound when present; nil
	// leaves the tensor memory accelerator unused (EncodeTiled fails).
	cuTensorMapEncodeTiled func(m unsafe.Pointer, dtype int32, rank uint32, base uintptr, dims, strides *uint64, box, elemStrides *uint32,
		interleave, swizzle, l2Promotion, oobFill int32) Result

	// launchKernel is cuLaunchKernel, called through purego.SyscallN rather
	// than a reflect-built wrapper because it is the one call on the
	// per-token path when graphs are off.
	launchKernel func(f uintptr, grid, block [3]uint32, sharedMem uint32, s Stream, params unsafe.Pointer) Result
}

// symbol names one driverAPI field's C symbols, the first found wins.
type symbol struct {
	field any // pointer to a func field
	names []string
}

func (d *driverAPI) symbols() []symbol {
	return []symbol{
		{&d.cuInit, []string{"cuInit"}},
		{&d.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&d.cuGetErrorName, []string{"cuGetErrorName"}},
		{&d.cuGetErrorString, []string{"cuGetErrorString"}},
		{&d.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&d.cuDeviceGet, []string{"cuDeviceGet"}},
		{&d.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&d.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&d.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		{&d.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&d.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2"}},
		{&d.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&d.cuCtxSynchronize, []string{"cuCtxSynchronize"}},
		{&d.cuDeviceCanAccessPeer, []string{"cuDeviceCanAccessPeer"}},
		{&d.cuCtxEnablePeerAccess, []string{"cuCtxEnablePeerAccess"}},
		{&d.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&d.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&d.cuMemFree, []string{"cuMemFree_v2"}},
		{&d.cuMemAllocHost, []string{"cuMemAllocHost_v2"}},
		{&d.cuMemFreeHost, []string{"cuMemFreeHost"}},
		{&d.cuMemcpyHtoD, []string{"cuMemcpyHtoD_v2"}},
		{&d.cuMemcpyDtoH, []string{"cuMemcpyDtoH_v2"}},
		{&d.cuMemcpyDtoD, []string{"cuMemcpyDtoD_v2"}},
		{&d.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&d.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&d.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
		{&d.cuMemsetD8Async, []string{"cuMemsetD8Async"}},
		{&d.cuMemsetD32Async, []string{"cuMemsetD32Async"}},
		{&d.cuStreamCreate, []string{"cuStreamCreate"}},
		{&d.cuStreamDestroy, []string{"cuStreamDestroy_v2"}},
		{&d.cuStreamSynchronize, []string{"cuStreamSynchronize"}},
		{&d.cuStreamWaitEvent, []string{"cuStreamWaitEvent"}},
		{&d.cuEventCreate, []string{"cuEventCreate"}},
		{&d.cuEventRecord, []string{"cuEventRecord"}},
		{&d.cuEventSynchronize, []string{"cuEventSynchronize"}},
		// CUDA 13's header maps cuEventElapsedTime to the _v2 symbol.
		{&d.cuEventElapsedTime, []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}},
		{&d.cuEventDestroy, []string{"cuEventDestroy_v2"}},
		{&d.cuModuleLoadData, []string{"cuModuleLoadData"}},
		{&d.cuModuleUnload, []string{"cuModuleUnload"}},
		{&d.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&d.cuFuncSetAttribute, []string{"cuFuncSetAttribute"}},
		{&d.cuFuncGetAttribute, []string{"cuFuncGetAttribute"}},
		{&d.cuStreamBeginCapture, []string{"cuStreamBeginCapture_v2"}},
		{&d.cuStreamEndCapture, []string{"cuStreamEndCapture"}},
		{&d.cuGraphInstantiateWithFlags, []string{"cuGraphInstantiateWithFlags"}},
		{&d.cuGraphLaunch, []string{"cuGraphLaunch"}},
		{&d.cuGraphExecDestroy, []string{"cuGraphExecDestroy"}},
		{&d.cuGraphDestroy, []string{"cuGraphDestroy"}},
		{&d.cuGraphGetNodes, []string{"cuGraphGetNodes"}},
	}
}

// drv is the process's driver binding. libcuda is process-global state (one
// primary context per device, shared by every user in the process), so its
// function table is too; it is written once under driverOnce.
var (
	drv        *driverAPI
	driverOnce sync.Once
	driverErr  error
	driverPath string
)

// loadDriver opens libcuda.so.1, binds its functions and calls cuInit.
func loadDriver() (*driverAPI, error) {
	driverOnce.Do(func() {
		h, path, err := openLibrary(LibCUDA, processSearchEnv(), dlopen)
		if err != nil {
			driverErr = err
			return
		}
		d := &driverAPI{}
		for _, s := range d.symbols() {
			if err := bindFirst(h, s.field, s.names); err != nil {
				driverErr = fmt.Errorf("%s at %s is too old for gosling (needs a CUDA 12.4+ driver): %w", LibCUDA, path, err)
				return
			}
		}
		_ = bindFirst(h, &d.cuTensorMapEncodeTiled, []string{"cuTensorMapEncodeTiled"}) // optional: nil when absent
		launch, err := bindLaunchKernel(h)
		if err != nil {
			driverErr = fmt.Errorf("%s at %s: %w", LibCUDA, path, err)
			return
		}
		d.launchKernel = launch
		drv = d
		driverPath = path
		if r := d.cuInit(0); r != resultSuccess {
			driverErr = fmt.Errorf("no usable NVIDIA GPU: cuInit: %v; use --device cpu", r)
		}
	})
	return drv, driverErr
}

// DriverAvailable reports whether libcuda.so.1 opens and cuInit succeeds,
// with the reason when not (what --device auto logs before picking the CPU).
func DriverAvailable() error {
	_, err := loadDriver()
	return err
}

// DriverVersion is the CUDA version the driver supports, as 1000·major + 10·minor.
func DriverVersion() (int, error) {
	d, err := loadDriver()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount is the number of CUDA devices visible to this process.
func DeviceCount() (int, error) {
	d, err := loadDriver()
	if err != nil {
		return 0, err
	}
	var n int32
	if err := check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}
