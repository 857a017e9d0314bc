package gputest_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/flash"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/attention/gpu/gputest"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/attention/splitkv"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// The shapes: 32 query heads, 8 KV heads, head dim 128, bf16
// activations and KV cache; prefill with page size 16.
const (
	benchHeads, benchKVHeads, benchDim, benchPage = 32, 8, 128, 16
)

type benchCase struct {
	mode     forward.Mode
	reqs     int
	ctx      int // tokens per request after this forward
	newToks  int // new tokens per request
	page     int
	backends []attention.Entry
}

// BenchmarkCUDADecode reports GB/s of KV read (K and V of every context
// token, once per KV head) for decode steps, with page sizes 1 and 16.
func BenchmarkCUDADecode(b *testing.B) {
	for _, page := range []int{1, 16} {
		for _, reqs := range []int{1, 16, 64} {
			for _, ctx := range []int{4096, 32768} {
				entries := []attention.Entry{flash.CUDAEntry, splitkv.CUDAEntry}
				if reqs == 1 && ctx == 4096 && page == 16 {
					entries = append(entries, native.CUDAEntry)
				}
				runBench(b, benchCase{forward.Decode, reqs, ctx, 1, page, entries})
			}
		}
	}
}

// BenchmarkCUDAPrefill reports TFLOP/s of causal prefill (4·n²/2·heads·dim).
func BenchmarkCUDAPrefill(b *testing.B) {
	for _, n := range []int{1024, 4096, 16384} {
		entries := []attention.Entry{flash.CUDAEntry, splitkv.CUDAEntry}
		if n <= 4096 {
			entries = append(entries, native.CUDAEntry)
		}
		runBench(b, benchCase{forward.Extend, 1, n, n, benchPage, entries})
	}
}

// BenchmarkCUDARead is the device-memory read bandwidth (a read-only
// pass over 4 GiB), the roofline the decode figures compare with.
func BenchmarkCUDARead(b *testing.B) {
	rt := gputest.TestRuntime(b)
	gbs, err := rt.Kernels.ReadBandwidth(4<<30, max(b.N, 5))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(gbs, "GB/s")
}

// BenchmarkCUDACopy is the device-to-device copy bandwidth (read + write).
func BenchmarkCUDACopy(b *testing.B) {
	rt := gputest.TestRuntime(b)
	gbs, err := rt.Dev.CopyBandwidth(1<<30, max(b.N, 3))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(gbs, "GB/s")
}

