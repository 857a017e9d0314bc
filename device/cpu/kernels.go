package cpu

import (
	"os"
	"sync/atomic"
	"unsafe"
)

// A kernelSet is one implementation of the matrix-product micro-kernels
// (see gemm.go for the packed layouts they read) and of the vector helpers.
// There are three: AVX-512 ("avx512"), AVX2+FMA+F16C ("avx2"), and pure Go
// ("go"), which every build has and the tests always run too.
type kernelSet struct {
	name string
	// mrMax[kind] is the most tokens one micro-kernel call handles; a call
	// with fewer is fine (every count 1..mrMax has a kernel).
	mrMax [numKinds]int
	// float[kind][mr] computes c[mr][32] += a · panel for the float kinds:
	// a is [k][mr] float32, the panel [k][32] of the kind's element type.
	float [numKinds][maxMR + 1]tileKernel
	// floatStore[kind][mr] is float[kind][mr] writing c = a · panel
	// rather than adding to it (nil: the set has none, and gemm goes
	// through a zeroed scratch tile), and prefetching a run of memory
	// meanwhile (storeKernel).
	floatStore [numKinds][maxMR + 1]storeKernel
	// q8[mr] is the same for a Q8 panel and quantised activations, over k/32
	// blocks (layouts in pack.go).
	q8 [maxMR + 1]tileKernel
	// qk[format][mr] is the same for a panel of qkFormats[format] over k
	// super-blocks (qk.go); nil where the set has none (gemm then uses
	// the Go kernel).
	qk [numQKFormats][maxMR + 1]tileKernel
	// qkRun[format] computes c = a · panels for one token over a run of
	// panels of qkFormats[format], consecutive in memory, each k
	// super-blocks, c's 32 values per panel one after another (written,
	// not added); nil where the set has none (gemm then calls qk[format][1]
	// panel by panel).
	qkRun [numQKFormats]qkRunKernel
	// i4[group][mr] is float[kind][mr] for an I4 panel in groups of
	// i4Groups[group] (i4.go), k whole groups; nil where the set has none
	// (gemm then uses the Go kernel).
	i4 [numI4Groups][maxMR + 1]tileKernel
	// widenI4[group] writes an I4 panel's groups as an F32 panel
	// (widenI4; nil: its Go loop).
	widenI4 [numI4Groups]widenKernel
	// packFloat[mr] packs groups of eight inputs of an mr-token float
	// tile (packFloatTile; nil: packFloatTile's Go loop).
	packFloat [maxMR + 1]packKernel
	// quantQ8Row quantises one token's activations into a Q8 tile of mr
	// tokens, blocks blocks of 32 (packQ8Tile; nil: its Go loop), dst at
	// the token's first quant group.
	quantQ8Row func(dst *byte, x *float32, blocks, mr int)
	// quantQKRow is the same for a QK tile (packQKTile), supers
	// super-blocks of super inputs, dst at the token's first quad.
	quantQKRow func(dst *byte, x *float32, supers, super, mr int)

	vec vecKernels
	// asmDot: Dot may call asmDot directly for lengths that are a
	// multiple of 16 (the assembly sets; asmDot is their vec.dot).
	asmDot bool
}

