package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"unsafe"
)

// CudnnDataType is a cudnnDataType_t.
type CudnnDataType int32

const (
	CudnnFloat    CudnnDataType = 0
	CudnnHalf     CudnnDataType = 2
	CudnnInt32    CudnnDataType = 4
	CudnnBFloat16 CudnnDataType = 9
	CudnnBoolean  CudnnDataType = 11
)

func (t CudnnDataType) String() string {
	switch t {
	case CudnnFloat:
		return "FLOAT"
	case CudnnHalf:
		return "HALF"
	case CudnnInt32:
		return "INT32"
	case CudnnBFloat16:
		return "BFLOAT16"
	case CudnnBoolean:
		return "BOOLEAN"
	}
	return fmt.Sprintf("cudnnDataType_t(%d)", int32(t))
}

// CudnnPointwise is a cudnnPointwiseMode_t.
type CudnnPointwise int32

const (
	CudnnAdd          CudnnPointwise = 0
	CudnnMul          CudnnPointwise = 1
	CudnnSub          CudnnPointwise = 9
	CudnnDiv          CudnnPointwise = 6
	CudnnExp          CudnnPointwise = 13
	CudnnLog          CudnnPointwise = 15
	CudnnCmpGE        CudnnPointwise = 303
	CudnnCmpLT        CudnnPointwise = 304
	CudnnLogicalAnd   CudnnPointwise = 400
	CudnnGenIndex     CudnnPointwise = 501
	CudnnBinarySelect CudnnPointwise = 601
)

// inputs is how many tensors the mode reads (x; x, b; x, b, t).
func (m CudnnPointwise) inputs() int {
	switch m {
	case CudnnExp, CudnnLog, CudnnGenIndex:
		return 1
	case CudnnBinarySelect:
		return 3
	}
	return 2
}

// CudnnReduce is a cudnnReduceTensorOp_t.
type CudnnReduce int32

const (
	CudnnReduceAdd CudnnReduce = 0
	CudnnReduceMax CudnnReduce = 3
)

// CudnnTensor is one tensor of an operation graph. A virtual tensor lives
// only inside the fused kernel; a by-value tensor is a host scalar (its
// value travels in the variant pack); any other is device memory bound by
// UID at execution.
type CudnnTensor struct {
	UID     int64
	Name    string
	DType   CudnnDataType
	Dims    []int64
	Strides []int64
	Virtual bool
	ByValue bool
	// Value is a by-value scalar's bits: a float32's or an int32's.
	Value uint32
	// Ragged is the UID of the [B+1,1,1,1] int32 tensor of per-batch
	// element offsets (0: none): batch i starts Ragged[i] elements in.
	Ragged int64
}

// CudnnOpKind is the kind of one graph operation.
type CudnnOpKind int

const (
	CudnnOpMatmul CudnnOpKind = iota + 1
	CudnnOpPointwise
	CudnnOpReduction
	CudnnOpPagedLoad
)

// CudnnOp is one operation of a graph. In lists the input UIDs: matmul
// A, B; pointwise x (, b (, t)); reduction x; paged load container, page
// table, sequence lengths.
type CudnnOp struct {
	Kind    CudnnOpKind
	Name    string
	Compute CudnnDataType
	Mode    CudnnPointwise // pointwise
	Reduce  CudnnReduce    // reduction
	Axis    int64          // GEN_INDEX axis
	In      []int64
	Out     int64
	// Matmul dimension overrides: UIDs of [B,1,1,1] int32 tensors giving
	// each batch's M, N or K (0: the full dimension).
	MOverride, NOverride, KOverride int64
}

// CudnnGraph is an operation graph as data: Build turns it into backend
// descriptors, and it can be checked (Validate) without the library.
type CudnnGraph struct {
	Tensors []CudnnTensor
	Ops     []CudnnOp
}

// Tensor returns the tensor with uid, or nil.
func (g *CudnnGraph) Tensor(uid int64) *CudnnTensor {
	for i := range g.Tensors {
		if g.Tensors[i].UID == uid {
			return &g.Tensors[i]
		}
	}
	return nil
}

// Bound lists the UIDs an execution binds to device memory, ascending:
// every tensor that is neither virtual nor by value.
func (g *CudnnGraph) Bound() []int64 {
	var uids []int64
	for _, t := range g.Tensors {
		if !t.Virtual && !t.ByValue {
			uids = append(uids, t.UID)
		}
	}
	slices.Sort(uids)
	return uids
}

