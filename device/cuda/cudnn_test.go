package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// fakeBackend emulates the bookkeeping of cuDNN's backend descriptor API
// (not its kernels): descriptors are typed, attributes are refused after
// finalization, a descriptor-valued attribute must name finalized
// descriptors, and heuristics hand out engine configurations whose plans
// finalize or not as the test says. It records every attribute set.
type fakeBackend struct {
	next      uintptr
	descs     map[uintptr]*fakeBackendDesc
	destroyed int
	// heur is how many configurations each heuristics mode returns;
	// planFails is how many execution plans fail to finalize first.
	heur      map[int32]int64
	planFails int
	// failSet, when set, makes a SetAttribute fail with its status.
	failSet func(ty cudnnDescType, attr int32, d *fakeBackendDesc) int32
}

type fakeBackendDesc struct {
	ty        cudnnDescType
	finalized bool
	attrs     map[int32][]uint64 // values widened to 64 bits
	types     map[int32]int32
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{next: 0x100, descs: map[uintptr]*fakeBackendDesc{}, heur: map[int32]int64{cudnnHeurModeA: 2}}
}

// elemBytes is the width of one element of an attribute type.
func fakeElemBytes(typ int32) int {
	switch typ {
	case cudnnTypeBoolean:
		return 1
	case cudnnTypeInt64, cudnnTypeDouble, cudnnTypeVoidPtr, cudnnTypeBackendDescriptor, cudnnTypeHandle:
		return 8
	}
	return 4
}

func (f *fakeBackend) api() *cudnnAPI {
	return &cudnnAPI{
		cudnnGetErrorString: func(st int32) string {
			return map[int32]string{2000: "CUDNN_STATUS_BAD_PARAM", 2004: "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED", 3000: "CUDNN_STATUS_NOT_SUPPORTED"}[st]
		},
		cudnnGetLastErrorString: func(buf *byte, n uint64) {
			copy(unsafe.Slice(buf, n), "fake: last error\x00")
		},
		cudnnBackendCreateDescriptor: func(typ int32, d *uintptr) int32 {
			f.next += 8
			f.descs[f.next] = &fakeBackendDesc{ty: cudnnDescType(typ), attrs: map[int32][]uint64{}, types: map[int32]int32{}}
			*d = f.next
			return 0
		},
		cudnnBackendDestroyDescriptor: func(d uintptr) int32 {
			delete(f.descs, d)
			f.destroyed++
			return 0
		},
		cudnnBackendSetAttribute: func(d uintptr, name, typ int32, count int64, elems unsafe.Pointer) int32 {
			desc := f.descs[d]
			if desc == nil || desc.finalized || count <= 0 || elems == nil {
				return 2000
			}
			if f.failSet != nil {
				if st := f.failSet(desc.ty, name, desc); st != 0 {
					return st
				}
			}
			w := fakeElemBytes(typ)
			raw := unsafe.Slice((*byte)(elems), int(count)*w)
			vals := make([]uint64, count)
			for i := range vals {
				for j := w - 1; j >= 0; j-- {
					vals[i] = vals[i]<<8 | uint64(raw[i*w+j])
				}
				if typ == cudnnTypeBackendDescriptor {
					if ref := f.descs[uintptr(vals[i])]; ref == nil || !ref.finalized {
						return 2004
					}
				}
			}
			desc.attrs[name], desc.types[name] = vals, typ
			return 0
		},
		cudnnBackendFinalize: func(d uintptr) int32 {
			desc := f.descs[d]
			if desc == nil || desc.finalized {
				return 2000
			}
			if desc.ty == cudnnExecutionPlanDesc && f.planFails > 0 {
				f.planFails--
				return 3000
			}
			desc.finalized = true
			return 0
		},
		cudnnBackendGetAttribute: func(d uintptr, name, typ int32, requested int64, count *int64, elems unsafe.Pointer) int32 {
			desc := f.descs[d]
			if desc == nil || !desc.finalized {
				return 2004
			}
			switch {
			case desc.ty == cudnnEngineHeurDesc && name == attrHeurResults.id:
				mode := int32(desc.attrs[attrHeurMode.id][0])
				n := f.heur[mode]
				*count = n
				if requested == 0 {
					return 0
				}
				for i, cfg := range unsafe.Slice((*uintptr)(elems), min(requested, n)) {
					if f.descs[cfg] == nil || f.descs[cfg].ty != cudnnEngineCfgDesc {
						return 2000
					}
					f.descs[cfg].finalized = true
					f.descs[cfg].attrs[-1] = []uint64{uint64(mode), uint64(i)}
				}
				return 0
			case desc.ty == cudnnExecutionPlanDesc && name == attrPlanWorkspaceSize.id:
				*count = 1
				*(*int64)(elems) = 4096
				return 0
			}
			return 2000
		},
	}
}

