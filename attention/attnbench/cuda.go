package attnbench

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/device/cudadev"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// OpenCUDA opens GPU 0 with its kernels (through the on-disk NVRTC cache)
// for the GPU benchmarks; Close releases it.
func OpenCUDA() (*cudadev.Runtime, error) { return cudadev.Open(device.OpenOptions{}) }

// CUDACase is one GPU measurement: reqs requests of Ctx tokens after the
// forward, NewToks of them new (1 for decode), on pages of Page tokens,
// with activations Act over a KV cache of KV.
type CUDACase struct {
	Mode                     forward.Mode
	Reqs, Ctx, NewToks, Page int
	KV, Act                  tensor.DType
}

// Name is the case as the benchmarks print it.
func (c CUDACase) Name() string {
	if c.Mode == forward.Decode {
		return fmt.Sprintf("decode bs%d ctx%d", c.Reqs, c.Ctx)
	}
	return fmt.Sprintf("prefill %dx%d", c.Reqs, c.NewToks)
}

// RunCUDA times entry on one GPU case: a one-layer device pool of random
// keys and values (constant data can read faster), random q/k/v, iters
// forwards after two warm-ups, timed with events. Decode reports GB/s of
// K and V read (every context token once per KV head); prefill reports
// useful FLOP/s of the causal triangle (4·n²/2·heads·dim, as SDPA's
// figures count it) in GFLOPs.
func RunCUDA(e attention.Entry, dev *cudadev.Runtime, sh Shape, c CUDACase, iters int) (Result, error) {
	rt := dev.AttentionRuntime()
	res := Result{Backend: e.Name, PageSize: c.Page, Case: c.Name()}
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: sh.KVHeads, HeadDim: sh.HeadDim, HeadDimV: sh.DV(), SharedV: sh.MLA, DType: c.KV}
	numPages := c.Reqs*(c.Ctx+c.Page-1)/c.Page + 1
	alloc, err := kvcache.NewAllocator(c.Page, numPages)
	if err != nil {
		return res, err
	}
	pool, err := kvcache.NewDevicePool(spec, numPages*c.Page, c.Page, rt.PoolMemory())
	if err != nil {
		return res, err
	}
	defer pool.Free()
	if c.KV == tensor.FP8E4M3 {
		// Random values in [-1, 1) land inside e4m3's range at scale 1/64.
		pool.SetScales(0, 1.0/64, 1.0/64)
	}
	if err := fillKV(rt, cuda.DevicePtr(pool.Device.K[0]), numPages*c.Page*spec.KWidth(), c.KV, 1); err != nil {
		return res, err
	}
	if !sh.MLA {
		if err := fillKV(rt, cuda.DevicePtr(pool.Device.V[0]), numPages*c.Page*spec.VWidth(), c.KV, 2); err != nil {
			return res, err
		}
	}
	cache := &kvcache.Cache{Alloc: alloc, Table: kvcache.NewReqToToken(c.Reqs, c.Ctx), Pool: pool}
	batch := &forward.Batch{Mode: c.Mode, KV: cache}
	for range c.Reqs {
		seq, _ := cache.NewSeq()
		if ok, err := cache.Grow(seq, c.Ctx); !ok || err != nil {
			return res, fmt.Errorf("KV pool too small for %s: %v", c.Name(), err)
		}
		batch.ReqRows = append(batch.ReqRows, int32(seq.Row))
		batch.PrefixLens = append(batch.PrefixLens, int32(c.Ctx-c.NewToks))
		batch.ExtendLens = append(batch.ExtendLens, int32(c.NewToks))
		for i := c.Ctx - c.NewToks; i < c.Ctx; i++ {
			batch.InputIDs = append(batch.InputIDs, 0)
			batch.Positions = append(batch.Positions, int32(i))
			batch.OutSlots = append(batch.OutSlots, cache.Table.Row(seq.Row)[i])
		}
	}
	if err := batch.Finalize(); err != nil {
		return res, err
	}
	nt := batch.NumTokens()
	layer := &attention.Layer{NumHeads: sh.Heads, NumKVHeads: sh.KVHeads, HeadDim: sh.HeadDim, HeadDimV: sh.DV(),
		Scale: float32(1 / math.Sqrt(float64(sh.HeadDim))), MLA: sh.MLA}
	var bufs []cuda.Buffer
	defer func() {
		for _, b := range bufs {
			rt.Free(b)
		}
	}()
	act := func(cols int) (tensor.T, error) {
		buf, err := rt.Alloc(nt * cols * elemSize(c.Act))
		if err != nil {
			return tensor.T{}, err
		}
		bufs = append(bufs, buf)
		err = rt.Kernels.FillSynthetic(rt.Stream, buf.Ptr, 0, nt*cols, c.Act, tensor.Synthetic{Seed: uint64(cols), Scale: 1})
		return tensor.Device{Shape: []int{nt, cols}, Ptr: uintptr(buf.Ptr), DType: c.Act}.T(), err
	}
	q, err := act(sh.Heads * sh.HeadDim)
	if err != nil {
		return res, err
	}
	k, err := act(sh.KVHeads * sh.HeadDim)
	if err != nil {
		return res, err
	}
	var v tensor.T // none for MLA
	if !sh.MLA {
		if v, err = act(sh.KVHeads * sh.HeadDim); err != nil {
			return res, err
		}
	}
	be, err := e.New(attention.Options{Device: "cuda", KV: cache, Layers: []attention.Layer{*layer}, Runtime: dev})
	if err != nil {
		return res, err
	}
	if cl, ok := be.(interface{ Close() error }); ok {
		defer cl.Close()
	}
	if err := be.Plan(batch); err != nil {
		return res, err
	}
	step := func() error {
		out, err := attention.Run(be, q, k, v, layer, batch)
		rt.FreeTensor(out)
		return err
	}
	elapsed, err := timeOnDevice(rt, max(iters, 1), step)
	if err != nil {
		return res, err
	}
	res.Seconds = elapsed.Seconds()
	if c.Mode == forward.Decode {
		bytes := float64(c.Reqs) * float64(c.Ctx) * float64((spec.KWidth()+spec.VWidth())*elemSize(spec.DType))
		res.GBps = bytes / res.Seconds / 1e9
	} else {
		flops := 2 * float64(c.NewToks) * float64(c.NewToks) / 2 * float64(sh.Heads*(sh.HeadDim+sh.DV())) * float64(c.Reqs)
		res.GFLOPs = flops / res.Seconds / 1e9
	}
	return res, nil
}

