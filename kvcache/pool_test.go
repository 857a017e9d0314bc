package kvcache

import (
	"runtime"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/tensor"
)

// TestLargePoolOffHeap: a pool of 64 MB is not on the Go heap (its bytes
// would raise the collector's heap goal), stores and reads like any
// other in every dtype, and Free gives it back; a small pool stays on the
// heap, where Free leaves it to the collector.
func TestLargePoolOffHeap(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.FP8E4M3} {
		spec := Spec{NumLayers: 4, NumKVHeads: 2, HeadDim: 64, HeadDimV: 64, DType: dt}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		p, err := NewPool(spec, 64<<20/(2*2*64*4*4), 16) // 64 MB in float32
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if grew := int64(ms.HeapAlloc) - int64(before); grew > 1<<20 || p.mapped == nil {
			t.Errorf("%v: %d MB pool, heap grew by %d KB (mapped %v)", dt, p.Bytes()>>20, grew>>10, p.mapped != nil)
		}
		vals := make([]float32, spec.KWidth())
		for i := range vals {
			vals[i] = float32(i%7) / 4 // exact in every dtype
		}
		last := int32(p.NumSlots - 1)
		for l := range spec.NumLayers {
			p.StoreK(l, last, vals)
			p.StoreV(l, 3, vals)
			var scratch []float32
			if got := p.K(l, last, 1, &scratch); !slices.Equal(got, vals) {
				t.Fatalf("%v layer %d: K read back %v", dt, l, got[:8])
			}
		}
		if err := p.Free(); err != nil || p.mapped != nil || p.k != nil {
			t.Errorf("%v: Free: %v", dt, err)
		}
	}
	small, err := NewPool(Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 4, HeadDimV: 4}, 64, 16)
	if err != nil {
		t.Fatal(err)
	}
	if small.mapped != nil || small.Free() != nil || small.k == nil {
		t.Error("a small pool is mapped, or Free took its heap storage")
	}
}
