package cudagen

import (
	"strings"
	"testing"
)

func expandText(t *testing.T, src string, defines map[string]string) string {
	t.Helper()
	ts, err := Preprocess("t.cu", src, defines, map[string]string{"h.cuh": "#define FROM_HEADER 7\n"})
	if err != nil {
		t.Fatal(err)
	}
	return joinTokens(ts)
}

func TestPreprocess(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"#define A 1\nA + A", "1 + 1"},
		{"#define CAT(a, b) a##_##b\nCAT(x, y)", "x_y"},
		{"#define STR(a) #a\nSTR(f16)", `"f16"`},
		// Arguments are expanded before substitution, except next to ##.
		{"#define T float\n#define ID(x) x\n#define P(x) k_##x\nID(T) P(T)", "float k_T"},
		// Rescanning: a macro's expansion may call another with the tokens after it.
		{"#define F(a) G(a, 2)\n#define G(a, b) a*b\nF(3)", "3 * 2"},
		// No recursion: a macro is not expanded inside itself.
		{"#define X X + 1\nX", "X + 1"},
		{"#define F(x) x\nF", "F"},
		{"line \\\ncontinued /* comment */ // rest", "line continued"},
		{"#if __CUDA_ARCH__ >= 800\nnew\n#else\nold\n#endif", "new"},
		{"#if __CUDA_ARCH__ >= 950\nnew\n#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)\nmid\n#else\nold\n#endif", "mid"},
		{"#ifdef NOPE\na\n#else\n#if 1\nb\n#endif\n#endif", "b"},
		{"#if 0\n#define A 1\n#endif\nA", "A"},
		{"#include \"h.cuh\"\nFROM_HEADER", "7"},
		{"#define N(a, b) a + b\nN((1, 2), 3)", "( 1 , 2 ) + 3"},
	} {
		if got := expandText(t, tc.src, Arch); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.src, got, tc.want)
		}
	}
	for _, bad := range []string{"#if 1\n", "#endif\n", "#include \"missing.cuh\"\n", "#include <cuda.h>\n", "#bogus\n", "#define V(...) x\n"} {
		if _, err := Preprocess("t.cu", bad, nil, nil); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSourceKernels(t *testing.T) {
	src := `
typedef long long i64;
#define K(s, T) extern "C" __global__ void __launch_bounds__(128) k_##s(T* out, const T* __restrict__ x, i64 n, int w, float a, unsigned long long seed) { }
K(f32, float)
K(bf16, bf16_t)
extern "C" __global__ void plain(const int* p) {}
__global__ void not_extern(int x) {}
extern "C" __device__ int not_a_kernel(int x) { return x; }
`
	ks, err := SourceKernels(map[string]string{"a.cu": src}, Arch, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range ks {
		var ps []string
		for _, p := range k.Params {
			ps = append(ps, p.Name+" "+string(p.Kind))
		}
		got = append(got, k.File+":"+k.Name+"("+strings.Join(ps, ", ")+")")
	}
	want := []string{
		"a.cu:k_f32(out ptr, x ptr, n i64, w i32, a f32, seed u64)",
		"a.cu:k_bf16(out ptr, x ptr, n i64, w i32, a f32, seed u64)",
		"a.cu:plain(p ptr)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := SourceKernels(map[string]string{"b.cu": `extern "C" __global__ void k(double d) {}`}, Arch, nil); err == nil {
		t.Error("a double parameter was accepted")
	}
}

const testDecl = `
package cuda
receiver k *Kernels
stream s Stream
call k.launch(name, cfg, s, args)
header t_gen.cuh

struct row ROW_ 4
	first
	second

# A tile: its rows, threads and keys.
const tileRows TILE_ROWS = 64
const tileThreads TILE_THREADS = TILE_ROWS * 2
const tileKeys TILE_KEYS(d) = 256:64 128:32 128

const ModeNorm Mode T_MODE_NORM = 1

params common(out ptr, n i64)

kernel Scale scale_{dt}(x ptr, n i64, f f32)
	dt=f32|bf16
kernel Tile tile{bn}_{dt}(@common)
	bn=32|64 dt=f16
kernel One one(out ptr, seed u64, w i32)
`

func TestGenerate(t *testing.T) {
	g, err := Generate("t.decl", testDecl)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(g.Decl.Names(), " "), "scale_f32 scale_bf16 tile32_f16 tile64_f16 one"; got != want {
		t.Errorf("names %q, want %q", got, want)
	}
	goSrc := string(g.Go)
	for _, want := range []string{
		"func (k *Kernels) launchScale(s Stream, cfg LaunchConfig, dt tensor.DType, a scaleArgs) error {",
		"name := nameScale(dt)",
		`func nameScale(dt tensor.DType) string { return "scale_" + kernelDType(dt) }`,
		`func nameOne() string { return "one" }`,
		"Tile  []string",
		`Tile:  []string{"tile32_f16", "tile64_f16"},`,
		"// A tile: its rows, threads and keys.\n//\n// TILE_ROWS, TILE_THREADS, TILE_KEYS in t_gen.cuh.\nconst (",
		"tileRows    = 64           // TILE_ROWS",
		"tileThreads = tileRows * 2 // TILE_THREADS",
		"func tileKeys(d int) int {\n\tswitch d {\n\tcase 256:\n\t\treturn 64\n\tcase 128:\n\t\treturn 32\n\t}\n\treturn 128\n}",
		"ModeNorm Mode = 1 // T_MODE_NORM",
		"func (k *Kernels) launchTile(s Stream, cfg LaunchConfig, bn int, dt tensor.DType, a commonArgs) error {",
		`return "tile" + strconv.Itoa(bn) + "_" + kernelDType(dt)`,
		"return k.launch(name, cfg, s, a.pack())",
		"Ptr(a.X).\n\t\tInt64(int64(a.N)).\n\t\tFloat32(a.F)",
		"Seed uint64",
		"rowSecond = 1",
		"rowFields = 4",
		`"tile64_f16": 2,`,
	} {
		if !strings.Contains(goSrc, want) {
			t.Errorf("generated Go lacks %q", want)
		}
	}
	h := string(g.Header)
	for _, want := range []string{"#define ROW_SECOND 1\n", "#define ROW_FIELDS 4\n", "// A tile: its rows, threads and keys.\n#define TILE_ROWS 64\n",
		"#define TILE_THREADS (TILE_ROWS * 2)\n", "#define TILE_KEYS(d) ((d) == 256 ? 64 : (d) == 128 ? 32 : 128)\n",
		"\n#define T_MODE_NORM 1\n", "#ifndef GOSLING_T_GEN_CUH\n"} {
		if !strings.Contains(h, want) {
			t.Errorf("header lacks %q:\n%s", want, h)
		}
	}

	src := `
#include "t_gen.cuh"
extern "C" __global__ void scale_f32(float* x, long long n, float f) { x[ROW_FIRST] = ROW_SECOND + TILE_ROWS * TILE_KEYS(64); }
extern "C" __global__ void scale_bf16(bf16_t* x, long long n, float f) {}
#define TILE(bn) extern "C" __global__ void tile##bn##_f16(f16_t* out, i64 n) {}
TILE(32)
TILE(64)
extern "C" __global__ void one(float* out, unsigned long long seed, int w) {}
`
	headers := map[string]string{"t_gen.cuh": h}
	if err := g.Decl.Check("typedef long long i64;", map[string]string{"t.cu": src}, headers); err != nil {
		t.Errorf("matching sources: %v", err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"TILE(64)", "", "kernel tile64_f16 (Tile, declared line"},
		{"TILE(64)", "TILE(64)\nTILE(128)", "kernel tile128_f16 (t.cu) is not declared"},
		{"int w) {}", "int w, int v) {}", "parameter 3 (v i32) is not declared"},
		{"unsigned long long seed, int w", "unsigned long long seed", "declared parameter 2 (w i32) is not in the source"},
		{"float f) { x", "int f) { x", "parameter 2 is f i32 in the source, f f32"},
		{"ROW_SECOND +", "ROW_THIRD +", "ROW_THIRD is no field of row"},
		{"TILE(32)", "TILE(32)\nTILE(32)", "kernel tile32_f16 is defined in t.cu and t.cu"},
		{"+ TILE_ROWS", "+ TILE_ROW", "t.cu: TILE_ROW is not defined"},
		{"#include", "#define TILE_ROWS 64\n#include", "t.cu defines TILE_ROWS, a constant declared for t_gen.cuh"},
	} {
		bad := strings.Replace(src, tc.from, tc.to, 1)
		err := g.Decl.Check("typedef long long i64;", map[string]string{"t.cu": bad}, headers)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q → %q: %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
}

// TestGenerateExtendedList: a list that extends another (with a tensor
// map among its own parameters) becomes a struct embedding the other's,
// packing its own after it, and is checked against a source that takes
// the maps as `const __grid_constant__ CUtensorMap`.
func TestGenerateExtendedList(t *testing.T) {
	decl := `package p
import github.com/gosling-ai/gosling/device/cuda
receiver r *R
call r.launch(name, cfg, args)
params base(x ptr, n i32)
params wide(@base, tm tmap, mode i32)
kernel Narrow narrow(@base)
kernel Wide wide_{d}(@wide)
	d=64|128
`
	g, err := Generate("w.decl", decl)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(g.Decl.Lists["wide"]); got != 4 {
		t.Errorf("wide has %d parameters, want 4", got)
	}
	goSrc := string(g.Go)
	for _, want := range []string{
		"// wideArgs are the parameters of the kernels declared with @wide: @base's, then its own, in order.\ntype wideArgs struct {\n\tbaseArgs\n\tTm   cuda.TensorMap\n\tMode int\n}",
		"func (a *wideArgs) pack() *cuda.Args {\n\treturn a.baseArgs.pack().\n\t\tTensorMap(&a.Tm).\n\t\tInt32(a.Mode)\n}",
		"type baseArgs struct {\n\tX cuda.DevicePtr\n\tN int\n}",
		"func (r *R) launchWide(cfg cuda.LaunchConfig, d int, a wideArgs) error {",
		`"wide_64":  4,`,
	} {
		if !strings.Contains(goSrc, want) {
			t.Errorf("generated Go lacks %q:\n%s", want, goSrc)
		}
	}
	if strings.Count(goSrc, "type baseArgs struct") != 1 {
		t.Error("baseArgs is not written exactly once")
	}
	src := `
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void narrow(float* x, int n) {}
#define WIDE(d) extern "C" __global__ void wide_##d(float* x, int n, const __grid_constant__ CUtensorMap tm, int mode) {}
WIDE(64)
WIDE(128)
`
	if err := g.Decl.Check("", map[string]string{"w.cu": src}, nil); err != nil {
		t.Errorf("matching sources: %v", err)
	}
	bad := strings.Replace(src, "CUtensorMap tm, int mode", "CUtensorMap* tm, int mode", 1)
	if err := g.Decl.Check("", map[string]string{"w.cu": bad}, nil); err == nil || !strings.Contains(err.Error(), "parameter 2 is tm ptr in the source, tm tmap") {
		t.Errorf("a map passed by pointer: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	base := "package p\nreceiver r *R\ncall r.l(name, cfg, args)\n"
	for _, tc := range []struct{ decl, want string }{
		{"kernel K k_{a}(x ptr)\n", "has axes but no instances"},
		{"kernel K k_{a}(x ptr)\n\tb=1\n", "has no a"},
		{"kernel K k(x double)\n", `unknown kind "double"`},
		{"kernel K k_{a}(x ptr)\n\ta=1|1\n", "declared twice"},
		{"kernel K k(x ptr)\nkernel K j(x ptr)\n", "two families named K"},
		{"kernel K k(@nope)\n", `no parameter list "nope"`},
		{"struct s S_ 1\n\ta\n\tb\n", "2 fields in a row of 1"},
		{"\tstray\n", "belongs under a kernel or struct"},
		{"frobnicate\n", `unknown word "frobnicate"`},
		{"header h.cuh\nconst a A = B\n", "B is no constant declared above it"},
		{"header h.cuh\nconst a A = 1\nconst b A = 2\n", "declared twice"},
		{"header h.cuh\nconst f F(x) = 1:y 2\n", "want value:result"},
		{"header h.cuh\nconst f F(x) = 1:2 z\n", "is not an integer"},
		{"header h.cuh\nconst a A = 1 ; 2\n", "unexpected"},
		{"const a A = 1\n", "need a header"},
		{"params a(x ptr)\nkernel K k(@a, y i32)\n", "a kernel takes a list alone"},
		{"params b(@nope, y i32)\n", `no parameter list "nope"`},
	} {
		if _, err := Parse(base + tc.decl); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.decl, err, tc.want)
		}
	}
	if _, err := Parse("kernel K k(x ptr)\n"); err == nil {
		t.Error("a declaration without package, receiver and call was accepted")
	}
}

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{"k_cache": "KCache", "part_lse": "PartLSE", "n_kv_heads": "NKVHeads", "q_seq0": "QSeq0", "x": "X"} {
		if got := camel(in, true); got != want {
			t.Errorf("camel(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"RMSNorm": "rmsNorm", "AddF32": "addF32", "KVStore": "kvStore", "ABC": "abc", "FP8QuantRows": "fp8QuantRows", "AttnMMA": "attnMMA", "GeLUF32": "geLUF32"} {
		if got := lowerInitial(in); got != want {
			t.Errorf("lowerInitial(%q) = %q, want %q", in, got, want)
		}
	}
}