// vecKernels are the element-wise helpers. Each handles a prefix of its
// input whose length is a multiple of its width and returns that length;
// the caller finishes the tail in Go.
type vecKernels struct {
	width      int
	sumSquares func(x []float32) float64
	scaleMul   func(out, x, w []float32, s float32)
	siluMul    func(gate, up []float32)
	// ropeHalves and ropePairs rotate the heads of a row (Rope; nil: its
	// Go loops) for half a multiple of 8, or headDim a multiple of 8 and
	// cos2, sin2 holding each pair's value twice.
	ropeHalves func(row, cos, sin []float32, half, heads int)
	ropePairs  func(row, cos2, sin2 []float32, headDim, heads int)
	add        func(dst, src []float32)
	exp        func(dst, src []float32)
	dot        func(a, b []float32) float32
	axpy       func(dst []float32, a float32, x []float32)
	max        func(x []float32) float32
	// dotRows and accRows are DotRows and AccumulateRows for a width
	// that is a multiple of the kernel width and rows checked long enough.
	dotRows func(s, q []float32, rows [][]float32, off int)
	accRows func(y, p []float32, rows [][]float32, off int)
	// dotRowsHeads and accRowsHeads are DotRowsHeads and
	// AccumulateRowsHeads for checked arguments (nil: the callers loop
	// over DotRows and AccumulateRows).
	dotRowsHeads func(s []float32, sStride int, q []float32, heads, group int, rows [][]float32, off int, warm [][]float32)
	accRowsHeads func(y []float32, yStride int, p []float32, pStride, heads, group int, rows [][]float32, off int, warm [][]float32)
	// dotRowsHeadsBF16 and accRowsHeadsBF16 are the same over rows of
	// bfloat16 (DotRowsHeadsBF16), nil where the float32 ones are.
	dotRowsHeadsBF16 func(s []float32, sStride int, q []float32, heads, group int, rows [][]byte, off int)
	accRowsHeadsBF16 func(y []float32, yStride int, p []float32, pStride, heads, group int, rows [][]byte, off int)
	expSubSum        func(x []float32, m float32) float32
	streamRead       func(buf []byte) float32
	fmaLoop          func(iters int) float32
	fmaLoopLane      int // float32 lanes per FMA in fmaLoop
}

// tileKernel adds a · panel to c [mr][32], whose rows are ldc bytes apart;
// k is the inner length (in blocks of 32 for Q8).
type tileKernel func(a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int)

// storeKernel writes a · panel into c, as tileKernel adds it, and hints
// the k cache lines (64 bytes per k) from pf on into the cache as it goes
// (pf nil: no hints). gemm points pf into the next panel, so that its
// read from memory overlaps this one's arithmetic (gemm.go).
// qkRunKernel is kernelSet.qkRun's form.
type qkRunKernel func(a, b unsafe.Pointer, k int, c unsafe.Pointer, panels int)

type storeKernel func(a, b unsafe.Pointer, k int, c unsafe.Pointer, ldc int, pf unsafe.Pointer)

// packKernel writes dst[i][t] = x[t][i] for an mr-token tile (its
// height) and inputs i < 8·groups: dst is [8·groups][mr] float32, token
// t's row starts t·ldxB bytes after x.
type packKernel func(dst, x unsafe.Pointer, ldxB, groups int)

// widenKernel writes groups groups of an I4 panel (b) as an F32 panel
// (dst), exactly (widenI4).
type widenKernel func(dst, b unsafe.Pointer, groups int)

// maxMR bounds the tokens of one micro-kernel call.
const maxMR = 12

// Packed weight kinds (the dtypes a panel may hold).
const (
	kindF32 = iota
	kindBF16
	kindF16
	kindQ8
	kindQK // the GGUF block formats of qk.go; kernelSet.qk per format
	kindI4 // AWQ and GPTQ int4 over float activations (i4.go); kernelSet.i4 per group size
	numKinds
)

var (
	goKernels = newGoKernels()
	// asmSets are the assembly sets this CPU runs, narrowest first;
	// asmKernels is the widest, nil when the CPU lacks AVX2+FMA+F16C.
	asmSets    []*kernelSet
	asmKernels *kernelSet

	active atomic.Pointer[kernelSet]
)

func init() {
	asmSets = detectKernels()
	if len(asmSets) > 0 {
		asmKernels = asmSets[len(asmSets)-1]
	}
	active.Store(goKernels)
	if asmKernels != nil && os.Getenv("GOSLING_NOASM") == "" {
		active.Store(asmKernels)
	}
}

// SetAssembly switches between the assembly kernels (on) and the pure-Go
// ones (off), returning the previous setting; on is ignored when the CPU
// has no supported vector extension. Packed weights are the same for both,
// so models already loaded keep working. Tests flip it to run every
// numerics check on both paths; GOSLING_NOASM=1 starts with it off.
func SetAssembly(on bool) (was bool) {
	was = active.Load() != goKernels
	if on && asmKernels != nil {
		active.Store(asmKernels)
	} else {
		active.Store(goKernels)
	}
	return was
}

// KernelPath names the kernels in use: "avx512", "avx512-vnni", "avx2" or "go".
func KernelPath() string { return active.Load().name }

// HasAssembly reports whether this CPU has assembly kernels.
func HasAssembly() bool { return asmKernels != nil }

func kernels() *kernelSet { return active.Load() }
