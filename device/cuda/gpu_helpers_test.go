package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"unsafe"

	"github.com/gosling-ai/gosling/tensor"
)

// The GPU tests share one device, kernel set and BLAS handles, opened on
// first use. Without a driver every GPU test skips with one line.
var gpu struct {
	once     sync.Once
	dev      *Device
	nv       *NVRTC
	kernels  *Kernels
	lt       *BlasLt
	blas     *Blas
	cacheDir string
	devErr   error
	nvErr    error
	ltErr    error
	blasErr  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if gpu.dev != nil {
		if gpu.lt != nil {
			gpu.lt.Close()
		}
		if gpu.blas != nil {
			gpu.blas.Close()
		}
		if gpu.kernels != nil {
			gpu.kernels.Unload()
		}
		if err := gpu.dev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close device:", err)
			code = 1
		}
	}
	if gpu.cacheDir != "" {
		os.RemoveAll(gpu.cacheDir)
	}
	os.Exit(code)
}

func openGPU() {
	gpu.once.Do(func() {
		if err := DriverAvailable(); err != nil {
			gpu.devErr = err
			return
		}
		gpu.dev, gpu.devErr = Open(0)
		if gpu.devErr != nil {
			return
		}
		gpu.nv, gpu.nvErr = LoadNVRTC()
		if gpu.nvErr == nil {
			// A fresh cache: the first load exercises NVRTC on every file.
			gpu.cacheDir, gpu.nvErr = os.MkdirTemp("", "gosling-cuda-cache-")
			if gpu.nvErr == nil {
				gpu.kernels, gpu.nvErr = LoadKernels(gpu.dev, gpu.nv, &KernelCache{Dir: gpu.cacheDir})
			}
		}
		gpu.lt, gpu.ltErr = NewBlasLt(gpu.dev)
		gpu.blas, gpu.blasErr = NewBlas(gpu.dev)
	})
}

// needDevice skips the test unless a GPU opens.
func needDevice(t testing.TB) *Device {
	t.Helper()
	openGPU()
	if gpu.devErr != nil {
		t.Skip("libcuda.so.1 not available: " + gpu.devErr.Error())
	}
	return gpu.dev
}

func needKernels(t testing.TB) (*Device, *Kernels) {
	t.Helper()
	dev := needDevice(t)
	if gpu.nvErr != nil {
		t.Fatalf("kernels: %v", gpu.nvErr)
	}
	return dev, gpu.kernels
}

func needLt(t testing.TB) (*Device, *BlasLt) {
	t.Helper()
	dev := needDevice(t)
	if gpu.ltErr != nil {
		t.Fatalf("cuBLASLt: %v", gpu.ltErr)
	}
	return dev, gpu.lt
}

func needBlas(t testing.TB) (*Device, *Blas) {
	t.Helper()
	dev := needDevice(t)
	if gpu.blasErr != nil {
		t.Fatalf("cuBLAS: %v", gpu.blasErr)
	}
	return dev, gpu.blas
}

// alloc takes a buffer from the device allocator for the test's lifetime.
func alloc(t testing.TB, dev *Device, bytes int) DevicePtr {
	t.Helper()
	b, err := dev.Mem.Alloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Mem.Free(b) })
	return b.Ptr
}

// upload copies values to a new device buffer in dtype dt.
func upload(t testing.TB, dev *Device, vals []float32, dt DType) DevicePtr {
	t.Helper()
	p := alloc(t, dev, max(len(vals), 1)*ElemSize(dt))
	var err error
	switch dt {
	case F32:
		err = CopyHtoD(dev, p, vals)
	default:
		err = CopyHtoD(dev, p, encode16(vals, dt))
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func uploadInt32(t testing.TB, dev *Device, vals []int32) DevicePtr {
	t.Helper()
	p := alloc(t, dev, max(len(vals), 1)*4)
	if err := CopyHtoD(dev, p, vals); err != nil {
		t.Fatal(err)
	}
	return p
}

// download reads n values of dtype dt as float32, after the device stream.
func download(t testing.TB, dev *Device, p DevicePtr, n int, dt DType) []float32 {
	t.Helper()
	if dt == F32 {
		out := make([]float32, n)
		if err := CopyDtoH(dev, out, p); err != nil {
			t.Fatal(err)
		}
		return out
	}
	bits := make([]uint16, n)
	if err := CopyDtoH(dev, bits, p); err != nil {
		t.Fatal(err)
	}
	return decode16(bits, dt)
}

func encode16(vals []float32, dt DType) []uint16 {
	out := make([]uint16, len(vals))
	for i, v := range vals {
		if dt == BF16 {
			out[i] = tensor.F32ToBF16(v)
		} else {
			out[i] = tensor.F32ToF16(v)
		}
	}
	return out
}

func decode16(bits []uint16, dt DType) []float32 {
	out := make([]float32, len(bits))
	for i, b := range bits {
		if dt == BF16 {
			out[i] = tensor.BF16ToF32(b)
		} else {
			out[i] = tensor.F16ToF32(b)
		}
	}
	return out
}

// round is v as stored in dtype dt.
func round(v float32, dt DType) float32 {
	switch dt {
	case BF16:
		return tensor.BF16ToF32(tensor.F32ToBF16(v))
	case F16:
		return tensor.F16ToF32(tensor.F32ToF16(v))
	}
	return v
}

func roundAll(vals []float32, dt DType) []float32 {
	out := make([]float32, len(vals))
	for i, v := range vals {
		out[i] = round(v, dt)
	}
	return out
}

func randn(rng *rand.Rand, n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64()) * scale
	}
	return out
}

// tolerance for results stored in dt after float32 arithmetic.
func tolerance(dt DType) (atol, rtol float64) {
	switch dt {
	case BF16:
		return 1e-2, 1.6e-2 // two bf16 ulps
	case F16:
		return 1e-3, 2e-3
	}
	return 1e-5, 1e-5
}

// compare fails the test when |got-want| > atol + rtol·|want| anywhere,
// reporting the first mismatches and the largest error.
func compare(t testing.TB, what string, got, want []float32, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var bad int
	var worst float64
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) && math.IsNaN(g) || g == w {
			continue
		}
		d := math.Abs(g - w)
		worst = max(worst, d)
		if d > atol+rtol*math.Abs(w) || math.IsNaN(d) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off (largest error %.3g)", what, bad, len(got), worst)
	}
}

func sync0(t testing.TB, dev *Device) {
	t.Helper()
	if err := dev.StreamSync(dev.Stream); err != nil {
		t.Fatal(err)
	}
}

func unsafeBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
}
