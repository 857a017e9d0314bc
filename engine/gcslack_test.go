package engine_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/rss"
	"github.com/gosling-ai/gosling/internal/shared"
)

// TestKVCacheOffHeap: a 256 MB KV cache is not on the Go heap, so the
// collector's heap goal does not grow with it. On the heap (GOGC=100) the
// goal grew by twice the cache, and up to the cache's size in garbage
// piled up under load before each collection. The RSS above the loaded
// engine under a few seconds of load is logged.
func TestKVCacheOffHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory is not the engine's")
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	goalBefore := ms.NextGC
	e := newEngine(t, engine.Config{ModelPath: shared.Path(t, "models/stories260K-hf"), KVCacheTokens: 200_000, MaxRunningRequests: 16})
	kvBytes := e.Settings().KVCacheBytes
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grew := int64(ms.NextGC) - int64(goalBefore)
	loaded := rss.Bytes(t)
	t.Logf("KV cache %d MB; heap goal %d MB (%+d MB); RSS %d MB", kvBytes>>20, ms.NextGC>>20, grew>>20, loaded>>20)
	if kvBytes < 200<<20 {
		t.Fatalf("KV cache of %d bytes, want at least 200 MB", kvBytes)
	}
	if grew > kvBytes/8 {
		t.Errorf("the heap goal grew by %d MB with a %d MB KV cache: the cache is on the Go heap", grew>>20, kvBytes>>20)
	}

	peak := rss.PeakAbove(t, loaded, func() {
		start := time.Now()
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for time.Since(start) < 3*time.Second {
					p := greedy(200)
					p.IgnoreEOS = true
					if _, err := e.Generate(context.Background(), engine.Request{Prompt: "Once upon a time", Sampling: p}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
	runtime.ReadMemStats(&ms)
	t.Logf("under load: peak RSS %d MB above the loaded engine, %d collections, %d MB allocated in all", peak>>20, ms.NumGC, ms.TotalAlloc>>20)
}
