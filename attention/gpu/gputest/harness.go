// Package gputest runs the attention conformance battery on the GPU. It is
// a package of its own (not part of attention/gpu) because it imports
// attention/conformance, whose tests import every backend, attention/gpu
// included.
package gputest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/conformance"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/device/cudadev"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// The device conformance harness: the scenarios of attention/conformance,
// run through a CUDA backend with q/k/v uploaded as device tensors and a
// device KV pool, compared with a float64 reference. conformance exports
// only Scenarios, so its schedule, tree masks and reference are restated
// here (kept in step by hand: same schedule, same visibility rule).

var testRT struct {
	once sync.Once
	dev  *cudadev.Runtime
	skip string
	err  error
}

// TestDevice opens GPU 0 once per test binary as the engine does
// (device/cudadev: kernels through the on-disk NVRTC cache), the runtime
// attention.Options carries. It skips the test with one line when the
// driver cannot be opened.
func TestDevice(t testing.TB) *cudadev.Runtime {
	t.Helper()
	testRT.once.Do(func() {
		if err := cuda.DriverAvailable(); err != nil {
			testRT.skip = "libcuda.so.1 cannot be opened: " + err.Error()
			return
		}
		if testRT.dev, testRT.err = cudadev.Open(device.OpenOptions{}); testRT.err != nil {
			return
		}
		k := testRT.dev.AttentionRuntime().Kernels
		fmt.Fprintf(os.Stderr, "gpu: %v; kernels: %d compiled, %d cached, %v\n", testRT.dev.AttentionRuntime().Dev.Info, k.Compiled, k.CacheHits, k.LoadTime)
	})
	if testRT.skip != "" {
		t.Skip(testRT.skip)
	}
	if testRT.err != nil {
		t.Fatal(testRT.err)
	}
	return testRT.dev
}

// TestRuntime is TestDevice's attention runtime.
func TestRuntime(t testing.TB) *gpu.Runtime {
	t.Helper()
	return TestDevice(t).AttentionRuntime()
}

// RunCUDA runs the conformance battery against a CUDA entry, once with
// float32 activations (tolerance 1e-4 relative with a float32 KV cache, 2e-2
// with a bf16 or fp8 one, which the fused backends read on the tensor cores;
// the reference quantises K/V as the pool stores them) and once with bf16
// activations (the tensor-core path; the reference takes the bf16-rounded
// inputs, tolerance 2e-2 for the bf16 output and probabilities). Scenarios
// needing a capability the entry does not claim are skipped and named.
//
// A library backend that is not offered here (its library does not load)
// is skipped with the reason. An entry that stores no float32 KV but bf16
// runs the float32-KV scenarios over a bf16 cache, so that its page
// sizes, GQA ratios, head dims and schedules are all exercised.
func RunCUDA(t *testing.T, entry attention.Entry) {
	rt := TestRuntime(t)
	if err := entry.Unavailable(); err != nil {
		t.Skipf("%s is not offered here: %v", entry.Name, err)
	}
	if entry.Name == gpu.CudnnEntry.Name {
		t.Log(cuda.CudnnLoaded())
	}
	for _, act := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(act.String(), func(t *testing.T) {
			for _, s := range conformance.Scenarios() {
				s = asStored(s, entry.Caps)
				t.Run(s.Name, func(t *testing.T) {
					if why := unmet(s, entry.Caps); why != "" {
						t.Skipf("%s does not claim %s", entry.Name, why)
					}
					runScenario(t, rt, entry, s, act)
				})
			}
		})
	}
}

// asStored moves a float32-KV scenario to a bf16 cache for an entry that
// stores bf16 but not float32.
func asStored(s conformance.Scenario, c attention.Caps) conformance.Scenario {
	if s.DType == tensor.F32 && !s.Encode && !slices.Contains(c.KVDTypes, tensor.F32) && slices.Contains(c.KVDTypes, tensor.BF16) {
		s.DType = tensor.BF16
		s.Name += "/kv_bf16"
	}
	return s
}

// unmet is conformance's capability check plus the device.
func unmet(s conformance.Scenario, c attention.Caps) string {
	if !slices.Contains(c.Devices, "cuda") {
		return "the cuda device"
	}
	return s.Unmet(c)
}

type seqState struct {
	conformance.History // per token, as the device sees them (K, V as stored)
	seq                 *kvcache.Seq
}

const (
	fp8KScale, fp8VScale = 0.05, 0.03
)

