package cpu

import (
	"sync"
	"unsafe"
)

// hugePage is the transparent huge page size on x86-64 (and arm64 with
// 4 KiB base pages).
const hugePage = 2 << 20

// Weights are streamed once per decode step, hundreds of megabytes of
// them: with 4 KiB pages every 4 KiB read is also a TLB miss, and the
// page walks cost about a third of decode speed (measured on stories110M:
// 66 → 87 tok/s). So weights live in memory on 2 MiB boundaries advised
// as huge pages. Matrices are carved from shared 32 MiB chunks, so a
// 2.4 MiB matrix does not waste the rest of its last huge page.

// alignedBytes returns n zeroed bytes starting on a 64-byte boundary (a
// cache line, so no vector load straddles two); from 1 MiB on they start
// on a huge page and are advised as huge-page backed.
func alignedBytes(n int) []byte {
	if n >= hugePage/2 {
		return hugeBytes(n)
	}
	buf := make([]byte, n+64)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % 64); r != 0 {
		off = 64 - r
	}
	return buf[off : off+n : off+n]
}

// hugeBytes returns n zeroed bytes in whole huge pages, advised as such.
func hugeBytes(n int) []byte {
	size := (n + hugePage - 1) / hugePage * hugePage
	buf := make([]byte, size+hugePage)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % hugePage); r != 0 {
		off = hugePage - r
	}
	buf = buf[off : off+size : off+size]
	adviseHugePages(buf)
	return buf[:n:n]
}

const (
	arenaChunk = 16 * hugePage
	arenaMin   = 64 << 10 // smaller matrices take ordinary aligned memory
)

var weightArena struct {
	sync.Mutex
	free []byte
}

// weightBytes returns n zeroed bytes for packed weights: 64-byte aligned,
// from huge-page-backed chunks when n is large enough to matter. A chunk
// lives as long as any matrix carved from it.
func weightBytes(n int) []byte {
	switch {
	case n < arenaMin:
		return alignedBytes(n)
	case n > arenaChunk/2:
		return hugeBytes(n)
	}
	weightArena.Lock()
	defer weightArena.Unlock()
	if len(weightArena.free) < n {
		weightArena.free = hugeBytes(arenaChunk)
	}
	buf := weightArena.free[:n:n]
	weightArena.free = weightArena.free[min(len(weightArena.free), (n+63)&^63):]
	return buf
}

// AlignedBytes is alignedBytes for the benchmarks (bench roofline reads
// memory allocated as weights are).
func AlignedBytes(n int) []byte { return alignedBytes(n) }