// fillKV writes n random values in [-1, 1) in dt; fp8 gets the bytes of
// n/2 random bf16 values (any bytes: the timing does not depend on them).
func fillKV(rt *gpu.Runtime, dst cuda.DevicePtr, n int, dt tensor.DType, seed uint64) error {
	if dt == tensor.FP8E4M3 {
		return rt.Kernels.FillSynthetic(rt.Stream, dst, 0, n/2, tensor.BF16, tensor.Synthetic{Seed: seed, Scale: 1})
	}
	return rt.Kernels.FillSynthetic(rt.Stream, dst, 0, n, dt, tensor.Synthetic{Seed: seed, Scale: 1})
}

func elemSize(dt tensor.DType) int {
	n, _ := dt.RowBytes(1)
	return n
}

// timeOnDevice runs fn twice to warm up, then iters times between two
// events on the runtime's stream, and returns the time of one run.
func timeOnDevice(rt *gpu.Runtime, iters int, fn func() error) (time.Duration, error) {
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
		if err := rt.Dev.Record(start, rt.Stream); err != nil {
			return err
		}
		for range iters {
			if err := fn(); err != nil {
				return err
			}
		}
		if err := errors.Join(rt.Dev.Record(end, rt.Stream), rt.Dev.EventSync(end)); err != nil {
			return err
		}
		total, err := rt.Dev.Elapsed(start, end)
		elapsed = total / time.Duration(iters)
		return err
	})
	return elapsed, err
}
