package gpu

import (
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/internal/cudagen"
)

// TestKernelDeclaration: kernels_gen.go and kernels/attn_gen.cuh are what
// kernels/kernels.decl generates, and the kernels it declares are the ones
// kernels/attn_kernels.cu defines, parameter for parameter, as registered
// with device/cuda (so as NVRTC compiles them).
func TestKernelDeclaration(t *testing.T) {
	srcs, err := cuda.KernelSources()
	if err != nil {
		t.Fatal(err)
	}
	sources, headers := map[string]string{}, map[string]string{}
	for _, s := range srcs {
		if s.Owner != "attention/gpu" {
			continue
		}
		sources[s.Name] = string(s.Source)
		for _, h := range s.Headers {
			headers[h.Name] = string(h.Source)
		}
	}
	if _, ok := sources["attn_kernels.cu"]; !ok || headers["attn_gen.cuh"] == "" {
		t.Fatalf("attention/gpu registered %d sources and headers %v, want attn_kernels.cu with attn_gen.cuh", len(sources), headers)
	}
	if err := cudagen.CheckPackage("kernels/kernels.decl", sources, headers); err != nil {
		t.Error(err)
	}
}

// TestFA3Probe: the kernel that tells an sm_90a module is a declared one.
func TestFA3Probe(t *testing.T) {
	if _, ok := declaredKernels[fa3Probe]; !ok {
		t.Errorf("%s is not declared", fa3Probe)
	}
}

// TestKernelDeclarationCatchesRenames: the check fails on a kernel, a
// parameter, a request field or a constant renamed in the source alone,
// and on a declared constant the source #defines itself.
func TestKernelDeclarationCatchesRenames(t *testing.T) {
	srcs, err := cuda.KernelSources()
	if err != nil {
		t.Fatal(err)
	}
	var src string
	headers := map[string]string{}
	for _, s := range srcs {
		if s.Name == "attn_kernels.cu" {
			src = string(s.Source)
			for _, h := range s.Headers {
				headers[h.Name] = string(h.Source)
			}
		}
	}
	d, err := cudagen.ParseFile("kernels/kernels.decl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"attn_merge_##so", "attn_merged_##so", "kernel attn_merged_f32 (attn_kernels.cu) is not declared"},
		{"attn_merge_##so", "attn_merged_##so", "kernel attn_merge_bf16 (AttnMerge, declared line"},
		{"int n_splits, int n_tokens, int n_heads, int dv,", "int n_tokens, int n_splits, int n_heads, int dv,", "parameter 4 is n_tokens i32 in the source, n_splits i32"},
		{"attn_merge_##so(To* out,", "attn_merge_##so(int extra, To* out,", "parameter 0 is extra i32 in the source, out ptr"},
		{"attn_merge_##so(To* out, i64 out_stride", "attn_merge_##so(To* out, int out_stride", "parameter 1 is out_stride i32 in the source, out_stride i64"},
		{"R[REQ_PAGE_OFF]", "R[REQ_PAGE_OFFSET]", "REQ_PAGE_OFFSET is no field of req"},
		{"row0 = tile * MMA_BM;", "row0 = tile * MMA_ROWS;", "attn_kernels.cu: MMA_ROWS is not defined"},
		{"ST = MLA_STAGES(MT)", "ST = MLA_STAGE(MT)", "attn_kernels.cu: MLA_STAGE is not defined"},
		{`#include "attn_gen.cuh"`, "#include \"attn_gen.cuh\"\n#define DECODE_WARPS 4", "attn_kernels.cu defines DECODE_WARPS, a constant declared"},
	} {
		if !strings.Contains(src, tc.from) {
			t.Fatalf("the source no longer has %q", tc.from)
		}
		changed := map[string]string{"attn_kernels.cu": strings.Replace(src, tc.from, tc.to, 1)}
		err := d.Check("", changed, headers)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q → %q: %v, want an error containing %q", tc.from, tc.to, err, tc.want)
		}
	}
	if err := d.Check("", map[string]string{"attn_kernels.cu": src}, headers); err != nil {
		t.Errorf("unchanged: %v", err)
	}
}
