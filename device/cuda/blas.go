package cuda

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// cublasGemmDefault lets cuBLAS choose the algorithm (tensor cores included).
const cublasGemmDefault = -1

// blasAPI is the subset of libcublas.so.13 gosling calls.
type blasAPI struct {
	cublasCreate           func(h *uintptr) int32
	cublasDestroy          func(h uintptr) int32
	cublasSetStream        func(h uintptr, s Stream) int32
	cublasSetWorkspace     func(h uintptr, ws DevicePtr, bytes uint64) int32
	cublasGetStatusString  func(st int32) string
	cublasGemmStridedBatch func(h uintptr, transa, transb int32, m, n, k int32, alpha unsafe.Pointer,
		a DevicePtr, aType int32, lda int32, strideA int64,
		b DevicePtr, bType int32, ldb int32, strideB int64, beta unsafe.Pointer,
		c DevicePtr, cType int32, ldc int32, strideC int64,
		batch int32, computeType int32, algo int32) int32
}

func (b *blasAPI) symbols() []symbol {
	return []symbol{
		{&b.cublasCreate, []string{"cublasCreate_v2"}},
		{&b.cublasDestroy, []string{"cublasDestroy_v2"}},
		{&b.cublasSetStream, []string{"cublasSetStream_v2"}},
		{&b.cublasSetWorkspace, []string{"cublasSetWorkspace_v2"}},
		{&b.cublasGetStatusString, []string{"cublasGetStatusString"}},
		{&b.cublasGemmStridedBatch, []string{"cublasGemmStridedBatchedEx"}},
	}
}

var (
	blasOnce sync.Once
	blasLib  *blasAPI
	blasErr  error
)

func loadBlas() (*blasAPI, error) {
	blasOnce.Do(func() {
		api := &blasAPI{}
		if _, _, blasErr = openBound(LibCUBLAS, api.symbols()); blasErr == nil {
			blasLib = api
		}
	})
	return blasLib, blasErr
}

// Blas runs cuBLAS strided-batched GEMMs on one device (attention's
// per-head products in the native backend). The handle is used from the
// device thread only, and its workspace is fixed so captured graphs keep
// pointing at it.
type Blas struct {
	dev       *Device
	api       *blasAPI
	h         uintptr
	workspace Buffer
}

const blasWorkspaceBytes = 32 << 20

// NewBlas opens cuBLAS and creates a handle on dev.
func NewBlas(dev *Device) (*Blas, error) {
	api, err := loadBlas()
	if err != nil {
		return nil, err
	}
	b := &Blas{dev: dev, api: api}
	err = dev.Do(func() error {
		if st := api.cublasCreate(&b.h); st != 0 {
			return b.statusErr("cublasCreate", st)
		}
		ws, err := dev.Mem.Alloc(blasWorkspaceBytes)
		if err != nil {
			return err
		}
		b.workspace = ws
		if st := api.cublasSetWorkspace(b.h, ws.Ptr, blasWorkspaceBytes); st != 0 {
			return b.statusErr("cublasSetWorkspace", st)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Blas) statusErr(call string, st int32) error {
	return fmt.Errorf("%s: cuBLAS status %d (%s)", call, st, b.api.cublasGetStatusString(st))
}

// BatchedGemm is Batch independent row-major products with fixed strides
// (in elements) between the matrices of consecutive batches:
//
//	D_i[M, N] = Alpha · A_i[M, K] · op(B_i) + Beta · D_i,   i < Batch
//
// with the Gemm conventions for TransB, dtypes and leading dimensions.
type BatchedGemm struct {
	Gemm
	Batch                     int
	StrideA, StrideB, StrideD int64
}

// GemmStridedBatched enqueues g on s.
func (b *Blas) GemmStridedBatched(s Stream, g BatchedGemm, a, bm, d DevicePtr, alpha, beta float32) error {
	if err := g.validate(); err != nil {
		return err
	}
	if g.Batch <= 0 {
		return fmt.Errorf("batched gemm: batch %d must be positive", g.Batch)
	}
	inType, err := cudaDataType(g.DType)
	if err != nil {
		return err
	}
	outType, err := cudaDataType(g.OutDType)
	if err != nil {
		return err
	}
	c := g.columnMajor()
	return b.dev.Do(func() error {
		if b.dev.rec.record(opGemmBatched, uint64(c.transA)|uint64(c.transB)<<8|uint64(inType)<<16|uint64(outType)<<24,
			uint64(c.m), uint64(c.n), uint64(c.k), uint64(c.lda), uint64(c.ldb), uint64(c.ldd),
			uint64(g.StrideA), uint64(g.StrideB), uint64(g.StrideD), uint64(g.Batch),
			uint64(a), uint64(bm), uint64(d), uint64(math.Float32bits(alpha))|uint64(math.Float32bits(beta))<<32, uint64(s)) {
			return nil
		}
		if st := b.api.cublasSetStream(b.h, s); st != 0 {
			return b.statusErr("cublasSetStream", st)
		}
		ev := b.dev.profBegin(s)
		defer b.dev.profEnd(s, ev, func() string {
			return fmt.Sprintf("cublas batched m%d n%d k%d x%d", g.M, g.N, g.K, g.Batch)
		})
		st := b.api.cublasGemmStridedBatch(b.h, c.transA, c.transB, int32(c.m), int32(c.n), int32(c.k),
			unsafe.Pointer(&alpha),
			bm, inType, int32(c.lda), g.StrideB,
			a, inType, int32(c.ldb), g.StrideA,
			unsafe.Pointer(&beta),
			d, outType, int32(c.ldd), g.StrideD,
			int32(g.Batch), cublasCompute32F, cublasGemmDefault)
		if st != 0 {
			return b.statusErr("cublasGemmStridedBatchedEx", st)
		}
		return nil
	})
}

// Close destroys the handle and frees the workspace.
func (b *Blas) Close() error {
	return b.dev.Do(func() error {
		var errs []error
		if st := b.api.cublasDestroy(b.h); st != 0 {
			errs = append(errs, b.statusErr("cublasDestroy", st))
		}
		return errors.Join(append(errs, b.dev.Mem.Free(b.workspace))...)
	})
}
