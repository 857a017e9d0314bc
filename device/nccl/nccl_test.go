package nccl

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

// TestEnvDefaults: NVLink multicast is off and peers connect at init
// (NCCL_RUNTIME_CONNECT=0, which the decode graphs' captures need) unless
// the user chose otherwise.
func TestEnvDefaults(t *testing.T) {
	const nvls, connect = "NCCL_NVLS_ENABLE", "NCCL_RUNTIME_CONNECT"
	for _, tc := range []struct {
		env     map[string]string
		wantSet []string
		want    map[string]string
	}{
		{map[string]string{}, []string{nvls, connect}, map[string]string{nvls: "0", connect: "0"}},
		{map[string]string{nvls: "1"}, []string{connect}, map[string]string{nvls: "1", connect: "0"}},
		{map[string]string{nvls: "", connect: "1"}, nil, map[string]string{nvls: "", connect: "1"}},
	} {
		env := tc.env
		set, err := setDefaults(func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			func(k, v string) error { env[k] = v; return nil })
		if err != nil || !slices.Equal(set, tc.wantSet) || !maps.Equal(env, tc.want) {
			t.Errorf("set %v err %v, env %v; want set %v, env %v", set, err, env, tc.wantSet, tc.want)
		}
	}
}

// TestUniqueIDLayout: ncclUniqueId is 128 bytes, passed by value.
func TestUniqueIDLayout(t *testing.T) {
	if s := unsafe.Sizeof(UniqueID{}); s != 128 {
		t.Fatalf("UniqueID is %d bytes, NCCL's is 128", s)
	}
}

// TestDTypes: NCCL takes device F32 and BF16 buffers only.
func TestDTypes(t *testing.T) {
	for _, tc := range []struct {
		b    parallel.Buffer
		want int32
		err  string
	}{
		{parallel.DeviceBuffer(1<<20, tensor.F32, 4), typeFloat32, ""},
		{parallel.DeviceBuffer(1<<20, tensor.BF16, 4), typeBfloat16, ""},
		{parallel.DeviceBuffer(1<<20, tensor.F16, 4), 0, "F32 or BF16"},
		{parallel.HostF32(make([]float32, 4)), 0, "device buffers"},
	} {
		got, err := dtype(tc.b)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want %q", tc.b.DType, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %d, %v; want %d", tc.b.DType, got, err, tc.want)
		}
	}
}

// openOrSkip opens NCCL, or skips with one line when it is absent.
func openOrSkip(t *testing.T) *Lib {
	t.Helper()
	l, err := Open()
	if errors.Is(err, cuda.ErrNoLibrary) {
		t.Skip("no NCCL: " + cuda.LibNCCL + " not found")
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestOpenMissing: where NCCL is absent, Open says which library, where
// it looked and how to install it.
func TestOpenMissing(t *testing.T) {
	_, err := Open()
	if err == nil {
		t.Skip("NCCL is installed here")
	}
	for _, want := range []string{cuda.LibNCCL + " not found", "searched the loader path", "install NCCL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestCollectivesGPU: all-reduce (F32, BF16), all-gather and broadcast
// over every visible GPU, one rank per GPU.
func TestCollectivesGPU(t *testing.T) {
	l := openOrSkip(t)
	if err := cuda.DriverAvailable(); err != nil {
		t.Skip(err.Error())
	}
	n, err := cuda.DeviceCount()
	if err != nil || n < 2 {
		t.Skipf("needs 2 GPUs, %d visible (%v)", n, err)
	}
	g, err := OpenGroup(l, n)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const count = 1000
	f32 := make([]cuda.DevicePtr, n)
	bf := make([]cuda.DevicePtr, n)
	all := make([]cuda.DevicePtr, n)
	for r, d := range g.Devices {
		vals := make([]float32, count)
		bits := make([]uint16, count)
		for i := range vals {
			vals[i] = float32(r + i)
			bits[i] = tensor.F32ToBF16(float32(r + 1))
		}
		if f32[r], err = d.Malloc(4 * count); err != nil {
			t.Fatal(err)
		}
		if bf[r], err = d.Malloc(2 * count); err != nil {
			t.Fatal(err)
		}
		if all[r], err = d.Malloc(4 * count * n); err != nil {
			t.Fatal(err)
		}
		if err := cuda.CopyHtoD(d, f32[r], vals); err != nil {
			t.Fatal(err)
		}
		if err := cuda.CopyHtoD(d, bf[r], bits); err != nil {
			t.Fatal(err)
		}
	}
	err = g.Each(func(r int, c *Comm) error {
		if err := c.AllGather(parallel.DeviceBuffer(uintptr(all[r]), tensor.F32, count*n), parallel.DeviceBuffer(uintptr(f32[r]), tensor.F32, count)); err != nil {
			return err
		}
		if err := c.AllReduceSum(parallel.DeviceBuffer(uintptr(f32[r]), tensor.F32, count)); err != nil {
			return err
		}
		if err := c.AllReduceSum(parallel.DeviceBuffer(uintptr(bf[r]), tensor.BF16, count)); err != nil {
			return err
		}
		return g.Devices[r].StreamSync(c.Stream)
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, d := range g.Devices {
		vals := make([]float32, count)
		bits := make([]uint16, count)
		gathered := make([]float32, count*n)
		if err := cuda.CopyDtoH(d, vals, f32[r]); err != nil {
			t.Fatal(err)
		}
		if err := cuda.CopyDtoH(d, bits, bf[r]); err != nil {
			t.Fatal(err)
		}
		if err := cuda.CopyDtoH(d, gathered, all[r]); err != nil {
			t.Fatal(err)
		}
		for i := range count {
			if want := float32(n*i + n*(n-1)/2); vals[i] != want {
				t.Fatalf("rank %d all-reduce[%d] = %v, want %v", r, i, vals[i], want)
			}
			if got, want := tensor.BF16ToF32(bits[i]), float32(n*(n+1)/2); got != want {
				t.Fatalf("rank %d bf16 all-reduce[%d] = %v, want %v", r, i, got, want)
			}
			for q := range n {
				if got := gathered[q*count+i]; got != float32(q+i) {
					t.Fatalf("rank %d all-gather[%d][%d] = %v, want %v", r, q, i, got, q+i)
				}
			}
		}
	}
}