func runScenario(t *testing.T, rt *gpu.Runtime, entry attention.Entry, s conformance.Scenario, act tensor.DType) {
	rng := rand.New(rand.NewPCG(uint64(len(s.Name)), uint64(s.HeadDim*131+s.PageSize)))
	layer := attention.Layer{Index: 1, NumHeads: s.Heads, NumKVHeads: s.KVHeads, HeadDim: s.HeadDim, HeadDimV: s.HeadDimV,
		Scale: float32(1 / math.Sqrt(float64(s.HeadDim))), SlidingWindow: s.Window, LogitSoftcap: s.Softcap, MLA: s.MLA}
	if s.Sinks {
		layer.Sinks = conformance.DrawSinks(rng, s.Heads)
	}
	var cache *kvcache.Cache
	if !s.Encode {
		spec := kvcache.Spec{NumLayers: 2, NumKVHeads: s.KVHeads, HeadDim: s.HeadDim, HeadDimV: s.HeadDimV, SharedV: s.MLA, DType: s.DType}
		var err error
		if cache, err = kvcache.NewCache(spec, s.PageSize, 1024, 4, 512); err != nil {
			t.Fatal(err)
		}
		pool, err := kvcache.NewDevicePool(spec, cache.Alloc.NumPages()*s.PageSize, s.PageSize, rt.PoolMemory())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Free() })
		cache.Pool = pool
		if s.DType == tensor.FP8E4M3 {
			pool.SetScales(0, fp8KScale, fp8VScale)
			pool.SetScales(1, fp8KScale, fp8VScale)
		}
	}
	// Two layers per forward with the same inputs: a backend must plan once
	// and serve every layer from that plan.
	layer0 := layer
	layer0.Index = 0
	be, err := entry.New(attention.Options{Device: "cuda", KV: cache, Layers: []attention.Layer{layer0, layer}, Runtime: TestDevice(t)})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := be.(interface{ Close() error }); ok {
		t.Cleanup(func() { c.Close() })
	}
	reqs := make([]*seqState, 3)
	for i := range reqs {
		reqs[i] = &seqState{}
		if cache != nil {
			reqs[i].seq, _ = cache.NewSeq()
		}
	}
	qw, kw, vw := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.KVHeads*s.HeadDimV
	if s.MLA {
		vw = 0
	}
	tol := 1e-4
	if act != tensor.F32 || s.DType == tensor.BF16 || s.DType == tensor.FP8E4M3 {
		// bf16 activations, or a KV cache at bf16 precision or below, which
		// the fused backends attend on the tensor cores with bf16 queries
		// and probabilities (gpu.Fused.attendHalf).
		tol = 2e-2
	}
	for si, st := range conformance.Schedule(s) {
		b := &forward.Batch{Mode: st.Mode, KV: cache}
		var qs, ks, vs []float32
		var members []int
		var masks [][][]bool
		for r, n := range st.Lens {
			if n == 0 {
				continue
			}
			sq := reqs[r]
			prefix := len(sq.K)
			members = append(members, r)
			b.ReqRows = append(b.ReqRows, 0)
			if cache != nil {
				if ok, err := cache.Grow(sq.seq, prefix+n); !ok || err != nil {
					t.Fatalf("grow: %v %v", ok, err)
				}
				b.ReqRows[len(b.ReqRows)-1] = int32(sq.seq.Row)
			}
			b.PrefixLens = append(b.PrefixLens, int32(prefix))
			b.ExtendLens = append(b.ExtendLens, int32(n))
			for i := prefix; i < prefix+n; i++ {
				b.InputIDs = append(b.InputIDs, 0)
				b.Positions = append(b.Positions, int32(i))
				if cache != nil {
					b.OutSlots = append(b.OutSlots, cache.Table.Row(sq.seq.Row)[i])
				}
				q, k, v := randRow(rng, qw, act), randRow(rng, kw, act), randRow(rng, vw, act)
				qs, ks, vs = append(qs, q...), append(ks, k...), append(vs, v...)
				sq.Q = append(sq.Q, conformance.Stored(q, tensor.F32, 1))
				kdt := s.DType
				if s.Encode {
					kdt = tensor.F32
				}
				sq.K = append(sq.K, conformance.Stored(k, kdt, fp8KScale))
				sq.V = append(sq.V, conformance.Stored(v, kdt, fp8VScale))
			}
			if st.Mode == forward.TargetVerify {
				masks = append(masks, conformance.TreeMask(rng, prefix, n))
			}
			if sp, ok := s.Span(si, r, len(members)-1, prefix); ok {
				b.Spans = append(b.Spans, sp)
			}
		}
		conformance.AttachMasks(b, masks)
		if cache == nil {
			b.PrefixLens = make([]int32, len(members))
			b.OutSlots = make([]int32, len(b.InputIDs))
		}
		if err := b.Finalize(); err != nil {
			t.Fatalf("step %d: %v", si, err)
		}
		nt := b.NumTokens()
		qT, kT := upload(t, rt, qs, act, nt, qw), upload(t, rt, ks, act, nt, kw)
		var vT tensor.T
		if !s.MLA {
			vT = upload(t, rt, vs, act, nt, vw)
		}
		if err := be.Plan(b); err != nil {
			t.Fatalf("step %d: plan: %v", si, err)
		}
		out0, err := attention.Run(be, qT, kT, vT, &layer0, b)
		if err != nil {
			t.Fatalf("step %d (%v), layer 0: %v", si, st.Mode, err)
		}
		out, err := attention.Run(be, qT, kT, vT, &layer, b)
		if err != nil {
			t.Fatalf("step %d (%v): %v", si, st.Mode, err)
		}
		got0, got := download(t, rt, out0), download(t, rt, out)
		for i := range got {
			if got[i] != got0[i] {
				t.Fatalf("step %d (%v): layers 0 and 1 got the same inputs but differ at %d: %v vs %v", si, st.Mode, i, got0[i], got[i])
			}
		}
		if len(got) != nt*s.Heads*s.HeadDimV {
			t.Fatalf("step %d: output has %d values, want [%d, %d]", si, len(got), nt, s.Heads*s.HeadDimV)
		}
		cols := s.Heads * s.HeadDimV
		for mi, r := range members {
			sq := reqs[r]
			prefix, n := int(b.PrefixLens[mi]), int(b.ExtendLens[mi])
			var spans [][2]int
			for _, sp := range b.Spans {
				if int(sp.Req) == mi {
					spans = append(spans, [2]int{int(sp.Start), int(sp.End)})
				}
			}
			for t0 := range n {
				var maskRow []bool
				if masks != nil {
					maskRow = masks[mi][t0]
				}
				want := conformance.Reference(&sq.History, prefix+t0, prefix+n, layer, s.Encode, spans, maskRow)
				row := int(b.ExtendStarts[mi]) + t0
				for x, w := range want {
					g := got[row*cols+x]
					if d := math.Abs(float64(g) - w); d > tol*max(1, math.Abs(w)) || math.IsNaN(float64(g)) {
						t.Fatalf("step %d (%v), request %d, token %d, value %d: got %.7g, want %.7g", si, st.Mode, r, prefix+t0, x, g, w)
					}
				}
			}
		}
	}
}