// byType lists the live descriptors of a type.
func (f *fakeBackend) byType(ty cudnnDescType) []*fakeBackendDesc {
	var out []*fakeBackendDesc
	for _, d := range f.descs {
		if d.ty == ty {
			out = append(out, d)
		}
	}
	return out
}

// testGraph has every kind of tensor and operation: a ragged input, a
// paged load, a matmul with overrides, a GEN_INDEX, a by-value scalar,
// a three-input select and a reduction.
func testGraph() *CudnnGraph {
	one := []int64{1, 1, 1, 1}
	return &CudnnGraph{
		Tensors: []CudnnTensor{
			{UID: 1, Name: "Q", DType: CudnnBFloat16, Dims: []int64{2, 4, 8, 64}, Strides: []int64{2048, 64, 256, 1}, Ragged: 9},
			{UID: 9, Name: "q_off", DType: CudnnInt32, Dims: []int64{3, 1, 1, 1}, Strides: one},
			{UID: 2, Name: "K", DType: CudnnBFloat16, Dims: []int64{16, 2, 4, 64}, Strides: []int64{512, 64, 128, 1}},
			{UID: 3, Name: "table", DType: CudnnInt32, Dims: []int64{2, 1, 2, 1}, Strides: []int64{2, 2, 1, 1}},
			{UID: 4, Name: "seq_kv", DType: CudnnInt32, Dims: []int64{2, 1, 1, 1}, Strides: one},
			{UID: 5, Name: "scale", DType: CudnnFloat, Dims: one, Strides: one, ByValue: true, Value: CudnnFloat32(0.125)},
			{UID: 101, Name: "Kt", DType: CudnnBFloat16, Dims: []int64{2, 2, 64, 8}, Strides: []int64{1024, 512, 1, 64}, Virtual: true},
			{UID: 102, Name: "S", DType: CudnnFloat, Dims: []int64{2, 4, 8, 8}, Strides: []int64{256, 64, 8, 1}, Virtual: true},
			{UID: 103, Name: "idx", DType: CudnnInt32, Dims: []int64{2, 4, 8, 8}, Strides: []int64{256, 64, 8, 1}, Virtual: true},
			{UID: 104, Name: "S2", DType: CudnnFloat, Dims: []int64{2, 4, 8, 8}, Strides: []int64{256, 64, 8, 1}, Virtual: true},
			{UID: 6, Name: "M", DType: CudnnFloat, Dims: []int64{2, 4, 8, 1}, Strides: []int64{32, 8, 1, 1}},
		},
		Ops: []CudnnOp{
			{Kind: CudnnOpPagedLoad, Name: "load", In: []int64{2, 3, 4}, Out: 101},
			{Kind: CudnnOpMatmul, Name: "mm", Compute: CudnnFloat, In: []int64{1, 101}, Out: 102, NOverride: 4},
			{Kind: CudnnOpPointwise, Name: "gen", Mode: CudnnGenIndex, Compute: CudnnInt32, Axis: 3, In: []int64{102}, Out: 103},
			{Kind: CudnnOpPointwise, Name: "sel", Mode: CudnnBinarySelect, Compute: CudnnFloat, In: []int64{102, 5, 103}, Out: 104},
			{Kind: CudnnOpReduction, Name: "max", Compute: CudnnFloat, Reduce: CudnnReduceMax, In: []int64{104}, Out: 6},
		},
	}
}