func runBench(b *testing.B, c benchCase) {
	name := fmt.Sprintf("%v/page%d/reqs%d/ctx%d", c.mode, c.page, c.reqs, c.ctx)
	rt := gputest.TestRuntime(b)
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: benchKVHeads, HeadDim: benchDim, HeadDimV: benchDim, DType: tensor.BF16}
	numPages := c.reqs*(c.ctx+c.page-1)/c.page + 1
	alloc, err := kvcache.NewAllocator(c.page, numPages)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := kvcache.NewDevicePool(spec, numPages*c.page, c.page, rt.PoolMemory())
	if err != nil {
		b.Skip(err)
	}
	defer pool.FreeDevice(rt.PoolMemory())
	// Random keys and values in [-1, 1): constant data can be read faster.
	kvElems := numPages * c.page * spec.KWidth()
	for i, p := range []uintptr{pool.DevK[0], pool.DevV[0]} {
		if err := rt.Kernels.FillSynthetic(rt.Stream, cuda.DevicePtr(p), 0, kvElems, tensor.BF16, tensor.Synthetic{Seed: uint64(i + 1), Scale: 1}); err != nil {
			b.Fatal(err)
		}
	}
	cache := &kvcache.Cache{Alloc: alloc, Table: kvcache.NewReqToToken(c.reqs, c.ctx), Pool: pool}
	batch := &forward.Batch{Mode: c.mode, KV: cache}
	for range c.reqs {
		seq, _ := cache.NewSeq()
		if ok, err := cache.Grow(seq, c.ctx); !ok || err != nil {
			b.Fatal(ok, err)
		}
		batch.ReqRows = append(batch.ReqRows, int32(seq.Row))
		batch.PrefixLens = append(batch.PrefixLens, int32(c.ctx-c.newToks))
		batch.ExtendLens = append(batch.ExtendLens, int32(c.newToks))
		for i := c.ctx - c.newToks; i < c.ctx; i++ {
			batch.InputIDs = append(batch.InputIDs, 0)
			batch.Positions = append(batch.Positions, int32(i))
			batch.OutSlots = append(batch.OutSlots, cache.Table.Row(seq.Row)[i])
		}
	}
	if err := batch.Finalize(); err != nil {
		b.Fatal(err)
	}
	nt := batch.NumTokens()
	layer := &attention.Layer{NumHeads: benchHeads, NumKVHeads: benchKVHeads, HeadDim: benchDim, HeadDimV: benchDim,
		Scale: float32(1 / math.Sqrt(benchDim))}
	// bf16 activations; decode also with float32 queries over the bf16
	// cache, as the engine runs (gpu.UsesDecode: the decode kernel).
	acts := []tensor.DType{tensor.BF16}
	if c.mode == forward.Decode {
		acts = append(acts, tensor.F32)
	}
	for _, dt := range acts {
		size := 2
		if dt == tensor.F32 {
			size = 4
		}
		act := func(cols int) tensor.T {
			buf, err := rt.Alloc(nt * cols * size)
			if err != nil {
				b.Fatal(err)
			}
			if err := rt.Kernels.FillSynthetic(rt.Stream, buf.Ptr, 0, nt*cols, dt, tensor.Synthetic{Seed: uint64(cols), Scale: 1}); err != nil {
				b.Fatal(err)
			}
			return tensor.T{Shape: []int{nt, cols}, Dev: uintptr(buf.Ptr), DType: dt}
		}
		q, k, v := act(benchHeads*benchDim), act(benchKVHeads*benchDim), act(benchKVHeads*benchDim)
		for _, e := range c.backends {
			b.Run(fmt.Sprintf("%s/%s/q-%v", e.Name, name, dt), func(b *testing.B) {
				be, err := e.New(attention.Options{Device: "cuda", KV: cache, Layers: []attention.Layer{*layer}, GPU: rt})
				if err != nil {
					b.Fatal(err)
				}
				if c, ok := be.(interface{ Close() error }); ok {
					defer c.Close()
				}
				if err := be.Plan(batch); err != nil {
					b.Fatal(err)
				}
				step := func() error {
					out, err := attention.Run(be, q, k, v, layer, batch)
					rt.FreeTensor(out)
					return err
				}
				elapsed := timeOnDevice(b, rt, step)
				if c.mode == forward.Decode {
					bytes := float64(c.reqs) * float64(c.ctx) * float64(2*spec.KWidth()*2)
					b.ReportMetric(bytes/elapsed.Seconds()/1e9, "GB/s")
				} else {
					flops := 4 * float64(c.newToks) * float64(c.newToks) / 2 * benchHeads * benchDim
					b.ReportMetric(flops/elapsed.Seconds()/1e12, "TFLOP/s")
				}
				b.ReportMetric(float64(elapsed.Microseconds()), "µs/step")
			})
		}
		rt.FreeTensor(q)
		rt.FreeTensor(k)
		rt.FreeTensor(v)
	}
}

// timeOnDevice runs fn b.N times on the device thread after a warm-up and
// returns the GPU time of one run, measured with events.
func timeOnDevice(b *testing.B, rt *gpu.Runtime, fn func() error) time.Duration {
	var elapsed time.Duration
	err := rt.Dev.Do(func() error {
		for range 2 {
			if err := fn(); err != nil {
				return err
			}
		}
		start, err := rt.Dev.NewEvent(true)
		if err != nil {
			return err
		}
		defer rt.Dev.DestroyEvent(start)
		end, err := rt.Dev.NewEvent(true)
		if err != nil {
			return err
		}
		defer rt.Dev.DestroyEvent(end)
		b.ResetTimer()
		rt.Dev.Record(start, rt.Stream)
		for range b.N {
			if err := fn(); err != nil {
				return err
			}
		}
		rt.Dev.Record(end, rt.Stream)
		if err := rt.Dev.EventSync(end); err != nil {
			return err
		}
		b.StopTimer()
		total, err := rt.Dev.Elapsed(start, end)
		elapsed = total / time.Duration(b.N)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return elapsed
}