// upload copies rows of values to a new device tensor in dt, freed with the test.
func upload(t *testing.T, rt *gpu.Runtime, vals []float32, dt tensor.DType, rows, cols int) tensor.T {
	t.Helper()
	raw := make([]byte, len(vals)*elemBytes(dt))
	tensor.EncodeInto(dt, vals, raw)
	buf, err := rt.Alloc(len(raw))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Free(buf) })
	if err := cuda.CopyHtoD(rt.Dev, buf.Ptr, raw); err != nil {
		t.Fatal(err)
	}
	return tensor.Device{Shape: []int{rows, cols}, Ptr: uintptr(buf.Ptr), DType: dt}.T()
}

// download copies a device tensor back as float32 and frees it.
func download(t *testing.T, rt *gpu.Runtime, x tensor.T) []float32 {
	t.Helper()
	defer rt.FreeTensor(x)
	n := x.NumElements()
	raw := make([]byte, n*elemBytes(x.DType))
	if err := cuda.CopyDtoH(rt.Dev, raw, cuda.DevicePtr(x.DevPtr())); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	tensor.DecodeInto(x.DType, raw, out)
	return out
}

// randRow draws normal values, rounded to the activation dtype so that
// the reference sees exactly what the device gets.
func randRow(rng *rand.Rand, n int, act tensor.DType) []float32 {
	out := make([]float32, n)
	for i := range out {
		v := float32(rng.NormFloat64())
		switch act {
		case tensor.BF16:
			v = tensor.BF16ToF32(tensor.F32ToBF16(v))
		case tensor.F16:
			v = tensor.F16ToF32(tensor.F32ToF16(v))
		}
		out[i] = v
	}
	return out
}

func elemBytes(dt tensor.DType) int {
	switch dt {
	case tensor.F32:
		return 4
	case tensor.FP8E4M3:
		return 1
	}
	return 2
}
