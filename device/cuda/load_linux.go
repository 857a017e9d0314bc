//go:build linux

package cuda

import (
	"errors"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/ebitengine/purego"
)

// dlopen opens a shared library with global symbols, as the CUDA libraries
// expect (cuBLAS finds cuBLASLt, NVRTC its builtins library, by soname).
func dlopen(path string) (uintptr, error) {
	// dlerror is per thread: the goroutine must not move between the failed
	// dlopen and purego's dlerror call.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// bindFirst points the func at fptr to the first of names that h exports.
func bindFirst(h uintptr, fptr any, names []string) error {
	var errs []error
	for _, name := range names {
		sym, err := purego.Dlsym(h, name)
		if err == nil && sym != 0 {
			purego.RegisterFunc(fptr, sym)
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func bindLaunchKernel(h uintptr) (func(f uintptr, grid, block [3]uint32, sharedMem uint32, s Stream, params unsafe.Pointer) Result, error) {
	sym, err := purego.Dlsym(h, "cuLaunchKernel")
	if err != nil {
		return nil, err
	}
	return func(f uintptr, grid, block [3]uint32, sharedMem uint32, s Stream, params unsafe.Pointer) Result {
		r, _, _ := purego.SyscallN(sym, f,
			uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
			uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
			uintptr(sharedMem), uintptr(s), uintptr(params), 0)
		return Result(int32(r))
	}, nil
}

// cuLaunchKernelEx's CUlaunchConfig and CUlaunchAttribute (cuda.h, CUDA
// 12+): 56 and 72 bytes.
type launchAttribute struct {
	id    uint32
	_     uint32
	value [64]byte
}

type launchConfigEx struct {
	grid, block [3]uint32
	sharedMem   uint32
	_           uint32
	stream      uintptr
	attrs       *launchAttribute
	numAttrs    uint32
	_           uint32
}

// cuLaunchAttributeProgrammaticStreamSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; its value is an int.
const cuLaunchAttributeProgrammaticStreamSerialization = 6

// bindLaunchKernelEx binds cuLaunchKernelEx, or returns nil.
func bindLaunchKernelEx(h uintptr) func(f uintptr, grid, block [3]uint32, sharedMem uint32, s Stream, params unsafe.Pointer, pdl bool) Result {
	sym, err := purego.Dlsym(h, "cuLaunchKernelEx")
	if err != nil {
		return nil
	}
	return func(f uintptr, grid, block [3]uint32, sharedMem uint32, s Stream, params unsafe.Pointer, pdl bool) Result {
		attr := &launchAttribute{id: cuLaunchAttributeProgrammaticStreamSerialization}
		if pdl {
			attr.value[0] = 1
		}
		cfg := &launchConfigEx{grid: grid, block: block, sharedMem: sharedMem, stream: uintptr(s), attrs: attr, numAttrs: 1}
		r, _, _ := purego.SyscallN(sym, uintptr(unsafe.Pointer(cfg)), f, uintptr(params), 0)
		runtime.KeepAlive(cfg)
		runtime.KeepAlive(attr)
		return Result(int32(r))
	}
}

// threadID identifies the calling OS thread.
func threadID() int { return syscall.Gettid() }
