// Package hugemem allocates the large, long-lived host buffers that are
// streamed from memory every decode step — packed weights and the KV
// cache — on 2 MiB boundaries advised as transparent huge pages.
//
// With 4 KiB pages every 4 KiB read is also a TLB miss: decode reads
// hundreds of megabytes of weights per token, and attention reads each
// request's KV rows scattered over a pool of hundreds of megabytes, so the
// page walks cost about a third of the speed of either (measured on a
// stories110M-shaped model: weights 66 → 87 tok/s; a batch-32 step's
// attention, see kvcache.NewPool).
package hugemem

import "unsafe"

// PageSize is the transparent huge page size on x86-64 (and arm64 with
// 4 KiB base pages).
const PageSize = 2 << 20

// Aligned returns n zeroed bytes starting on a 64-byte boundary (a cache
// line, so no vector load straddles two); from 1 MiB on they start on a
// huge page and are advised as huge-page backed (see Huge).
func Aligned(n int) []byte {
	if n >= PageSize/2 {
		return Huge(n)
	}
	buf := make([]byte, n+64)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % 64); r != 0 {
		off = 64 - r
	}
	return buf[off : off+n : off+n]
}

// Huge returns n zeroed bytes in whole huge pages, advised as such. The
// advice is a hint (the kernel's default mode, "madvise", gives huge pages
// only to advised ranges): where it is refused only speed changes.
func Huge(n int) []byte {
	size := (n + PageSize - 1) / PageSize * PageSize
	buf := make([]byte, size+PageSize)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % PageSize); r != 0 {
		off = PageSize - r
	}
	buf = buf[off : off+size : off+size]
	adviseHugePages(buf)
	return buf[:n:n]
}

// Prefault touches every page of buf now, so that the first pass over it
// (a KV pool's first tokens, spread over all of it by many requests) does
// not take a page fault, and a huge page's zeroing or compaction, in the
// middle of a decode step. buf must be zeroed memory (Aligned's or
// Huge's): the touch writes a zero.
func Prefault(buf []byte) {
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 0
	}
}
