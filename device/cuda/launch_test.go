package cuda

import (
	"math"
	"strings"
	"testing"
	"unsafe"
)

func TestArgsPacking(t *testing.T) {
	a := new(Args).Ptr(0xdeadbeef00).Int32(-3).Float32(1.5).Int64(1 << 40).Ptr(0)
	if a.Err() != nil || a.Len() != 5 {
		t.Fatalf("len %d err %v", a.Len(), a.Err())
	}
	// kernelParams is an array of pointers, each at its own argument value.
	var scratch [maxKernelArgs]unsafe.Pointer
	params := unsafe.Slice((*unsafe.Pointer)(a.kernelParams(&scratch)), a.Len())
	if got := *(*uint64)(params[0]); got != 0xdeadbeef00 {
		t.Errorf("pointer arg = %#x", got)
	}
	if got := *(*int32)(params[1]); got != -3 {
		t.Errorf("int arg = %d", got)
	}
	if got := *(*float32)(params[2]); got != 1.5 {
		t.Errorf("float arg = %v", got)
	}
	if got := *(*int64)(params[3]); got != 1<<40 {
		t.Errorf("long long arg = %d", got)
	}
	if got := *(*uint64)(params[4]); got != 0 {
		t.Errorf("null pointer arg = %#x", got)
	}
	for i := range a.Len() {
		if params[i] != unsafe.Pointer(&a.slots[i]) {
			t.Errorf("param %d does not point at its own slot", i)
		}
	}
	// A 4-byte argument must not leave stale upper bytes a wider read could see.
	if a.slots[1] != uint64(math.MaxUint32-2) {
		t.Errorf("int slot = %#x", a.slots[1])
	}
	var scratch2 [maxKernelArgs]unsafe.Pointer
	if (*Args)(nil).kernelParams(&scratch2) != nil || new(Args).kernelParams(&scratch2) != nil {
		t.Error("no arguments should pass a NULL kernelParams")
	}
}

func TestArgsErrors(t *testing.T) {
	if err := new(Args).Int32(math.MaxInt32 + 1).Err(); err == nil {
		t.Error("int overflow not reported")
	}
	a := new(Args)
	for range maxKernelArgs + 1 {
		a.Int32(1)
	}
	if a.Err() == nil || a.Len() != maxKernelArgs {
		t.Errorf("too many args: len %d err %v", a.Len(), a.Err())
	}
}

func TestLaunchConfigValidate(t *testing.T) {
	tests := []struct {
		cfg     LaunchConfig
		wantErr string
	}{
		{LaunchConfig{Grid: D1(1), Block: D1(1024)}, ""},
		{LaunchConfig{Grid: Dim3{math.MaxInt32, 65535, 1}, Block: Dim3{32, 32, 1}}, ""},
		{LaunchConfig{Grid: D1(0), Block: D1(32)}, "positive"},
		{LaunchConfig{Grid: D1(1), Block: D1(1025)}, "threads"},
		{LaunchConfig{Grid: Dim3{1, 65536, 1}, Block: D1(32)}, "limit"},
		{LaunchConfig{Grid: D1(1), Block: Dim3{1, 1, 65}}, "threads"},
		{LaunchConfig{Grid: D1(1), Block: D1(32), SharedMem: -1}, "shared"},
	}
	for _, tc := range tests {
		err := tc.cfg.validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.wantErr)
		}
	}
}

func TestLaunchShapes(t *testing.T) {
	for _, w := range []int{1, 31, 32, 33, 1000, 5000} {
		n := rowThreads(w)
		if n%32 != 0 || n < 32 || n > 1024 || (w <= 1024 && n < w) {
			t.Errorf("rowThreads(%d) = %d", w, n)
		}
	}
	for _, n := range []int{0, 1, 255, 256, 1 << 30} {
		if err := flatConfig(n).validate(); err != nil {
			t.Errorf("flatConfig(%d): %v", n, err)
		}
	}
}

// gemvSplitRounds splits Llama-3-8B's 14336 gate/up pair-rows in two on an
// H100's 4224 resident warps (6.8 rounds, not 3.4), and keeps whole rows
// where the rounds are already nearly whole.
func TestGemvSplitRounds(t *testing.T) {
	for _, c := range []struct{ rows, in, warps, want int }{
		{14336, 4096, 4224, 2},
		{28672, 4096, 4224, 1},
		{8192, 2048, 4224, 1},
		{40, 3072, 4224, 2}, // 40 tasks in 4224 warps: more shares waste less
		{64, 256, 4224, 1},  // too short a row to split
	} {
		if got := gemvSplitRounds(c.rows, c.in, c.warps); got != c.want {
			t.Errorf("gemvSplitRounds(%d, %d, %d) = %d, want %d", c.rows, c.in, c.warps, got, c.want)
		}
	}
}

// gemvTileSplit, Llama-3-8B's FP8 tiles of 8 rows on an H100's 4224
// resident warps: gate/up's 1792 tile pairs in two shares (one round of
// 3584 warps, not 1.7 of 7168), q/k/v's 768 tiles in four, o's and
// down's 512 in eight (one round of 4096), and no share of fewer than
// 512 columns.
func TestGemvTileSplit(t *testing.T) {
	for _, c := range []struct{ units, in, warps, want int }{
		{1792, 4096, 4224, 2},
		{768, 4096, 4224, 4},
		{512, 4096, 4224, 8},
		{512, 14336, 4224, 8},
		{16, 1024, 4224, 2}, // 1024 columns: two shares of 512 at most
	} {
		if got := gemvTileSplit(c.units, c.in, c.warps); got != c.want {
			t.Errorf("gemvTileSplit(%d, %d, %d) = %d, want %d", c.units, c.in, c.warps, got, c.want)
		}
	}
}

// TestArgsTensorMap: a tensor map travels by value, its parameter pointing
// at its own 128 bytes (64-byte aligned, as in C) between ordinary
// arguments, and each map is copied when packed.
func TestArgsTensorMap(t *testing.T) {
	var m1, m2 TensorMap
	for i := range m1.W {
		m1.W[i], m2.W[i] = uint64(i)+1, uint64(i)<<32|7
	}
	want := [2][tensorMapWords]uint64{m1.W, m2.W}
	a := new(Args).Ptr(0x1000).TensorMap(&m1).Int32(5).TensorMap(&m2)
	m1.W[0] = 99 // packed already: the Args keeps its copy
	if a.Err() != nil || a.Len() != 4 {
		t.Fatalf("len %d err %v", a.Len(), a.Err())
	}
	var scratch [maxKernelArgs]unsafe.Pointer
	params := unsafe.Slice((*unsafe.Pointer)(a.kernelParams(&scratch)), a.Len())
	if got := *(*uint64)(params[0]); got != 0x1000 {
		t.Errorf("pointer arg = %#x", got)
	}
	if got := *(*int32)(params[2]); got != 5 {
		t.Errorf("int arg = %d", got)
	}
	for k, p := range []unsafe.Pointer{params[1], params[3]} {
		if uintptr(p)%tensorMapAlign != 0 {
			t.Errorf("map %d at %p is not %d-byte aligned", k, p, tensorMapAlign)
		}
		if got := *(*[tensorMapWords]uint64)(p); got != want[k] {
			t.Errorf("map %d = %v, want %v", k, got, want[k])
		}
	}
}
