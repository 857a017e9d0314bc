package cpu

import (
	"sync"

	"github.com/gosling-ai/gosling/internal/hugemem"
)

const hugePage = hugemem.PageSize

// Weights are streamed once per decode step, hundreds of megabytes of
// them, so they live in huge-page-backed memory (package hugemem says
// why). Matrices are carved from shared 32 MiB chunks, so a 2.4 MiB
// matrix does not waste the rest of its last huge page.

// alignedBytes is hugemem.Aligned: 64-byte aligned, huge pages from 1 MiB.
func alignedBytes(n int) []byte { return hugemem.Aligned(n) }

// hugeBytes is hugemem.Huge.
func hugeBytes(n int) []byte { return hugemem.Huge(n) }

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