// Validate checks what cuDNN would otherwise report late or not at all:
// unique positive UIDs, dims and strides of one rank, ragged offsets that
// exist and are int32, every op input defined, every virtual tensor
// written exactly once before it is read, and op arities.
func (g *CudnnGraph) Validate() error {
	seen := map[int64]*CudnnTensor{}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.UID <= 0 {
			return fmt.Errorf("tensor %s: uid %d must be positive", t.Name, t.UID)
		}
		if _, dup := seen[t.UID]; dup {
			return fmt.Errorf("tensor %s: uid %d used twice", t.Name, t.UID)
		}
		seen[t.UID] = t
		if len(t.Dims) == 0 || len(t.Dims) != len(t.Strides) {
			return fmt.Errorf("tensor %s: %d dims, %d strides", t.Name, len(t.Dims), len(t.Strides))
		}
		for d := range t.Dims {
			if t.Dims[d] <= 0 || t.Strides[d] <= 0 {
				return fmt.Errorf("tensor %s: dims %v strides %v must be positive", t.Name, t.Dims, t.Strides)
			}
		}
		if t.Virtual && t.ByValue {
			return fmt.Errorf("tensor %s: virtual and by value", t.Name)
		}
	}
	for _, t := range g.Tensors {
		if t.Ragged == 0 {
			continue
		}
		r := seen[t.Ragged]
		if r == nil || r.DType != CudnnInt32 || r.Virtual || r.Ragged != 0 {
			return fmt.Errorf("tensor %s: ragged offsets %d must be a device int32 tensor of the graph", t.Name, t.Ragged)
		}
		if r.Dims[0] != t.Dims[0]+1 {
			return fmt.Errorf("tensor %s: %d ragged offsets for batch %d, want batch+1", t.Name, r.Dims[0], t.Dims[0])
		}
	}
	written := map[int64]bool{}
	for _, op := range g.Ops {
		want := 0
		switch op.Kind {
		case CudnnOpMatmul:
			want = 2
		case CudnnOpPointwise:
			want = op.Mode.inputs()
		case CudnnOpReduction:
			want = 1
		case CudnnOpPagedLoad:
			want = 3
		default:
			return fmt.Errorf("op %s: unknown kind %d", op.Name, op.Kind)
		}
		if len(op.In) != want {
			return fmt.Errorf("op %s: %d inputs, want %d", op.Name, len(op.In), want)
		}
		for _, uid := range append(slices.Clone(op.In), op.MOverride, op.NOverride, op.KOverride) {
			if uid == 0 {
				continue
			}
			t := seen[uid]
			if t == nil {
				return fmt.Errorf("op %s: input uid %d is not a tensor of the graph", op.Name, uid)
			}
			if t.Virtual && !written[uid] {
				return fmt.Errorf("op %s: reads virtual tensor %s before any op writes it", op.Name, t.Name)
			}
		}
		out := seen[op.Out]
		if out == nil {
			return fmt.Errorf("op %s: output uid %d is not a tensor of the graph", op.Name, op.Out)
		}
		if out.ByValue || written[op.Out] {
			return fmt.Errorf("op %s: output %s is by value or written twice", op.Name, out.Name)
		}
		written[op.Out] = true
	}
	for _, t := range g.Tensors {
		if t.Virtual && !written[t.UID] {
			return fmt.Errorf("virtual tensor %s is never written", t.Name)
		}
	}
	return nil
}

// cudnnBuilder creates, sets and finalizes backend descriptors, naming the
// descriptor type, attribute and graph element in every error, and
// destroys what it created.
type cudnnBuilder struct {
	api   *cudnnAPI
	descs []uintptr
}

func (b *cudnnBuilder) create(t cudnnDescType, element string) (uintptr, error) {
	var d uintptr
	if err := b.api.fail(b.api.cudnnBackendCreateDescriptor(int32(t), &d), "cudnnBackendCreateDescriptor", t, "", element); err != nil {
		return 0, err
	}
	b.descs = append(b.descs, d)
	return d, nil
}

