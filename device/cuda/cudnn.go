package cuda

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// LibCUDNN is cuDNN 9's soname. Its backend (graph) API is stable across
// the 9.x releases: enum values are only ever appended.
const LibCUDNN = "libcudnn.so.9"

// CudnnMinVersion is the oldest cuDNN the attention graphs run on: paged
// K/V caches (9.5) combined with ragged queries (9.8).
const CudnnMinVersion = 90800

// cudnnBadVersions are releases whose fused attention is known wrong
// (cudnn-frontend refuses them too).
var cudnnBadVersions = map[int]string{
	91000: "9.10.0 has known fused-attention bugs; use 9.10.2 or newer",
	91001: "9.10.1 has known fused-attention bugs; use 9.10.2 or newer",
}

// cudnnAPI is the subset of libcudnn.so.9 gosling calls: the handle and the
// backend descriptor API (cudnn_graph.h).
type cudnnAPI struct {
	cudnnGetVersion               func() uint64
	cudnnGetErrorString           func(st int32) string
	cudnnCreate                   func(h *uintptr) int32
	cudnnDestroy                  func(h uintptr) int32
	cudnnSetStream                func(h uintptr, s Stream) int32
	cudnnBackendCreateDescriptor  func(typ int32, d *uintptr) int32
	cudnnBackendDestroyDescriptor func(d uintptr) int32
	cudnnBackendFinalize          func(d uintptr) int32
	cudnnBackendSetAttribute      func(d uintptr, name, typ int32, count int64, elems unsafe.Pointer) int32
	cudnnBackendGetAttribute      func(d uintptr, name, typ int32, requested int64, count *int64, elems unsafe.Pointer) int32
	cudnnBackendExecute           func(h, plan, pack uintptr) int32
	// cudnnGetLastErrorString (9.0+) fills buf with the library's last
	// error message; nil when the library lacks it.
	cudnnGetLastErrorString func(buf *byte, size uint64)
}

func (c *cudnnAPI) symbols() []symbol {
	return []symbol{
		{&c.cudnnGetVersion, []string{"cudnnGetVersion"}},
		{&c.cudnnGetErrorString, []string{"cudnnGetErrorString"}},
		{&c.cudnnCreate, []string{"cudnnCreate"}},
		{&c.cudnnDestroy, []string{"cudnnDestroy"}},
		{&c.cudnnSetStream, []string{"cudnnSetStream"}},
		{&c.cudnnBackendCreateDescriptor, []string{"cudnnBackendCreateDescriptor"}},
		{&c.cudnnBackendDestroyDescriptor, []string{"cudnnBackendDestroyDescriptor"}},
		{&c.cudnnBackendFinalize, []string{"cudnnBackendFinalize"}},
		{&c.cudnnBackendSetAttribute, []string{"cudnnBackendSetAttribute"}},
		{&c.cudnnBackendGetAttribute, []string{"cudnnBackendGetAttribute"}},
		{&c.cudnnBackendExecute, []string{"cudnnBackendExecute"}},
	}
}

var (
	cudnnOnce sync.Once
	cudnnLib  *cudnnAPI
	cudnnErr  error
	cudnnVer  int
	cudnnPath string
)

// loadCudnn opens libcudnn.so.9 once and checks its version.
func loadCudnn() (*cudnnAPI, int, error) {
	cudnnOnce.Do(func() {
		api := &cudnnAPI{}
		h, path, err := openBound(LibCUDNN, api.symbols())
		if err != nil {
			cudnnErr = err
			return
		}
		if bindFirst(h, &api.cudnnGetLastErrorString, []string{"cudnnGetLastErrorString"}) != nil {
			api.cudnnGetLastErrorString = nil
		}
		cudnnVer, cudnnPath = int(api.cudnnGetVersion()), path
		if cudnnErr = CheckCudnnVersion(cudnnVer); cudnnErr != nil {
			cudnnErr = fmt.Errorf("%s at %s: %w", LibCUDNN, path, cudnnErr)
			return
		}
		cudnnLib = api
	})
	return cudnnLib, cudnnVer, cudnnErr
}

