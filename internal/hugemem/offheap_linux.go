package hugemem

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Map returns n zeroed bytes outside the Go heap, on a huge-page boundary
// and advised as huge-page backed; Unmap gives them back. Memory the
// collector does not see does not raise its heap goal: a buffer of
// gigabytes on the heap lets as many gigabytes of garbage pile up
// between collections (GOGC=100 collects when the heap doubles).
func Map(n int) ([]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	size := (n + PageSize - 1) / PageSize * PageSize
	// One huge page more than needed, trimmed to the aligned part.
	raw, err := unix.MmapPtr(-1, 0, nil, uintptr(size+PageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", size, err)
	}
	head := int((PageSize - uintptr(raw)%PageSize) % PageSize)
	if head > 0 {
		_ = unix.MunmapPtr(raw, uintptr(head))
	}
	if tail := PageSize - head; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(raw, head+size), uintptr(tail))
	}
	buf := unsafe.Slice((*byte)(unsafe.Add(raw, head)), size)
	adviseHugePages(buf)
	return buf[:n:size], nil
}

// Unmap returns a buffer of Map to the system. Nothing may touch it after.
func Unmap(buf []byte) error {
	if cap(buf) == 0 {
		return nil
	}
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(buf)), uintptr(cap(buf)))
}
