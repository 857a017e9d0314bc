package cuda

import "testing"

// TestCompileOptions: a define reaches only the modules that mention its
// macro, and words that are not -D flags are dropped.
func TestCompileOptions(t *testing.T) {
	ds := parseDefines("-DGEMV_UNROLL=8 --use_fast_math -D -DOTHER")
	if len(ds) != 2 || ds[0] != "-DGEMV_UNROLL=8" || ds[1] != "-DOTHER" {
		t.Fatalf("parseDefines: %q", ds)
	}
	with := compileOptions([]byte("#ifndef GEMV_UNROLL\n"), ds)
	if len(with) != len(nvrtcOptions)+1 || with[len(with)-1] != "-DGEMV_UNROLL=8" {
		t.Errorf("a source naming GEMV_UNROLL: %q", with)
	}
	if without := compileOptions([]byte("__global__ void k() {}"), ds); len(without) != len(nvrtcOptions) {
		t.Errorf("a source naming neither: %q", without)
	}
	if len(nvrtcOptions) != 3 {
		t.Errorf("compileOptions changed nvrtcOptions: %q", nvrtcOptions)
	}
}