// CheckCudnnVersion refuses a cuDNN release (cudnnGetVersion's number,
// major·10000 + minor·100 + patch) the attention graphs cannot run on.
func CheckCudnnVersion(v int) error {
	if v < CudnnMinVersion {
		return fmt.Errorf("cuDNN %s is too old: paged K/V with ragged queries needs %s or newer", CudnnVersionString(v), CudnnVersionString(CudnnMinVersion))
	}
	if why, bad := cudnnBadVersions[v]; bad {
		return fmt.Errorf("cuDNN %s", why)
	}
	return nil
}

// CudnnVersionString formats cudnnGetVersion's number as major.minor.patch.
func CudnnVersionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

// CudnnAvailable loads cuDNN and reports its version, or why it cannot be
// used (not found, too old, a release with known attention bugs).
func CudnnAvailable() (version int, err error) {
	_, v, err := loadCudnn()
	return v, err
}

// CudnnLoaded names the cuDNN this process loaded ("cuDNN 9.10.2 at
// /path/libcudnn.so.9"), or says why none was.
func CudnnLoaded() string {
	if _, _, err := loadCudnn(); err != nil {
		return "cuDNN not loaded: " + err.Error()
	}
	return fmt.Sprintf("cuDNN %s at %s", CudnnVersionString(cudnnVer), cudnnPath)
}

// cuDNN backend enums (cudnn_graph.h of cuDNN 9).
const (
	cudnnStatusSuccess = 0

	// cudnnBackendAttributeType_t
	cudnnTypeHandle            = 0
	cudnnTypeDataType          = 1
	cudnnTypeBoolean           = 2
	cudnnTypeInt64             = 3
	cudnnTypeFloat             = 4
	cudnnTypeDouble            = 5
	cudnnTypeVoidPtr           = 6
	cudnnTypeHeurMode          = 8
	cudnnTypePointwiseMode     = 14
	cudnnTypeBackendDescriptor = 15
	cudnnTypeReductionOperator = 18

	// cudnnBackendHeurMode_t
	cudnnHeurModeFallback = 2
	cudnnHeurModeA        = 3
)

// cudnnDescType is a cudnnBackendDescriptorType_t.
type cudnnDescType int32

const (
	cudnnPointwiseDesc        cudnnDescType = 0
	cudnnEngineDesc           cudnnDescType = 2
	cudnnEngineCfgDesc        cudnnDescType = 3
	cudnnEngineHeurDesc       cudnnDescType = 4
	cudnnExecutionPlanDesc    cudnnDescType = 5
	cudnnOpPointwiseDesc      cudnnDescType = 13
	cudnnOperationGraphDesc   cudnnDescType = 15
	cudnnVariantPackDesc      cudnnDescType = 16
	cudnnTensorDesc           cudnnDescType = 17
	cudnnMatmulDesc           cudnnDescType = 18
	cudnnOpMatmulDesc         cudnnDescType = 19
	cudnnReductionDesc        cudnnDescType = 21
	cudnnOpReductionDesc      cudnnDescType = 22
	cudnnOpPagedCacheLoadDesc cudnnDescType = 35
)

var cudnnDescNames = map[cudnnDescType]string{
	cudnnPointwiseDesc:        "CUDNN_BACKEND_POINTWISE_DESCRIPTOR",
	cudnnEngineDesc:           "CUDNN_BACKEND_ENGINE_DESCRIPTOR",
	cudnnEngineCfgDesc:        "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR",
	cudnnEngineHeurDesc:       "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR",
	cudnnExecutionPlanDesc:    "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR",
	cudnnOpPointwiseDesc:      "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR",
	cudnnOperationGraphDesc:   "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR",
	cudnnVariantPackDesc:      "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR",
	cudnnTensorDesc:           "CUDNN_BACKEND_TENSOR_DESCRIPTOR",
	cudnnMatmulDesc:           "CUDNN_BACKEND_MATMUL_DESCRIPTOR",
	cudnnOpMatmulDesc:         "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR",
	cudnnReductionDesc:        "CUDNN_BACKEND_REDUCTION_DESCRIPTOR",
	cudnnOpReductionDesc:      "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR",
	cudnnOpPagedCacheLoadDesc: "CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR",
}

