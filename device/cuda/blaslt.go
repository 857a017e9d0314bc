package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"
)

// cuBLAS / cuBLASLt enum values (library_types.h, cublas_api.h, cublasLt.h).
const (
	cudaR32F    = 0
	cudaR16F    = 2
	cudaR16BF   = 14
	cudaR8FE4M3 = 28

	cublasCompute32F = 68

	cublasOpN = 0
	cublasOpT = 1

	ltDescComputeType = 0
	ltDescScaleType   = 1
	ltDescTransA      = 3
	ltDescTransB      = 4
	ltDescAScalePtr   = 17
	ltDescBScalePtr   = 18
	ltDescAScaleMode  = 31
	ltDescBScaleMode  = 32

	// ltScaleOuterVec32F is CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: a
	// float32 scale per row of the operand's outer dimension (M of A, N
	// of B in cuBLAS's terms).
	ltScaleOuterVec32F = 3

	ltPrefMaxWorkspaceBytes = 1

	// ltHeuristicResultBytes over-sizes cublasLtMatmulHeuristicResult_t (96
	// bytes in CUDA 12 and 13: a 64-byte algo, then workspace size, state,
	// waves and padding). Only the algo, at offset 0, is read back, so a
	// larger struct in a later release still fits.
	ltHeuristicResultBytes = 1024
)

func cudaDataType(dt DType) (int32, error) {
	switch dt {
	case F32:
		return cudaR32F, nil
	case F16:
		return cudaR16F, nil
	case BF16:
		return cudaR16BF, nil
	case FP8E4M3:
		// cuBLASLt takes e4m3 inputs with a float32 output only in the
		// TN layout every linear layer has (TransB) and K a multiple of 16.
		return cudaR8FE4M3, nil
	}
	return 0, fmt.Errorf("cuBLAS: unsupported dtype %v", dt)
}

