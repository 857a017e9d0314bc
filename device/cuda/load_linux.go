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

// threadID identifies the calling OS thread.
func threadID() int { return syscall.Gettid() }