func (t cudnnDescType) String() string {
	if s, ok := cudnnDescNames[t]; ok {
		return s
	}
	return fmt.Sprintf("cudnnBackendDescriptorType_t(%d)", int32(t))
}

// cudnnAttr is a cudnnBackendAttributeName_t, with the attribute type its
// value is set or read as.
type cudnnAttr struct {
	id   int32
	typ  int32
	name string
}

var (
	attrPointwiseMode     = cudnnAttr{0, cudnnTypePointwiseMode, "CUDNN_ATTR_POINTWISE_MODE"}
	attrPointwiseMathPrec = cudnnAttr{1, cudnnTypeDataType, "CUDNN_ATTR_POINTWISE_MATH_PREC"}
	attrPointwiseAxis     = cudnnAttr{9, cudnnTypeInt64, "CUDNN_ATTR_POINTWISE_AXIS"}

	attrHeurMode           = cudnnAttr{200, cudnnTypeHeurMode, "CUDNN_ATTR_ENGINEHEUR_MODE"}
	attrHeurOperationGraph = cudnnAttr{201, cudnnTypeBackendDescriptor, "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH"}
	attrHeurResults        = cudnnAttr{202, cudnnTypeBackendDescriptor, "CUDNN_ATTR_ENGINEHEUR_RESULTS"}

	attrPlanHandle        = cudnnAttr{400, cudnnTypeHandle, "CUDNN_ATTR_EXECUTION_PLAN_HANDLE"}
	attrPlanEngineConfig  = cudnnAttr{401, cudnnTypeBackendDescriptor, "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG"}
	attrPlanWorkspaceSize = cudnnAttr{402, cudnnTypeInt64, "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE"}

	attrPwOpDesc   = cudnnAttr{750, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR"}
	attrPwOpX      = cudnnAttr{751, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_POINTWISE_XDESC"}
	attrPwOpB      = cudnnAttr{752, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_POINTWISE_BDESC"}
	attrPwOpY      = cudnnAttr{753, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_POINTWISE_YDESC"}
	attrPwOpAlpha1 = cudnnAttr{754, cudnnTypeFloat, "CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1"}
	attrPwOpAlpha2 = cudnnAttr{755, cudnnTypeFloat, "CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2"}
	attrPwOpT      = cudnnAttr{758, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_POINTWISE_TDESC"}

	attrGraphHandle = cudnnAttr{800, cudnnTypeHandle, "CUDNN_ATTR_OPERATIONGRAPH_HANDLE"}
	attrGraphOps    = cudnnAttr{801, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATIONGRAPH_OPS"}

	attrTensorAlignment = cudnnAttr{900, cudnnTypeInt64, "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT"}
	attrTensorDataType  = cudnnAttr{901, cudnnTypeDataType, "CUDNN_ATTR_TENSOR_DATA_TYPE"}
	attrTensorDims      = cudnnAttr{902, cudnnTypeInt64, "CUDNN_ATTR_TENSOR_DIMENSIONS"}
	attrTensorStrides   = cudnnAttr{903, cudnnTypeInt64, "CUDNN_ATTR_TENSOR_STRIDES"}
	attrTensorUID       = cudnnAttr{906, cudnnTypeInt64, "CUDNN_ATTR_TENSOR_UNIQUE_ID"}
	attrTensorVirtual   = cudnnAttr{907, cudnnTypeBoolean, "CUDNN_ATTR_TENSOR_IS_VIRTUAL"}
	attrTensorByValue   = cudnnAttr{908, cudnnTypeBoolean, "CUDNN_ATTR_TENSOR_IS_BY_VALUE"}
	attrTensorRagged    = cudnnAttr{913, cudnnTypeBackendDescriptor, "CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC"}

	attrPackUIDs      = cudnnAttr{1000, cudnnTypeInt64, "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS"}
	attrPackPointers  = cudnnAttr{1001, cudnnTypeVoidPtr, "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS"}
	attrPackWorkspace = cudnnAttr{1003, cudnnTypeVoidPtr, "CUDNN_ATTR_VARIANT_PACK_WORKSPACE"}

	attrMatmulCompType = cudnnAttr{1500, cudnnTypeDataType, "CUDNN_ATTR_MATMUL_COMP_TYPE"}
	attrMatmulOpA      = cudnnAttr{1520, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_MATMUL_ADESC"}
	attrMatmulOpB      = cudnnAttr{1521, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_MATMUL_BDESC"}
	attrMatmulOpC      = cudnnAttr{1522, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_MATMUL_CDESC"}
	attrMatmulOpDesc   = cudnnAttr{1523, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_MATMUL_DESC"}
	attrMatmulOpM      = cudnnAttr{1525, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC"}
	attrMatmulOpN      = cudnnAttr{1526, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC"}
	attrMatmulOpK      = cudnnAttr{1527, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC"}

	attrReductionOperator = cudnnAttr{1600, cudnnTypeReductionOperator, "CUDNN_ATTR_REDUCTION_OPERATOR"}
	attrReductionCompType = cudnnAttr{1601, cudnnTypeDataType, "CUDNN_ATTR_REDUCTION_COMP_TYPE"}
	attrReductionOpX      = cudnnAttr{1610, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_REDUCTION_XDESC"}
	attrReductionOpY      = cudnnAttr{1611, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_REDUCTION_YDESC"}
	attrReductionOpDesc   = cudnnAttr{1612, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_REDUCTION_DESC"}

	attrPagedContainer = cudnnAttr{1950, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC"}
	attrPagedY         = cudnnAttr{1951, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC"}
	attrPagedSequence  = cudnnAttr{1952, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC"}
	attrPagedTable     = cudnnAttr{1953, cudnnTypeBackendDescriptor, "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC"}
)

// CudnnError is a failed cuDNN call, with everything needed to fix it
// from one log line: the call, the descriptor type and attribute it was
// on, the graph element being built, cuDNN's status and its last error
// message.
type CudnnError struct {
	Call    string // cudnnBackendSetAttribute, cudnnBackendFinalize, ...
	Desc    string // CUDNN_BACKEND_..._DESCRIPTOR ("" for handle calls)
	Attr    string // CUDNN_ATTR_... ("" when the call has none)
	Element string // what was being built ("tensor Q (uid 1)", "op bmm1"); "" if none
	Status  int32
	// StatusName is cudnnGetErrorString's text for Status; Last is
	// cudnnGetLastErrorString's message, when the library has one.
	StatusName, Last string
}

func (e *CudnnError) Error() string {
	var b strings.Builder
	b.WriteString("cuDNN: " + e.Call)
	if e.Attr != "" {
		b.WriteString(" " + e.Attr)
	}
	if e.Desc != "" {
		b.WriteString(" on " + e.Desc)
	}
	if e.Element != "" {
		b.WriteString(" (" + e.Element + ")")
	}
	fmt.Fprintf(&b, ": %s (%d)", e.StatusName, e.Status)
	if e.Last != "" {
		b.WriteString(": " + e.Last)
	}
	return b.String()
}

// cudnnLastError reads cudnnGetLastErrorString, "" without one.
func (api *cudnnAPI) lastError() string {
	if api.cudnnGetLastErrorString == nil {
		return ""
	}
	buf := make([]byte, 1024)
	api.cudnnGetLastErrorString(&buf[0], uint64(len(buf)))
	if i := strings.IndexByte(string(buf), 0); i >= 0 {
		buf = buf[:i]
	}
	return strings.TrimSpace(string(buf))
}

// fail builds the error of a failed call (nil for success).
func (api *cudnnAPI) fail(st int32, call string, desc cudnnDescType, attr, element string) error {
	if st == cudnnStatusSuccess {
		return nil
	}
	e := &CudnnError{Call: call, Attr: attr, Element: element, Status: st, StatusName: api.cudnnGetErrorString(st), Last: api.lastError()}
	if desc >= 0 {
		e.Desc = desc.String()
	}
	return e
}