// TestCudnnBuildPlan: the graph becomes descriptors with the attributes
// it states (types, dims, strides, uids, virtual and by-value flags, the
// ragged offsets, overrides, the GEN_INDEX axis), every referenced
// descriptor finalized first; the first engine configuration whose plan
// finalizes is kept; and everything created is destroyed.
func TestCudnnBuildPlan(t *testing.T) {
	f := newFakeBackend()
	f.planFails = 1 // the first configuration is not supported
	b := cudnnBuilder{api: f.api()}
	plan, ws, err := b.buildPlan(testGraph(), 0x42)
	if err != nil {
		t.Fatal(err)
	}
	if ws != 4096 || f.descs[plan] == nil || f.descs[plan].ty != cudnnExecutionPlanDesc {
		t.Fatalf("plan %x (workspace %d)", plan, ws)
	}
	cfg := f.descs[uintptr(f.descs[plan].attrs[attrPlanEngineConfig.id][0])]
	if got := cfg.attrs[-1]; got[0] != cudnnHeurModeA || got[1] != 1 {
		t.Errorf("plan built from heuristic %v, want mode A's second configuration", got)
	}
	if h := f.descs[plan].attrs[attrPlanHandle.id]; h[0] != 0x42 || f.descs[plan].types[attrPlanHandle.id] != cudnnTypeHandle {
		t.Errorf("plan handle %v", h)
	}
	tensors := map[uint64]*fakeBackendDesc{}
	for _, d := range f.byType(cudnnTensorDesc) {
		tensors[d.attrs[attrTensorUID.id][0]] = d
	}
	for _, want := range testGraph().Tensors {
		d := tensors[uint64(want.UID)]
		if d == nil || !d.finalized {
			t.Fatalf("tensor %s: no finalized descriptor", want.Name)
		}
		if dt := d.attrs[attrTensorDataType.id]; dt[0] != uint64(want.DType) {
			t.Errorf("tensor %s: data type %v", want.Name, dt)
		}
		if fmt.Sprint(d.attrs[attrTensorDims.id]) != fmt.Sprint(want.Dims) || fmt.Sprint(d.attrs[attrTensorStrides.id]) != fmt.Sprint(want.Strides) {
			t.Errorf("tensor %s: dims %v strides %v", want.Name, d.attrs[attrTensorDims.id], d.attrs[attrTensorStrides.id])
		}
		_, virtual := d.attrs[attrTensorVirtual.id]
		_, byValue := d.attrs[attrTensorByValue.id]
		if virtual != want.Virtual || byValue != want.ByValue {
			t.Errorf("tensor %s: virtual %v by value %v", want.Name, virtual, byValue)
		}
		ragged, hasRagged := d.attrs[attrTensorRagged.id]
		if hasRagged != (want.Ragged != 0) || hasRagged && f.descs[uintptr(ragged[0])].attrs[attrTensorUID.id][0] != uint64(want.Ragged) {
			t.Errorf("tensor %s: ragged offsets %v, want uid %d", want.Name, ragged, want.Ragged)
		}
	}
	mm := f.byType(cudnnOpMatmulDesc)
	if len(mm) != 1 || mm[0].attrs[attrMatmulOpN.id] == nil || mm[0].attrs[attrMatmulOpM.id] != nil {
		t.Errorf("matmul overrides: %+v", mm)
	}
	for _, pw := range f.byType(cudnnPointwiseDesc) {
		axis, has := pw.attrs[attrPointwiseAxis.id]
		if gen := pw.attrs[attrPointwiseMode.id][0] == uint64(CudnnGenIndex); gen != has || gen && axis[0] != 3 {
			t.Errorf("pointwise mode %v: axis %v", pw.attrs[attrPointwiseMode.id], axis)
		}
	}
	sel := f.byType(cudnnOpPointwiseDesc)
	threeInputs := false
	for _, d := range sel {
		threeInputs = threeInputs || d.attrs[attrPwOpT.id] != nil
	}
	if !threeInputs {
		t.Error("the select's mask was not set as TDESC")
	}
	if g := f.byType(cudnnOperationGraphDesc); len(g) != 1 || len(g[0].attrs[attrGraphOps.id]) != len(testGraph().Ops) {
		t.Errorf("operation graph: %+v", g)
	}
	created := len(f.descs) + f.destroyed
	b.destroy()
	if len(f.descs) != 0 || f.destroyed != created {
		t.Errorf("%d descriptors left after destroy", len(f.descs))
	}
}

