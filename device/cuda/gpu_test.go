package cuda

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/tensor"
)

func TestGPUDeviceInfo(t *testing.T) {
	dev := needDevice(t)
	info := dev.Info
	t.Logf("device: %v", info)
	if info.Arch() < 70 || info.SMs <= 0 || info.TotalMem == 0 || info.Name == "" {
		t.Errorf("implausible info %+v", info)
	}
	free, total, err := dev.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memory: %.1f GiB free of %.1f GiB; libcuda: %s", float64(free)/(1<<30), float64(total)/(1<<30), driverPath)
	if free == 0 || free > total {
		t.Errorf("free %d of total %d", free, total)
	}
	if nv, err := LoadNVRTC(); err == nil {
		target, _ := nv.TargetFor(info.Arch())
		t.Logf("NVRTC %s at %s, archs %v, target %s", nv.Version(), nv.Path, nv.SupportedArchs(), target.Option())
	}
	if gpu.kernels != nil {
		t.Logf("kernels: %d compiled, %d from cache, in %v", gpu.kernels.Compiled, gpu.kernels.CacheHits, gpu.kernels.LoadTime)
	}
	if gpu.lt != nil {
		t.Logf("cuBLASLt %d", gpu.lt.Version())
	}
}

func TestGPUCopies(t *testing.T) {
	dev := needDevice(t)
	const n = 1 << 20
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	a, b := alloc(t, dev, n*4), alloc(t, dev, n*4)
	if err := CopyHtoD(dev, a, src); err != nil {
		t.Fatal(err)
	}
	if err := dev.CopyDtoD(b, a, n*4); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := CopyDtoH(dev, got, b); err != nil {
		t.Fatal(err)
	}
	compare(t, "sync round trip", got, src, 0, 0)

	// Async through pinned memory, with a memset in between.
	pinned, err := dev.HostAlloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.HostFree(pinned)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.DestroyStream(s)
	if err := dev.MemsetAsync(b, 0, n*4, s); err != nil {
		t.Fatal(err)
	}
	if err := dev.CopyDtoDAsync(b, a, n*2, s); err != nil { // first half only
		t.Fatal(err)
	}
	if err := CopyDtoHAsync(dev, pinned, b, s); err != nil {
		t.Fatal(err)
	}
	if err := dev.StreamSync(s); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 4099 {
		v := float32frombytes(pinned[i*4:])
		want := float32(0)
		if i < n/2 {
			want = float32(i)
		}
		if v != want {
			t.Fatalf("async result[%d] = %v, want %v", i, v, want)
		}
	}
	for i := range pinned {
		pinned[i] = 0
	}
	if err := CopyHtoDAsync(dev, a, pinned, s); err != nil {
		t.Fatal(err)
	}
	dev.StreamSync(s)
	if err := CopyDtoH(dev, got, a); err != nil {
		t.Fatal(err)
	}
	if got[n-1] != 0 {
		t.Error("async host-to-device copy did not land")
	}
}

func float32frombytes(b []byte) float32 {
	var out [1]float32
	copy(unsafeBytes(out[:]), b[:4])
	return out[0]
}

func TestGPUConcurrentCallers(t *testing.T) {
	dev := needDevice(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 20 {
				vals := randn(rng, 1000+rng.IntN(5000), 1)
				buf, err := dev.Mem.Alloc(len(vals) * 4)
				if err != nil {
					t.Error(err)
					return
				}
				got := make([]float32, len(vals))
				if err := CopyHtoD(dev, buf.Ptr, vals); err != nil {
					t.Error(err)
				}
				if err := CopyDtoH(dev, got, buf.Ptr); err != nil {
					t.Error(err)
				}
				for i := range vals {
					if got[i] != vals[i] {
						t.Errorf("goroutine %d: value %d corrupted", g, i)
						break
					}
				}
				dev.Mem.Free(buf)
			}
		}()
	}
	wg.Wait()
}