func (b *cudnnBuilder) set(d uintptr, t cudnnDescType, a cudnnAttr, element string, count int, elems unsafe.Pointer) error {
	return b.api.fail(b.api.cudnnBackendSetAttribute(d, a.id, a.typ, int64(count), elems), "cudnnBackendSetAttribute", t, a.name, element)
}

func (b *cudnnBuilder) setInt64(d uintptr, t cudnnDescType, a cudnnAttr, element string, v ...int64) error {
	return b.set(d, t, a, element, len(v), unsafe.Pointer(&v[0]))
}

// setEnum sets a 32-bit enum or data type attribute.
func (b *cudnnBuilder) setEnum(d uintptr, t cudnnDescType, a cudnnAttr, element string, v int32) error {
	return b.set(d, t, a, element, 1, unsafe.Pointer(&v))
}

func (b *cudnnBuilder) setBool(d uintptr, t cudnnDescType, a cudnnAttr, element string) error {
	v := true // C bool: one byte
	return b.set(d, t, a, element, 1, unsafe.Pointer(&v))
}

func (b *cudnnBuilder) setFloat(d uintptr, t cudnnDescType, a cudnnAttr, element string, v float32) error {
	return b.set(d, t, a, element, 1, unsafe.Pointer(&v))
}

func (b *cudnnBuilder) setDesc(d uintptr, t cudnnDescType, a cudnnAttr, element string, v ...uintptr) error {
	return b.set(d, t, a, element, len(v), unsafe.Pointer(&v[0]))
}

func (b *cudnnBuilder) finalize(d uintptr, t cudnnDescType, element string) error {
	return b.api.fail(b.api.cudnnBackendFinalize(d), "cudnnBackendFinalize", t, "", element)
}

// destroy releases every descriptor created, newest first.
func (b *cudnnBuilder) destroy() {
	for i := len(b.descs) - 1; i >= 0; i-- {
		b.api.cudnnBackendDestroyDescriptor(b.descs[i])
	}
	b.descs = nil
}

