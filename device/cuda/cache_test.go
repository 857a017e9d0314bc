package cuda

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDefaultCacheDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		vars map[string]string
		home string
		want string
	}{
		{map[string]string{"GOSLING_CUDA_CACHE": "/c", "XDG_CACHE_HOME": "/x"}, "/h", "/c"},
		{map[string]string{"XDG_CACHE_HOME": "/x"}, "/h", "/x/gosling/cuda"},
		{nil, "/h", "/h/.cache/gosling/cuda"},
		{nil, "", ""},
	}
	for _, tc := range tests {
		if got := DefaultCacheDir(env(tc.vars), tc.home); got != tc.want {
			t.Errorf("DefaultCacheDir(%v, %q) = %q, want %q", tc.vars, tc.home, got, tc.want)
		}
	}
}

func TestCacheKey(t *testing.T) {
	src := []byte("extern \"C\" __global__ void k() {}")
	sm90 := Target{Arch: 90, CUBIN: true}
	base := CacheKey(src, sm90, "13.0", []string{"--std=c++17"})
	if len(base) != 64 {
		t.Fatalf("key %q is not a hex SHA-256", base)
	}
	if again := CacheKey(src, sm90, "13.0", []string{"--std=c++17"}); again != base {
		t.Error("key is not deterministic")
	}
	variants := map[string]string{
		"source":  CacheKey(append([]byte{}, append(src, ' ')...), sm90, "13.0", []string{"--std=c++17"}),
		"arch":    CacheKey(src, Target{Arch: 89, CUBIN: true}, "13.0", []string{"--std=c++17"}),
		"ptx":     CacheKey(src, Target{Arch: 90}, "13.0", []string{"--std=c++17"}),
		"version": CacheKey(src, sm90, "13.1", []string{"--std=c++17"}),
		"options": CacheKey(src, sm90, "13.0", []string{"--std=c++20"}),
		"split":   CacheKey(src, sm90, "13.0", []string{"--std=", "c++17"}),
	}
	seen := map[string]string{base: "base"}
	for name, k := range variants {
		if prev, dup := seen[k]; dup {
			t.Errorf("changing %s gives the same key as %s", name, prev)
		}
		seen[k] = name
	}
}

func TestKernelCacheRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "cuda")
	c := &KernelCache{Dir: dir}
	sm90 := Target{Arch: 90, CUBIN: true}
	key := CacheKey([]byte("src"), sm90, "13.0", nil)
	if _, ok := c.Get(key, sm90); ok {
		t.Fatal("hit in an empty cache")
	}
	image := []byte("\x7fELF fake cubin")
	if err := c.Put(key, sm90, image); err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get(key, sm90)
	if !ok || string(got) != string(image) {
		t.Fatalf("Get = %q, %v", got, ok)
	}
	if _, ok := c.Get(key, Target{Arch: 90}); ok {
		t.Error("a CUBIN entry answered a PTX lookup")
	}
	// Overwrite is atomic and leaves no temporary files behind.
	if err := c.Put(key, sm90, []byte("new")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("cache folder holds %d entries, want 1", len(entries))
	}
	if err := c.Clear(); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(key, sm90); ok {
		t.Error("hit after Clear")
	}
}

func TestKernelCacheDisabled(t *testing.T) {
	var nilCache *KernelCache
	for _, c := range []*KernelCache{nilCache, {}} {
		if err := c.Put("k", Target{}, []byte("x")); err != nil {
			t.Error(err)
		}
		if _, ok := c.Get("k", Target{}); ok {
			t.Error("disabled cache hit")
		}
	}
}

func TestChooseTarget(t *testing.T) {
	supported := []int{75, 80, 86, 89, 90, 100, 120}
	tests := []struct {
		arch    int
		want    Target
		wantErr bool
	}{
		{90, Target{90, true, true}, false},
		{86, Target{86, true, false}, false},
		{130, Target{120, false, false}, false}, // newer GPU: PTX, JIT by the driver
		{70, Target{}, true},
	}
	for _, tc := range tests {
		got, err := chooseTarget(tc.arch, supported)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("chooseTarget(%d) = %+v, %v; want %+v (err %v)", tc.arch, got, err, tc.want, tc.wantErr)
		}
	}
	if got, _ := chooseTarget(90, nil); got != (Target{90, true, true}) {
		t.Errorf("unknown support list: %+v", got)
	}
	if got := (Target{90, true, true}).Option(); got != "--gpu-architecture=sm_90a" {
		t.Error(got)
	}
	if got := (Target{120, false, false}).Option(); got != "--gpu-architecture=compute_120" {
		t.Error(got)
	}
}

func TestKernelSources(t *testing.T) {
	all, err := KernelSources()
	if err != nil {
		t.Fatal(err)
	}
	// The external tests link attention/gpu, which registers its own.
	var srcs []KernelSource
	for _, s := range all {
		if s.Owner == "device/cuda" {
			srcs = append(srcs, s)
		}
	}
	want := []string{"activation.cu", "allreduce.cu", "convert.cu", "embedding.cu", "fill.cu", "fp8.cu", "gemv.cu", "kv.cu", "model_ops.cu", "moe.cu", "moe_gemm.cu", "norm.cu", "probe.cu", "quant.cu", "rope.cu", "sample.cu", "vision.cu"}
	if len(srcs) != len(want) {
		t.Fatalf("%d kernel files, want %d", len(srcs), len(want))
	}
	prelude, _ := kernelFS.ReadFile(kernelPrelude)
	for i, s := range srcs {
		if s.Name != want[i] {
			t.Errorf("file %d is %s, want %s", i, s.Name, want[i])
		}
		if string(s.Source[:len(prelude)]) != string(prelude) {
			t.Errorf("%s does not start with the prelude", s.Name)
		}
	}
}