func TestGPUDoPanicAndNesting(t *testing.T) {
	dev := needDevice(t)
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "boom") {
				t.Errorf("panic not re-raised in the caller: %v", p)
			}
		}()
		dev.Do(func() error { panic("boom") })
	}()
	// The device thread survives, and methods nest inside Do.
	err := dev.Do(func() error {
		p, err := dev.Malloc(4096)
		if err != nil {
			return err
		}
		return dev.Free(p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGPUAllocatorReuse(t *testing.T) {
	dev := needDevice(t)
	sizes := []int{1 << 10, 1 << 20, 5 << 20, 64 << 20}
	step := func() []DevicePtr {
		var ptrs []DevicePtr
		var bufs []Buffer
		for _, n := range sizes {
			b, err := dev.Mem.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			bufs = append(bufs, b)
			ptrs = append(ptrs, b.Ptr)
		}
		for _, b := range bufs {
			dev.Mem.Free(b)
		}
		return ptrs
	}
	first := step()
	before := dev.Mem.Stats()
	for range 5 {
		again := step()
		for i := range again {
			if again[i] != first[i] {
				t.Errorf("size %d: block %#x not reused (got %#x)", sizes[i], first[i], again[i])
			}
		}
	}
	after := dev.Mem.Stats()
	if after.DeviceAllocs != before.DeviceAllocs {
		t.Errorf("steady state made %d cuMemAlloc calls", after.DeviceAllocs-before.DeviceAllocs)
	}
	t.Logf("allocator: %+v", after)
}

func TestGPUEventsTiming(t *testing.T) {
	dev, lt := needLt(t)
	start, err := dev.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := dev.NewEvent(true)
	defer dev.DestroyEvent(start)
	defer dev.DestroyEvent(end)
	const n = 2048
	g := Gemm{M: n, N: n, K: n, TransB: true, DType: BF16, OutDType: BF16}
	a, b, d := alloc(t, dev, n*n*2), alloc(t, dev, n*n*2), alloc(t, dev, n*n*2)
	dev.Record(start, dev.Stream)
	for range 10 {
		if err := lt.Matmul(dev.Stream, g, a, b, d, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	dev.Record(end, dev.Stream)
	if err := dev.EventSync(end); err != nil {
		t.Fatal(err)
	}
	el, err := dev.Elapsed(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if el <= 0 || el > 10*time.Second {
		t.Errorf("elapsed %v", el)
	}
	t.Logf("10 bf16 GEMMs of %d³: %v (%.0f TFLOP/s)", n, el, 10*g.FLOPs()/el.Seconds()/1e12)
}

// TestGPUKernelCache: a second load with the same cache compiles nothing.
func TestGPUKernelCache(t *testing.T) {
	dev, _ := needKernels(t)
	srcs, _ := KernelSources()
	k2, err := LoadKernels(dev, gpu.nv, &KernelCache{Dir: gpu.cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Unload()
	if k2.Compiled != 0 || k2.CacheHits != len(srcs) {
		t.Errorf("second load: %d compiled, %d hits; want 0, %d", k2.Compiled, k2.CacheHits, len(srcs))
	}
	t.Logf("cold load %v, warm load %v", gpu.kernels.LoadTime, k2.LoadTime)
	if _, err := k2.Function(nameRMSNorm(BF16)); err != nil {
		t.Error(err)
	}
	// A name the declaration does not have (rmsnorm has no q8 instance).
	if _, err := k2.Function(nameRMSNorm(tensor.Q8_0)); err == nil {
		t.Error("a kernel that does not exist was found")
	}
}

// miniMLP is a small graph-able sequence: norm, projection, activation, argmax.
//
//	x [T, H] → rmsnorm → y [T, H] → y·Wᵀ → gu [T, 2I] → silu·mul → a [T, I] → argmax → idx [T]
type miniMLP struct {
	T, H, I           int
	x, w, norm, y, gu DevicePtr
	a, idx            DevicePtr
	k                 *Kernels
	lt                *BlasLt
}

func (m *miniMLP) enqueue(s Stream) error {
	if err := m.k.RMSNorm(s, RMSNormParams{Out: m.y, X: m.x, Weight: m.norm, NTokens: m.T, Hidden: m.H, Eps: 1e-5, DType: BF16}); err != nil {
		return err
	}
	if err := m.lt.Matmul(s, Gemm{M: m.T, N: 2 * m.I, K: m.H, TransB: true, DType: BF16, OutDType: BF16}, m.y, m.w, m.gu, 1, 0); err != nil {
		return err
	}
	if err := m.k.GatedAct(s, SiLU, m.a, m.gu, m.gu.Add(m.I*2), m.T, m.I, 2*m.I, BF16); err != nil {
		return err
	}
	return m.k.Argmax(s, m.idx, m.a, m.T, m.I, 0, BF16)
}

func newMiniMLP(t testing.TB, dev *Device, k *Kernels, lt *BlasLt, T, H, I int) *miniMLP {
	rng := rand.New(rand.NewPCG(10, 10))
	m := &miniMLP{T: T, H: H, I: I, k: k, lt: lt}
	m.x = upload(t, dev, randn(rng, T*H, 1), BF16)
	m.norm = upload(t, dev, randn(rng, H, 1), BF16)
	m.w = upload(t, dev, randn(rng, 2*I*H, 0.05), BF16)
	m.y = alloc(t, dev, T*H*2)
	m.gu = alloc(t, dev, T*2*I*2)
	m.a = alloc(t, dev, T*I*2)
	m.idx = alloc(t, dev, T*4)
	return m
}

func TestGPUGraphReplay(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	m := newMiniMLP(t, dev, k, lt, 4, 512, 1024)
	// Warm up eagerly: plans and function lookups happen outside the capture.
	if err := m.enqueue(dev.Stream); err != nil {
		t.Fatal(err)
	}
	sync0(t, dev)
	g, err := dev.Capture(dev.Stream, func() error { return m.enqueue(dev.Stream) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	if g.Nodes < 4 {
		t.Errorf("graph has %d nodes, want at least 4", g.Nodes)
	}
	t.Logf("captured %d nodes", g.Nodes)
	rng := rand.New(rand.NewPCG(11, 11))
	for iter := range 3 {
		// New inputs go into the captured buffer.
		x := randn(rng, m.T*m.H, 1)
		if err := CopyHtoD(dev, m.x, encode16(x, BF16)); err != nil {
			t.Fatal(err)
		}
		if err := m.enqueue(dev.Stream); err != nil {
			t.Fatal(err)
		}
		eagerA := download(t, dev, m.a, m.T*m.I, BF16)
		eagerIdx := make([]int32, m.T)
		CopyDtoH(dev, eagerIdx, m.idx)
		if err := dev.MemsetAsync(m.a, 0, m.T*m.I*2, dev.Stream); err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(dev.Stream); err != nil {
			t.Fatal(err)
		}
		replayA := download(t, dev, m.a, m.T*m.I, BF16)
		replayIdx := make([]int32, m.T)
		CopyDtoH(dev, replayIdx, m.idx)
		compare(t, fmt.Sprintf("iteration %d activations", iter), replayA, eagerA, 0, 0)
		for i := range replayIdx {
			if replayIdx[i] != eagerIdx[i] {
				t.Errorf("iteration %d: token %d argmax %d after replay, %d eager", iter, i, replayIdx[i], eagerIdx[i])
			}
		}
	}
}

func TestGPUCaptureRejectsAllocation(t *testing.T) {
	dev := needDevice(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.DestroyStream(s)
	_, err = dev.Capture(s, func() error {
		p, err := dev.Malloc(1 << 20)
		if err == nil {
			dev.Free(p)
		}
		return err
	})
	if err == nil {
		t.Log("cuMemAlloc during capture was allowed by this driver")
	} else {
		t.Logf("capture with an allocation failed as expected: %v", err)
	}
	// The stream must be usable afterwards.
	if err := dev.StreamSync(s); err != nil {
		t.Errorf("stream after failed capture: %v", err)
	}
}