// TestCudnnBuildErrors: a failing call is reported with the call, the
// attribute, the descriptor type, the graph element, cuDNN's status name
// and its last error message; heuristics that propose nothing, and
// configurations that all fail, say so; a graph that does not validate
// never reaches the library.
func TestCudnnBuildErrors(t *testing.T) {
	f := newFakeBackend()
	f.failSet = func(ty cudnnDescType, attr int32, d *fakeBackendDesc) int32 {
		if ty == cudnnTensorDesc && attr == attrTensorStrides.id && d.attrs[attrTensorUID.id] == nil && d.attrs[attrTensorDims.id][0] == 16 {
			return 2000
		}
		return 0
	}
	b := cudnnBuilder{api: f.api()}
	_, _, err := b.buildPlan(testGraph(), 1)
	want := "cuDNN: cudnnBackendSetAttribute CUDNN_ATTR_TENSOR_STRIDES on CUDNN_BACKEND_TENSOR_DESCRIPTOR (tensor K (uid 2)): CUDNN_STATUS_BAD_PARAM (2000): fake: last error"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	var ce *CudnnError
	if !errors.As(err, &ce) || ce.Status != 2000 {
		t.Errorf("not a *CudnnError: %T", err)
	}
	b.destroy()
	if len(f.descs) != 0 {
		t.Errorf("%d descriptors leaked after a failure", len(f.descs))
	}

	f = newFakeBackend()
	f.heur = map[int32]int64{}
	b = cudnnBuilder{api: f.api()}
	if _, _, err := b.buildPlan(testGraph(), 1); err == nil || !strings.Contains(err.Error(), "heuristics returned no configuration") {
		t.Errorf("no configurations: %v", err)
	}
	f = newFakeBackend()
	f.heur = map[int32]int64{cudnnHeurModeA: 1, cudnnHeurModeFallback: 1}
	f.planFails = 2
	b = cudnnBuilder{api: f.api()}
	_, _, err = b.buildPlan(testGraph(), 1)
	if err == nil || strings.Count(err.Error(), "cudnnBackendFinalize on CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR") != 2 ||
		!strings.Contains(err.Error(), "CUDNN_STATUS_NOT_SUPPORTED (3000)") || !strings.Contains(err.Error(), "heuristic mode 2") {
		t.Errorf("every configuration failing: %v", err)
	}

	g := testGraph()
	g.Ops[0], g.Ops[1] = g.Ops[1], g.Ops[0] // the matmul reads Kt before the load writes it
	b = cudnnBuilder{api: f.api()}
	before := len(f.descs)
	if _, _, err := b.buildPlan(g, 1); err == nil || !strings.Contains(err.Error(), "reads virtual tensor Kt before any op writes it") || len(f.descs) != before {
		t.Errorf("invalid graph: %v (%d descriptors created)", err, len(f.descs)-before)
	}
}

// TestCudnnGraphValidate: the checks that keep a malformed graph from
// reaching cuDNN, one broken property at a time.
func TestCudnnGraphValidate(t *testing.T) {
	if err := testGraph().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		break_ func(g *CudnnGraph)
		want   string
	}{
		{"duplicate uid", func(g *CudnnGraph) { g.Tensors[2].UID = 1 }, "uid 1 used twice"},
		{"rank mismatch", func(g *CudnnGraph) { g.Tensors[0].Strides = g.Tensors[0].Strides[:3] }, "4 dims, 3 strides"},
		{"ragged batch", func(g *CudnnGraph) { g.Tensors[1].Dims = []int64{2, 1, 1, 1} }, "2 ragged offsets for batch 2"},
		{"ragged dtype", func(g *CudnnGraph) { g.Tensors[1].DType = CudnnFloat }, "must be a device int32 tensor"},
		{"missing input", func(g *CudnnGraph) { g.Ops[1].In[0] = 77 }, "input uid 77 is not a tensor"},
		{"arity", func(g *CudnnGraph) { g.Ops[3].In = g.Ops[3].In[:2] }, "2 inputs, want 3"},
		{"written twice", func(g *CudnnGraph) { g.Ops[2].Out = 102 }, "written twice"},
		{"never written", func(g *CudnnGraph) { g.Ops = g.Ops[:4]; g.Tensors[10].Virtual = true }, "virtual tensor M is never written"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := testGraph()
			c.break_(g)
			if err := g.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	if got := fmt.Sprint(testGraph().Bound()); got != "[1 2 3 4 6 9]" {
		t.Errorf("bound uids %s", got)
	}
}

// TestCudnnVersion: the releases the attention graphs refuse, by name.
func TestCudnnVersion(t *testing.T) {
	for v, want := range map[int]string{
		90700: "cuDNN 9.7.0 is too old: paged K/V with ragged queries needs 9.8.0 or newer",
		91000: "9.10.0 has known fused-attention bugs",
		91001: "9.10.1 has known fused-attention bugs",
		90800: "", 91002: "", 92700: "",
	} {
		err := CheckCudnnVersion(v)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%d: %v, want %q", v, err, want)
		}
	}
}
