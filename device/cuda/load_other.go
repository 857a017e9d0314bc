//go:build !linux

package cuda

import (
	"errors"
	"unsafe"
)

var errNotLinux = errors.New("CUDA is supported on Linux only")

func dlopen(path string) (uintptr, error) { return 0, errNotLinux }

func bindFirst(h uintptr, fptr any, names []string) error { return errNotLinux }

func bindLaunchKernel(h uintptr) (func(f uintptr, grid, block [3]uint32, sharedMem uint32, s Stream, params unsafe.Pointer) Result, error) {
	return nil, errNotLinux
}

func threadID() int { return -1 }