// ltAPI is the subset of libcublasLt.so.13 gosling calls.
type ltAPI struct {
	cublasLtCreate                  func(h *uintptr) int32
	cublasLtDestroy                 func(h uintptr) int32
	cublasLtGetVersion              func() uint64
	cublasLtGetStatusString         func(s int32) string
	cublasLtMatmulDescCreate        func(d *uintptr, computeType int32, scaleType int32) int32
	cublasLtMatmulDescSetAttribute  func(d uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	cublasLtMatmulDescDestroy       func(d uintptr) int32
	cublasLtMatrixLayoutCreate      func(l *uintptr, dtype int32, rows, cols uint64, ld int64) int32
	cublasLtMatrixLayoutDestroy     func(l uintptr) int32
	cublasLtMatmulPreferenceCreate  func(p *uintptr) int32
	cublasLtMatmulPreferenceSetAttr func(p uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	cublasLtMatmulPreferenceDestroy func(p uintptr) int32
	cublasLtMatmulAlgoGetHeuristic  func(h, op, a, b, c, d, pref uintptr, requested int32, results unsafe.Pointer, returned *int32) int32
	cublasLtMatmul                  func(h, op uintptr, alpha unsafe.Pointer, a DevicePtr, aDesc uintptr, b DevicePtr, bDesc uintptr, beta unsafe.Pointer, c DevicePtr, cDesc uintptr, d DevicePtr, dDesc uintptr, algo unsafe.Pointer, workspace DevicePtr, workspaceBytes uint64, s Stream) int32
}

func (l *ltAPI) symbols() []symbol {
	return []symbol{
		{&l.cublasLtCreate, []string{"cublasLtCreate"}},
		{&l.cublasLtDestroy, []string{"cublasLtDestroy"}},
		{&l.cublasLtGetVersion, []string{"cublasLtGetVersion"}},
		{&l.cublasLtGetStatusString, []string{"cublasLtGetStatusString"}},
		{&l.cublasLtMatmulDescCreate, []string{"cublasLtMatmulDescCreate"}},
		{&l.cublasLtMatmulDescSetAttribute, []string{"cublasLtMatmulDescSetAttribute"}},
		{&l.cublasLtMatmulDescDestroy, []string{"cublasLtMatmulDescDestroy"}},
		{&l.cublasLtMatrixLayoutCreate, []string{"cublasLtMatrixLayoutCreate"}},
		{&l.cublasLtMatrixLayoutDestroy, []string{"cublasLtMatrixLayoutDestroy"}},
		{&l.cublasLtMatmulPreferenceCreate, []string{"cublasLtMatmulPreferenceCreate"}},
		{&l.cublasLtMatmulPreferenceSetAttr, []string{"cublasLtMatmulPreferenceSetAttribute"}},
		{&l.cublasLtMatmulPreferenceDestroy, []string{"cublasLtMatmulPreferenceDestroy"}},
		{&l.cublasLtMatmulAlgoGetHeuristic, []string{"cublasLtMatmulAlgoGetHeuristic"}},
		{&l.cublasLtMatmul, []string{"cublasLtMatmul"}},
	}
}

var (
	ltOnce sync.Once
	ltLib  *ltAPI
	ltErr  error
)

func loadLt() (*ltAPI, error) {
	ltOnce.Do(func() {
		api := &ltAPI{}
		if _, _, ltErr = openBound(LibCUBLASLt, api.symbols()); ltErr == nil {
			ltLib = api
		}
	})
	return ltLib, ltErr
}

// Gemm describes a row-major matrix product, the layout of every linear
// layer:
//
//	D[M, N] = Alpha · A[M, K] · op(B) + Beta · D
//	op(B) = Bᵀ with B [N, K] when TransB (nn.Linear weights [out, in]), else B [K, N]
//
// A and B are in DType, D in OutDType (bf16 inputs may produce float32
// logits); accumulation and scaling are float32. LDA, LDB, LDD are row
// strides in elements, 0 for dense. Beta 0 ignores D's old contents.
type Gemm struct {
	M, N, K         int
	TransB          bool
	DType, OutDType DType
	LDA, LDB, LDD   int
	// RowScales (FP8E4M3 inputs, TransB): D = (sa[i]·sb[j]·Σ_k A[i,k]·B[j,k])
	// with one float32 scale per row of A and of B, the vectors
	// MatmulScaled passes (cuBLASLt's outer-vector scaling).
	RowScales bool
}

func (g Gemm) withDefaults() Gemm {
	if g.LDA == 0 {
		g.LDA = g.K
	}
	if g.LDB == 0 {
		if g.TransB {
			g.LDB = g.K
		} else {
			g.LDB = g.N
		}
	}
	if g.LDD == 0 {
		g.LDD = g.N
	}
	return g
}

// FLOPs is the multiply-add count ×2.
func (g Gemm) FLOPs() float64 { return 2 * float64(g.M) * float64(g.N) * float64(g.K) }

// columnMajor restates the row-major product for cuBLAS, which is column
// major: a row-major X [r, c] is the column-major Xᵀ [c × r] with the same
// leading dimension. So D = A·op(B) becomes Dᵀ = op(B)ᵀ·Aᵀ, i.e. cuBLAS's
// (m, n, k) = (N, M, K) with B as its first operand and A as its second.
type columnMajorGemm struct {
	m, n, k           int
	transA, transB    int32 // cuBLAS ops on the first (our B) and second (our A) operands
	rowsA, colsA, lda int   // first operand as stored (our B)
	rowsB, colsB, ldb int   // second operand as stored (our A)
	rowsD, colsD, ldd int
}

func (g Gemm) columnMajor() columnMajorGemm {
	g = g.withDefaults()
	c := columnMajorGemm{m: g.N, n: g.M, k: g.K}
	if g.TransB { // B [N, K] row-major = column-major [K × N]; need N × K: transpose
		c.transA, c.rowsA, c.colsA = cublasOpT, g.K, g.N
	} else { // B [K, N] row-major = column-major [N × K], already N × K
		c.transA, c.rowsA, c.colsA = cublasOpN, g.N, g.K
	}
	c.lda = g.LDB
	// A [M, K] row-major = column-major [K × M] = the K × M operand wanted.
	c.transB, c.rowsB, c.colsB, c.ldb = cublasOpN, g.K, g.M, g.LDA
	c.rowsD, c.colsD, c.ldd = g.N, g.M, g.LDD
	return c
}

func (g Gemm) validate() error {
	g = g.withDefaults()
	switch {
	case g.RowScales && (g.DType != FP8E4M3 || !g.TransB):
		return fmt.Errorf("gemm: row scales need e4m3 inputs and a transposed B, have %v", g.DType)
	case g.M <= 0 || g.N <= 0 || g.K <= 0:
		return fmt.Errorf("gemm %dx%dx%d: sizes must be positive", g.M, g.N, g.K)
	case g.LDA < g.K:
		return fmt.Errorf("gemm: LDA %d < K %d", g.LDA, g.K)
	case g.TransB && g.LDB < g.K, !g.TransB && g.LDB < g.N:
		return fmt.Errorf("gemm: LDB %d too small", g.LDB)
	case g.LDD < g.N:
		return fmt.Errorf("gemm: LDD %d < N %d", g.LDD, g.N)
	}
	return nil
}

// BlasLt runs GEMMs through cuBLASLt on one device. The heuristic's choice
// is cached per shape: the query costs tens of microseconds, a decode step
// repeats the same dozen shapes, and a fixed algorithm keeps results
// bit-identical between runs and between graph capture and eager mode.
type BlasLt struct {
	// Autotune makes each new plan time the heuristic's top candidates on
	// scratch buffers and keep the fastest (see tune). Set it before the
	// first Matmul; plans must be made before any graph capture either way.
	Autotune bool

	dev       *Device
	api       *ltAPI
	h         uintptr
	workspace Buffer
	mu        sync.Mutex
	plans     map[Gemm]*ltPlan
	failed    map[Gemm]error // shapes cuBLASLt has no algorithm for, asked once
}

// ltWorkspaceBytes is what NVIDIA recommends for Hopper (32 MiB); smaller
// parts use less. Fixed at creation, so captured graphs keep pointing at it.
const ltWorkspaceBytes = 32 << 20

type ltPlan struct {
	op, a, b, d uintptr
	algo        []uint64 // the heuristic result; algo at offset 0
}

// NewBlasLt opens cuBLASLt and creates a handle and workspace on dev.
func NewBlasLt(dev *Device) (*BlasLt, error) {
	api, err := loadLt()
	if err != nil {
		return nil, err
	}
	b := &BlasLt{dev: dev, api: api, plans: map[Gemm]*ltPlan{}}
	err = dev.Do(func() error {
		if st := api.cublasLtCreate(&b.h); st != 0 {
			return b.statusErr("cublasLtCreate", st)
		}
		ws, err := dev.Mem.Alloc(ltWorkspaceBytes)
		b.workspace = ws
		return err
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Version is cuBLASLt's version number (e.g. 130100).
func (b *BlasLt) Version() uint64 { return b.api.cublasLtGetVersion() }

func (b *BlasLt) statusErr(call string, st int32) error {
	return fmt.Errorf("%s: cuBLAS status %d (%s)", call, st, b.api.cublasLtGetStatusString(st))
}

// plan returns the cached plan for g, making it on first use. The lock is
// not held across dev.Do: the device thread may itself be waiting to plan.
func (b *BlasLt) plan(g Gemm) (*ltPlan, error) {
	b.mu.Lock()
	p, ok := b.plans[g]
	failed := b.failed[g]
	b.mu.Unlock()
	if ok {
		return p, nil
	}
	if failed != nil {
		return nil, failed
	}
	p, err := b.newPlan(g)
	if err != nil {
		b.mu.Lock()
		if b.failed == nil {
			b.failed = map[Gemm]error{}
		}
		b.failed[g] = err
		b.mu.Unlock()
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if prev, ok := b.plans[g]; ok { // planned concurrently: keep the first
		b.destroyPlan(p)
		return prev, nil
	}
	b.plans[g] = p
	return p, nil
}

func (b *BlasLt) newPlan(g Gemm) (*ltPlan, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	inType, err := cudaDataType(g.DType)
	if err != nil {
		return nil, err
	}
	outType, err := cudaDataType(g.OutDType)
	if err != nil {
		return nil, err
	}
	api := b.api
	c := g.columnMajor()
	p := &ltPlan{algo: make([]uint64, ltHeuristicResultBytes/8)}
	var pref uintptr
	err = b.dev.Do(func() error {
		set := func(attr int32, v int32) int32 {
			return api.cublasLtMatmulDescSetAttribute(p.op, attr, unsafe.Pointer(&v), 4)
		}
		setIf := func(on bool, attr int32, v int32) int32 {
			if !on {
				return 0
			}
			return set(attr, v)
		}
		steps := []struct {
			name string
			st   func() int32
		}{
			{"cublasLtMatmulDescCreate", func() int32 { return api.cublasLtMatmulDescCreate(&p.op, cublasCompute32F, cudaR32F) }},
			{"set TRANSA", func() int32 { return set(ltDescTransA, c.transA) }},
			{"set TRANSB", func() int32 { return set(ltDescTransB, c.transB) }},
			{"set A_SCALE_MODE", func() int32 { return setIf(g.RowScales, ltDescAScaleMode, ltScaleOuterVec32F) }},
			{"set B_SCALE_MODE", func() int32 { return setIf(g.RowScales, ltDescBScaleMode, ltScaleOuterVec32F) }},
			{"layout A", func() int32 {
				return api.cublasLtMatrixLayoutCreate(&p.a, inType, uint64(c.rowsA), uint64(c.colsA), int64(c.lda))
			}},
			{"layout B", func() int32 {
				return api.cublasLtMatrixLayoutCreate(&p.b, inType, uint64(c.rowsB), uint64(c.colsB), int64(c.ldb))
			}},
			{"layout D", func() int32 {
				return api.cublasLtMatrixLayoutCreate(&p.d, outType, uint64(c.rowsD), uint64(c.colsD), int64(c.ldd))
			}},
			{"cublasLtMatmulPreferenceCreate", func() int32 { return api.cublasLtMatmulPreferenceCreate(&pref) }},
			{"set MAX_WORKSPACE_BYTES", func() int32 {
				ws := uint64(ltWorkspaceBytes)
				return api.cublasLtMatmulPreferenceSetAttr(pref, ltPrefMaxWorkspaceBytes, unsafe.Pointer(&ws), 8)
			}},
		}
		for _, s := range steps {
			if st := s.st(); st != 0 {
				return b.statusErr(s.name, st)
			}
		}
		if b.Autotune {
			return b.tune(g, p, pref)
		}
		var returned int32
		st := api.cublasLtMatmulAlgoGetHeuristic(b.h, p.op, p.a, p.b, p.d, p.d, pref, 1, unsafe.Pointer(&p.algo[0]), &returned)
		if st != 0 {
			return b.statusErr("cublasLtMatmulAlgoGetHeuristic", st)
		}
		if returned == 0 {
			return fmt.Errorf("cuBLASLt has no algorithm for %+v", g)
		}
		return nil
	})
	if pref != 0 {
		api.cublasLtMatmulPreferenceDestroy(pref)
	}
	if err != nil {
		b.destroyPlan(p)
		return nil, err
	}
	return p, nil
}

func (b *BlasLt) destroyPlan(p *ltPlan) {
	for _, l := range []uintptr{p.a, p.b, p.d} {
		if l != 0 {
			b.api.cublasLtMatrixLayoutDestroy(l)
		}
	}
	if p.op != 0 {
		b.api.cublasLtMatmulDescDestroy(p.op)
	}
}

// Matmul enqueues g on s: D = alpha·A·op(B) + beta·D.
func (b *BlasLt) Matmul(s Stream, g Gemm, a, bm, d DevicePtr, alpha, beta float32) error {
	if g.RowScales {
		return errors.New("cuBLASLt: a row-scaled product goes through MatmulScaled")
	}
	return b.matmul(s, g, a, bm, d, 0, 0, alpha, beta)
}

// MatmulScaled enqueues the row-scaled g (Gemm.RowScales) on s: D =
// alpha·(sa[i]·sb[j]·(A·Bᵀ)[i, j]) + beta·D, sa [M] and sb [N] float32.
func (b *BlasLt) MatmulScaled(s Stream, g Gemm, a, bm, d, sa, sb DevicePtr, alpha, beta float32) error {
	if !g.RowScales || sa == 0 || sb == 0 {
		return errors.New("cuBLASLt: MatmulScaled needs a row-scaled product and both scale vectors")
	}
	return b.matmul(s, g, a, bm, d, sa, sb, alpha, beta)
}

// RowScaled reports whether cuBLASLt has an algorithm for the row-scaled
// g on this device (planning it), as a caller asks before choosing the
// path that needs it.
func (b *BlasLt) RowScaled(g Gemm) bool {
	g.RowScales = true
	_, err := b.plan(g)
	return err == nil
}

func (b *BlasLt) matmul(s Stream, g Gemm, a, bm, d, sa, sb DevicePtr, alpha, beta float32) error {
	p, err := b.plan(g)
	if err != nil {
		return err
	}
	err = b.dev.Do(func() error {
		if b.dev.rec.record(opMatmul, uint64(uintptr(unsafe.Pointer(p))), uint64(a), uint64(bm), uint64(d),
			uint64(math.Float32bits(alpha))|uint64(math.Float32bits(beta))<<32, uint64(b.workspace.Ptr), uint64(s),
			uint64(sa), uint64(sb)) {
			return nil
		}
		if g.RowScales { // cuBLAS's A is our B (columnMajor): its scales are sb
			if err := b.setScales(p, sb, sa); err != nil {
				return err
			}
		}
		ev := b.dev.profBegin(s)
		defer b.dev.profEnd(s, ev, func() string {
			return fmt.Sprintf("cublasLt %s m%d n%d k%d", kernelDType(g.DType), g.M, g.N, g.K)
		})
		// cuBLAS's first operand is our B, its second our A (see columnMajor).
		st := b.api.cublasLtMatmul(b.h, p.op, unsafe.Pointer(&alpha), bm, p.a, a, p.b,
			unsafe.Pointer(&beta), d, p.d, d, p.d, unsafe.Pointer(&p.algo[0]), b.workspace.Ptr, ltWorkspaceBytes, s)
		if st != 0 {
			return b.statusErr("cublasLtMatmul", st)
		}
		return nil
	})
	runtime.KeepAlive(p)
	return err
}

// setScales points p's A and B scale attributes (cuBLAS's operands) at
// sa and sb; cuBLASLt reads them when a product is enqueued, so a plan
// shared by several products is set before each.
func (b *BlasLt) setScales(p *ltPlan, sa, sb DevicePtr) error {
	for _, s := range []struct {
		attr int32
		ptr  DevicePtr
	}{{ltDescAScalePtr, sa}, {ltDescBScalePtr, sb}} {
		v := uint64(s.ptr)
		if st := b.api.cublasLtMatmulDescSetAttribute(p.op, s.attr, unsafe.Pointer(&v), 8); st != 0 {
			return b.statusErr("set SCALE_POINTER", st)
		}
	}
	return nil
}

// Close frees the plans, the workspace and the handle.
func (b *BlasLt) Close() error {
	b.mu.Lock()
	plans := b.plans
	b.plans = map[Gemm]*ltPlan{}
	b.mu.Unlock()
	return b.dev.Do(func() error {
		for _, p := range plans {
			b.destroyPlan(p)
		}
		var errs []error
		if st := b.api.cublasLtDestroy(b.h); st != 0 {
			errs = append(errs, b.statusErr("cublasLtDestroy", st))
		}
		errs = append(errs, b.dev.Mem.Free(b.workspace))
		return errors.Join(errs...)
	})
}
