package cpu

import (
	"sync"

	"github.com/gosling-ai/gosling/internal/hugemem"
)

// Weights are streamed once per decode step, hundreds of megabytes of
// them, so they live in huge-page-backed memory (package hugemem says
// why). Matrices are carved from shared 32 MiB chunks, so a 2.4 MiB
// matrix does not waste the rest of its last huge page.

const (
	arenaChunk = 16 * hugemem.PageSize
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
		return hugemem.Aligned(n)
	case n > arenaChunk/2:
		return hugemem.Huge(n)
	}
	weightArena.Lock()
	defer weightArena.Unlock()
	if len(weightArena.free) < n {
		weightArena.free = hugemem.Huge(arenaChunk)
	}
	buf := weightArena.free[:n:n]
	weightArena.free = weightArena.free[min(len(weightArena.free), (n+63)&^63):]
	return buf
}
