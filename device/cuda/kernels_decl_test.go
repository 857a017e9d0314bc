package cuda

import (
	"maps"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/internal/cudagen"
)

// ownKernelSources are the kernel files device/cuda registers, as NVRTC
// compiles them, and their headers.
func ownKernelSources(t *testing.T, owner string) (sources, headers map[string]string) {
	t.Helper()
	srcs, err := KernelSources()
	if err != nil {
		t.Fatal(err)
	}
	sources, headers = map[string]string{}, map[string]string{}
	for _, s := range srcs {
		if s.Owner != owner {
			continue
		}
		sources[s.Name] = string(s.Source)
		for _, h := range s.Headers {
			headers[h.Name] = string(h.Source)
		}
	}
	return sources, headers
}

// TestKernelDeclaration: kernels_gen.go is what kernels/kernels.decl
// generates, and every kernel it declares is defined by kernels/*.cu with
// the declared parameters, and none other.
func TestKernelDeclaration(t *testing.T) {
	sources, headers := ownKernelSources(t, "device/cuda")
	if err := cudagen.CheckPackage("kernels/kernels.decl", sources, headers); err != nil {
		t.Error(err)
	}
}

// TestKernelConstantsCatchHandDefines: the declaration's check fails on a
// source that #defines a declared constant itself or uses one under a
// name the declaration no longer has.
func TestKernelConstantsCatchHandDefines(t *testing.T) {
	sources, headers := ownKernelSources(t, "device/cuda")
	d, err := cudagen.ParseFile("kernels/kernels.decl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, from, to, want string }{
		{"sample.cu", `#include "cuda_gen.cuh"`, "#include \"cuda_gen.cuh\"\n#define SAMPLE_WORDS 9", "sample.cu defines SAMPLE_WORDS, a constant declared for cuda_gen.cuh"},
		{"gemv.cu", "float acc[1][GEMV_MAX_ROWS];", "float acc[1][GEMV_ROWS];", "gemv.cu: GEMV_ROWS is not defined"},
		{"gemv.cu", "rows_per_block = GEMV_WARPS / ks", "rows_per_block = GEMV_WARP_COUNT / ks", "gemv.cu: GEMV_WARP_COUNT is not defined"},
	} {
		src := sources[tc.file]
		if !strings.Contains(src, tc.from) {
			t.Fatalf("%s no longer has %q", tc.file, tc.from)
		}
		changed := maps.Clone(sources)
		changed[tc.file] = strings.Replace(src, tc.from, tc.to, 1)
		if err := d.Check("", changed, headers); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q → %q: %v, want an error containing %q", tc.file, tc.from, tc.to, err, tc.want)
		}
	}
}

// TestFakeKernelsDeclared: the emulated GPU's kernels are declared ones,
// reading as many arguments as the declaration passes. (The attention
// kernels, attn_*, are attention/gpu's: those a dry run only looks up,
// with no arguments, and attn_store, which TestFakeQKV16Store runs.)
func TestFakeKernelsDeclared(t *testing.T) {
	n := 0
	for name, fk := range fakeKernels {
		if strings.HasPrefix(name, "attn_") {
			continue
		}
		n++
		if want, ok := declaredKernels[name]; !ok {
			t.Errorf("fake kernel %s is not declared", name)
		} else if fk.nargs != want {
			t.Errorf("fake kernel %s reads %d arguments, the declaration has %d", name, fk.nargs, want)
		}
	}
	if n < 20 {
		t.Errorf("only %d fake kernels checked", n)
	}
}