// tensor builds one tensor descriptor.
func (b *cudnnBuilder) tensor(t *CudnnTensor, ragged uintptr) (uintptr, error) {
	el := fmt.Sprintf("tensor %s (uid %d)", t.Name, t.UID)
	const ty = cudnnTensorDesc
	d, err := b.create(ty, el)
	if err != nil {
		return 0, err
	}
	steps := []func() error{
		func() error { return b.setEnum(d, ty, attrTensorDataType, el, int32(t.DType)) },
		func() error { return b.setInt64(d, ty, attrTensorDims, el, t.Dims...) },
		func() error { return b.setInt64(d, ty, attrTensorStrides, el, t.Strides...) },
		func() error { return b.setInt64(d, ty, attrTensorUID, el, t.UID) },
		func() error { return b.setInt64(d, ty, attrTensorAlignment, el, 16) },
	}
	if t.Virtual {
		steps = append(steps, func() error { return b.setBool(d, ty, attrTensorVirtual, el) })
	}
	if t.ByValue {
		steps = append(steps, func() error { return b.setBool(d, ty, attrTensorByValue, el) })
	}
	if ragged != 0 {
		steps = append(steps, func() error { return b.setDesc(d, ty, attrTensorRagged, el, ragged) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return 0, err
		}
	}
	return d, b.finalize(d, ty, el)
}

// descAttr is one descriptor-valued attribute to set.
type descAttr struct {
	a cudnnAttr
	d uintptr
}

// described creates a descriptor of type ty, sets its descriptor-valued
// attributes, then those more sets (nil: none), and finalizes it.
func (b *cudnnBuilder) described(ty cudnnDescType, el string, attrs []descAttr, more func(d uintptr) error) (uintptr, error) {
	d, err := b.create(ty, el)
	if err != nil {
		return 0, err
	}
	for _, s := range attrs {
		if err := b.setDesc(d, ty, s.a, el, s.d); err != nil {
			return 0, err
		}
	}
	if more != nil {
		if err := more(d); err != nil {
			return 0, err
		}
	}
	return d, b.finalize(d, ty, el)
}

// enums sets 32-bit enum attributes in order.
func (b *cudnnBuilder) enums(ty cudnnDescType, el string, attrs []cudnnAttr, vals ...int32) func(d uintptr) error {
	return func(d uintptr) error {
		for i, a := range attrs {
			if err := b.setEnum(d, ty, a, el, vals[i]); err != nil {
				return err
			}
		}
		return nil
	}
}

// op builds one operation descriptor over the tensor descriptors.
func (b *cudnnBuilder) op(op *CudnnOp, td map[int64]uintptr) (uintptr, error) {
	el := "op " + op.Name
	in := func(i int) uintptr { return td[op.In[i]] }
	out := td[op.Out]
	switch op.Kind {
	case CudnnOpMatmul:
		md, err := b.described(cudnnMatmulDesc, el, nil, b.enums(cudnnMatmulDesc, el, []cudnnAttr{attrMatmulCompType}, int32(op.Compute)))
		if err != nil {
			return 0, err
		}
		attrs := []descAttr{{attrMatmulOpA, in(0)}, {attrMatmulOpB, in(1)}, {attrMatmulOpC, out}, {attrMatmulOpDesc, md}}
		for _, o := range []struct {
			a   cudnnAttr
			uid int64
		}{{attrMatmulOpM, op.MOverride}, {attrMatmulOpN, op.NOverride}, {attrMatmulOpK, op.KOverride}} {
			if o.uid != 0 {
				attrs = append(attrs, descAttr{o.a, td[o.uid]})
			}
		}
		return b.described(cudnnOpMatmulDesc, el, attrs, nil)
	case CudnnOpPointwise:
		const pty = cudnnPointwiseDesc
		pd, err := b.described(pty, el, nil, func(d uintptr) error {
			if err := b.enums(pty, el, []cudnnAttr{attrPointwiseMode, attrPointwiseMathPrec}, int32(op.Mode), int32(op.Compute))(d); err != nil {
				return err
			}
			if op.Mode == CudnnGenIndex {
				return b.setInt64(d, pty, attrPointwiseAxis, el, op.Axis)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		attrs := []descAttr{{attrPwOpDesc, pd}, {attrPwOpX, in(0)}, {attrPwOpY, out}}
		if len(op.In) > 1 {
			attrs = append(attrs, descAttr{attrPwOpB, in(1)})
		}
		if len(op.In) > 2 {
			attrs = append(attrs, descAttr{attrPwOpT, in(2)})
		}
		const ty = cudnnOpPointwiseDesc
		return b.described(ty, el, attrs, func(d uintptr) error {
			if err := b.setFloat(d, ty, attrPwOpAlpha1, el, 1); err != nil {
				return err
			}
			return b.setFloat(d, ty, attrPwOpAlpha2, el, 1)
		})
	case CudnnOpReduction:
		rd, err := b.described(cudnnReductionDesc, el, nil,
			b.enums(cudnnReductionDesc, el, []cudnnAttr{attrReductionCompType, attrReductionOperator}, int32(op.Compute), int32(op.Reduce)))
		if err != nil {
			return 0, err
		}
		return b.described(cudnnOpReductionDesc, el, []descAttr{{attrReductionOpDesc, rd}, {attrReductionOpX, in(0)}, {attrReductionOpY, out}}, nil)
	case CudnnOpPagedLoad:
		return b.described(cudnnOpPagedCacheLoadDesc, el,
			[]descAttr{{attrPagedContainer, in(0)}, {attrPagedTable, in(1)}, {attrPagedSequence, in(2)}, {attrPagedY, out}}, nil)
	}
	return 0, fmt.Errorf("cuDNN graph: op %s has unknown kind %d", op.Name, op.Kind)
}

// buildPlan turns g into an execution plan on handle h: tensor and
// operation descriptors, the operation graph, heuristics (mode A, then the
// fallback list), and the first engine configuration that finalizes. The
// builder keeps every descriptor until the plan is closed.
func (b *cudnnBuilder) buildPlan(g *CudnnGraph, h uintptr) (plan uintptr, workspace int64, err error) {
	if err := g.Validate(); err != nil {
		return 0, 0, fmt.Errorf("cuDNN graph: %w", err)
	}
	td := map[int64]uintptr{}
	// Ragged-offset tensors first: a tensor takes its offsets' descriptor.
	order := slices.Clone(g.Tensors)
	slices.SortStableFunc(order, func(x, y CudnnTensor) int {
		return boolInt(x.Ragged != 0) - boolInt(y.Ragged != 0)
	})
	for i := range order {
		t := &order[i]
		d, err := b.tensor(t, td[t.Ragged])
		if err != nil {
			return 0, 0, err
		}
		td[t.UID] = d
	}
	ops := make([]uintptr, len(g.Ops))
	for i := range g.Ops {
		if ops[i], err = b.op(&g.Ops[i], td); err != nil {
			return 0, 0, err
		}
	}
	const gty, gel = cudnnOperationGraphDesc, "operation graph"
	opGraph, err := b.described(gty, gel, []descAttr{{attrGraphHandle, h}}, func(d uintptr) error {
		return b.setDesc(d, gty, attrGraphOps, gel, ops...)
	})
	if err != nil {
		return 0, 0, err
	}
	var tried []string
	for _, mode := range []int32{cudnnHeurModeA, cudnnHeurModeFallback} {
		cfgs, err := b.heuristics(opGraph, mode)
		if err != nil {
			return 0, 0, err
		}
		for i, cfg := range cfgs {
			el := fmt.Sprintf("engine config %d of heuristic mode %d", i, mode)
			plan, ws, err := b.plan(h, cfg, el)
			if err == nil {
				return plan, ws, nil
			}
			tried = append(tried, err.Error())
		}
	}
	if len(tried) == 0 {
		return 0, 0, errors.New("cuDNN: no engine supports this attention graph (heuristics returned no configuration)")
	}
	return 0, 0, fmt.Errorf("cuDNN: no engine configuration finalizes for this attention graph: %s", strings.Join(tried, " | "))
}

// heuristics lists the engine configurations heuristic mode proposes.
func (b *cudnnBuilder) heuristics(opGraph uintptr, mode int32) ([]uintptr, error) {
	const ty = cudnnEngineHeurDesc
	el := fmt.Sprintf("heuristics mode %d", mode)
	heur, err := b.described(ty, el, []descAttr{{attrHeurOperationGraph, opGraph}}, b.enums(ty, el, []cudnnAttr{attrHeurMode}, mode))
	if err != nil {
		return nil, err
	}
	var count int64
	a := attrHeurResults
	if err := b.api.fail(b.api.cudnnBackendGetAttribute(heur, a.id, a.typ, 0, &count, nil), "cudnnBackendGetAttribute", ty, a.name, el+", count"); err != nil {
		return nil, err
	}
	if count <= 0 {
		return nil, nil
	}
	cfgs := make([]uintptr, count)
	for i := range cfgs {
		if cfgs[i], err = b.create(cudnnEngineCfgDesc, el); err != nil {
			return nil, err
		}
	}
	var got int64
	if err := b.api.fail(b.api.cudnnBackendGetAttribute(heur, a.id, a.typ, count, &got, unsafe.Pointer(&cfgs[0])), "cudnnBackendGetAttribute", ty, a.name, el); err != nil {
		return nil, err
	}
	return cfgs[:min(got, count)], nil
}

// plan builds and finalizes an execution plan for one engine config and
// reads its workspace size.
func (b *cudnnBuilder) plan(h, cfg uintptr, el string) (uintptr, int64, error) {
	const ty = cudnnExecutionPlanDesc
	d, err := b.described(ty, el, []descAttr{{attrPlanHandle, h}, {attrPlanEngineConfig, cfg}}, nil)
	if err != nil {
		return 0, 0, err
	}
	var ws, n int64
	a := attrPlanWorkspaceSize
	if err := b.api.fail(b.api.cudnnBackendGetAttribute(d, a.id, a.typ, 1, &n, unsafe.Pointer(&ws)), "cudnnBackendGetAttribute", ty, a.name, el); err != nil {
		return 0, 0, err
	}
	return d, ws, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Cudnn is a cuDNN handle on one device, used from the device thread.
type Cudnn struct {
	dev     *Device
	api     *cudnnAPI
	h       uintptr
	Version int
}

// NewCudnn loads cuDNN and creates a handle on dev.
func NewCudnn(dev *Device) (*Cudnn, error) {
	api, v, err := loadCudnn()
	if err != nil {
		return nil, err
	}
	c := &Cudnn{dev: dev, api: api, Version: v}
	err = dev.Do(func() error {
		return api.fail(api.cudnnCreate(&c.h), "cudnnCreate", -1, "", "")
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Close destroys the handle (plans first: CudnnPlan.Close).
func (c *Cudnn) Close() error {
	return c.dev.Do(func() error { return c.api.fail(c.api.cudnnDestroy(c.h), "cudnnDestroy", -1, "", "") })
}

// CudnnPlan is a finalized execution plan for one graph, with the values
// of its by-value tensors.
type CudnnPlan struct {
	c         *Cudnn
	b         cudnnBuilder
	plan      uintptr
	Workspace int64 // bytes of device workspace an execution needs
	bound     []int64
	// scalars holds the by-value tensors' values (uids in scalarUIDs):
	// the variant pack takes host pointers into it.
	scalars    []uint64
	scalarUIDs []int64
}

// Build turns g into an execution plan (on the device thread).
func (c *Cudnn) Build(g *CudnnGraph) (*CudnnPlan, error) {
	p := &CudnnPlan{c: c, b: cudnnBuilder{api: c.api}, bound: g.Bound()}
	for _, t := range g.Tensors {
		if t.ByValue {
			p.scalarUIDs = append(p.scalarUIDs, t.UID)
			p.scalars = append(p.scalars, uint64(t.Value))
		}
	}
	err := c.dev.Do(func() error {
		var err error
		p.plan, p.Workspace, err = p.b.buildPlan(g, c.h)
		return err
	})
	if err != nil {
		c.dev.Do(func() error { p.b.destroy(); return nil })
		return nil, err
	}
	return p, nil
}

// Execute runs the plan on stream s with the device pointers of every
// bound tensor (Bound) and a workspace of at least Workspace bytes. It
// cannot be part of a CUDA graph: a dry run or capture is refused.
func (p *CudnnPlan) Execute(s Stream, ptrs map[int64]DevicePtr, workspace DevicePtr) error {
	uids := make([]int64, 0, len(p.bound)+len(p.scalarUIDs))
	data := make([]uintptr, 0, cap(uids))
	for _, uid := range p.bound {
		ptr, ok := ptrs[uid]
		if !ok || ptr == 0 {
			return fmt.Errorf("cuDNN execute: no device pointer for tensor uid %d", uid)
		}
		uids = append(uids, uid)
		data = append(data, uintptr(ptr))
	}
	// The scalars are read on the host during cudnnBackendExecute; the
	// plan keeps them reachable, and the pinner keeps them in place.
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, uid := range p.scalarUIDs {
		pin.Pin(&p.scalars[i])
		uids = append(uids, uid)
		data = append(data, uintptr(unsafe.Pointer(&p.scalars[i])))
	}
	api := p.c.api
	return p.c.dev.Do(func() error {
		if rec := &p.c.dev.rec; rec.mode != recordOff {
			rec.refuse("cuDNN attention cannot run inside a CUDA graph")
			if rec.mode == recordDry {
				return nil
			}
		}
		pack := cudnnBuilder{api: api}
		defer pack.destroy()
		const ty = cudnnVariantPackDesc
		const el = "variant pack"
		d, err := pack.create(ty, el)
		if err != nil {
			return err
		}
		ws := uintptr(workspace)
		if err := pack.setInt64(d, ty, attrPackUIDs, el, uids...); err != nil {
			return err
		}
		if err := pack.set(d, ty, attrPackPointers, el, len(data), unsafe.Pointer(&data[0])); err != nil {
			return err
		}
		if err := pack.set(d, ty, attrPackWorkspace, el, 1, unsafe.Pointer(&ws)); err != nil {
			return err
		}
		if err := pack.finalize(d, ty, el); err != nil {
			return err
		}
		if err := api.fail(api.cudnnSetStream(p.c.h, s), "cudnnSetStream", -1, "", ""); err != nil {
			return err
		}
		ev := p.c.dev.profBegin(s)
		defer p.c.dev.profEnd(s, ev, func() string { return "cudnn sdpa" })
		err = api.fail(api.cudnnBackendExecute(p.c.h, p.plan, d), "cudnnBackendExecute", cudnnExecutionPlanDesc, "", "")
		runtime.KeepAlive(data)
		return err
	})
}

// Close destroys the plan's descriptors.
func (p *CudnnPlan) Close() error {
	return p.c.dev.Do(func() error { p.b.destroy(); return nil })
}

// CudnnFloat32 is a by-value float32 scalar's bits (CudnnTensor.Value).
func CudnnFloat32(v float32) uint32 { return math.Float32bits(v) }
