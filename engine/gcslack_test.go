package engine_test

import (
	"context"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/internal/rss"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/tensor"
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

// TestConvertedWeightsOffHeap: weights converted at load (a float32
// checkpoint served as bfloat16, an fp8 checkpoint widened) and packed for
// the CPU kernels are not on the Go heap once the model has run, and Close
// gives their memory back. On the heap they raised the collector's goal
// by twice their size.
func TestConvertedWeightsOffHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory is not the engine's")
	}
	src := filepath.Join(t.TempDir(), "f32")
	shape := random.Shape{Dim: 512, Hidden: 1024, Layers: 4, Heads: 8, KVHeads: 8, Vocab: 4096, SeqLen: 256, Tied: true, RopeTheta: 10000, NormEps: 1e-5}
	if err := random.Write(src, random.Options{Shape: shape, Format: "hf", DType: tensor.F32, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	fp8 := filepath.Join(t.TempDir(), "fp8")
	if _, err := random.WriteFP8(src, fp8, []int{128, 128}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, dtype string }{{"bfloat16 from float32", src, "bfloat16"}, {"fp8 checkpoint", fp8, "auto"}} {
		t.Run(tc.name, func(t *testing.T) {
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			before := ms.HeapAlloc
			e, err := engine.New(engine.Config{ModelPath: tc.path, DType: tc.dtype, KVCacheTokens: 512})
			if err != nil {
				t.Fatal(err)
			}
			p := greedy(1)
			if _, err := e.Generate(context.Background(), engine.Request{InputIDs: []int{1, 2, 3}, Sampling: p}); err != nil {
				t.Fatal(err)
			}
			served := e.WeightBytesPerToken()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			grew := int64(ms.HeapAlloc) - int64(before)
			t.Logf("weights served: %d MB; heap grew by %d MB", served>>20, grew>>20)
			if grew > served/4 {
				t.Errorf("the heap grew by %d MB with %d MB of converted weights: they are on the Go heap", grew>>20, served>>20)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
