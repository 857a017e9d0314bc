package cuda

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// ModelOps is device.Ops on one GPU: the non-attention kernels a model runs,
// with float32 activations and linear weights in float32 or bfloat16.
//
// Memory. Weights, biases, norm vectors and RoPE frequency tables are
// uploaded once (exact-size cuMemAlloc, not the caching allocator: they
// live as long as the model) and freed by Close. Every activation comes
// from a per-forward arena over the device's caching allocator:
// BeginForward hands the previous forward's buffers back, EndForward leaves
// them valid (the engine reads logits with ToHost after EndForward), and
// Release hands single tensors back early, which a long prefill needs to
// stay within memory.
//
// Streams. All work goes on the one stream given to NewModelOps. Attention
// backends allocating from the same Device.Mem must use that stream too
// (attention/gpu.Runtime.Stream), so buffers recycled between them need no
// synchronisation (Allocator.Free's one-stream rule).
//
// Threads. Every method runs its device work inside Device.Do: called from
// any goroutine it hops to the device thread once per call; called inside
// Do (or Run), it runs directly. A forward should go inside Run.
//
// Errors. device.Ops has no error results, so a failure (misuse such as
// mismatched shapes, or a device error such as running out of memory)
// panics with an *OpError; Run turns that panic back into an error.
type ModelOps struct {
	dev    *Device
	k      *Kernels
	lt     *BlasLt
	stream Stream
	opts   ModelOpsOptions

	mu     sync.Mutex // guards owned and ropes (loaders may call Matrix from several goroutines)
	owned  map[DevicePtr]int
	ropes  map[*device.Rope]ropeFreq
	closed bool

	// Per-forward state, touched only on the device thread.
	arena      arena
	staging    staging
	stagingDev *deviceStaging
	uploads    uploadCache
	graph      graphState // CUDA graphs of whole forwards (modelops_graph.go)
}

var _ device.Ops = (*ModelOps)(nil)

// ModelOpsOptions configure a ModelOps.
type ModelOpsOptions struct {
	// WeightDType is how linear weights and embedding tables are stored on
	// the device: F32 (the zero value), BF16 or F16. Checkpoints in any
	// stored dtype (F32, F16, BF16, Q8_0, FP8) are converted on upload.
	// Activations are float32 either way; with 16-bit weights, Linear
	// rounds its input to their type and accumulates in float32.
	WeightDType DType
	// KeepQuantized keeps matrices stored in the GGUF block formats
	// QuantOnDevice names in their blocks on the device (quant.go)
	// instead of converting them to WeightDType.
	KeepQuantized bool
}

// Validate reports options NewModelOps cannot use, as a user-facing sentence.
func (o ModelOpsOptions) Validate() error {
	switch o.WeightDType {
	case F32, BF16, F16:
		return nil
	}
	return fmt.Errorf("CUDA model weights in %v are not supported (use float32, bfloat16 or float16)", o.WeightDType)
}

// NewModelOps runs model kernels on dev with the loaded kernels and
// cuBLASLt handle, all on stream (share it with the attention runtime;
// dev.Stream is the usual choice). It allocates nothing until used. It
// panics on options that fail Validate, which the caller checks first.
func NewModelOps(dev *Device, k *Kernels, lt *BlasLt, stream Stream, opts ModelOpsOptions) *ModelOps {
	if err := opts.Validate(); err != nil {
		panic(&OpError{Op: "NewModelOps", Err: err})
	}
	o := &ModelOps{
		dev: dev, k: k, lt: lt, stream: stream, opts: opts,
		owned: map[DevicePtr]int{},
		ropes: map[*device.Rope]ropeFreq{},
	}
	o.arena = newArena(dev.Mem)
	o.stagingDev = &deviceStaging{dev: dev, stream: stream}
	o.staging = staging{be: o.stagingDev}
	return o
}

// OpError is the panic value of a failed ModelOps method.
type OpError struct {
	Op  string // the method, "Linear"
	Err error
}

func (e *OpError) Error() string { return "cuda " + e.Op + ": " + e.Err.Error() }
func (e *OpError) Unwrap() error { return e.Err }

// must panics with an *OpError when err is not nil.
func must(op string, err error) {
	if err != nil {
		panic(&OpError{Op: op, Err: err})
	}
}

// do runs fn on the device thread, panicking with an *OpError if it fails.
func (o *ModelOps) do(op string, fn func() error) {
	must(op, o.dev.Do(fn))
}

// Run runs fn on the device thread, so every ModelOps call inside it (a
// whole forward) runs directly, and returns an *OpError panic raised inside
// it as its error. Other panics pass through.
func (o *ModelOps) Run(fn func() error) error {
	return o.catch(func() error { return o.dev.Do(fn) })
}

// Name is "cuda".
func (o *ModelOps) Name() string { return "cuda" }

// Device, Kernels, BlasLt and Stream are what the ModelOps runs on (for
// work beside it, such as device-side sampling on the same stream).
func (o *ModelOps) Device() *Device   { return o.dev }
func (o *ModelOps) Kernels() *Kernels { return o.k }
func (o *ModelOps) BlasLt() *BlasLt   { return o.lt }
func (o *ModelOps) Stream() Stream    { return o.stream }

// WeightDType is how matrices are stored on the device.
func (o *ModelOps) WeightDType() DType { return o.opts.WeightDType }

// Matrix is a linear layer's weight on the device, [Out, In] row-major in
// DType, with an optional float32 bias [Out]. It belongs to the ModelOps
// that made it and is freed by its Close.
type Matrix struct {
	out, in int
	dtype   DType
	ptr     DevicePtr
	bias    DevicePtr    // 0: none
	fp8     *fp8Weights  // the scales of an FP8E4M3 matrix (fp8.go)
	quant   *quantMatrix // a GGUF block format kept compact (quant.go)
}

func (m *Matrix) Out() int { return m.out }
func (m *Matrix) In() int  { return m.in }

// DType is the element type of the weight on the device.
func (m *Matrix) DType() DType { return m.dtype }

// Ptr is the weight's device address; Bias the bias's (0 when none).
func (m *Matrix) Ptr() DevicePtr  { return m.ptr }
func (m *Matrix) Bias() DevicePtr { return m.bias }

// Vector is a 1-D float32 weight on the device (a norm's scale).
type Vector struct {
	n   int
	ptr DevicePtr
}

func (v *Vector) Len() int { return v.n }

// Ptr is the vector's device address.
func (v *Vector) Ptr() DevicePtr { return v.ptr }

type ropeFreq struct {
	ptr DevicePtr
	rot int // rotary dims: 2·len(InvFreq) values of each head rotate
}

// weightChunkBytes bounds the converted host copy a Matrix upload holds at
// once: a 128K-vocabulary head converted whole would be gigabytes.
const weightChunkBytes = 16 << 20

// Matrix converts w ([out, in] in any stored dtype) to the weight dtype and
// uploads it, with bias ([out] or nil) as float32. The host conversion runs
// on the caller's goroutine (on every core, through tensor.Convert), one
// chunk of rows at a time; only the copies go to the device thread, so
// loaders may call Matrix from several goroutines. A synthetic weight
// (w.Synthetic, dummy weights) is made on the device by the fill kernel, in
// the weight dtype: nothing is made on the host or uploaded.
func (o *ModelOps) Matrix(w tensor.Weight, bias []float32) (device.Matrix, error) {
	if o.keepsQuantized(w) {
		m, err := o.quantMatrixUpload(w, bias)
		if err != nil {
			return nil, fmt.Errorf("cuda: weight %s: %w", w.Name, err)
		}
		return m, nil
	}
	plan, err := planWeight(w, o.opts.WeightDType, weightChunkBytes)
	if err != nil {
		return nil, fmt.Errorf("cuda: weight %s: %w", w.Name, err)
	}
	if bias != nil && len(bias) != plan.Out {
		return nil, fmt.Errorf("cuda: weight %s: bias of %d values for %d outputs", w.Name, len(bias), plan.Out)
	}
	m := &Matrix{out: plan.Out, in: plan.In, dtype: plan.DType}
	if m.ptr, err = o.ownedAlloc(plan.Bytes()); err != nil {
		return nil, fmt.Errorf("cuda: weight %s (%d bytes): %w", w.Name, plan.Bytes(), err)
	}
	if w.Synthetic != nil {
		err = o.fillSynthetic(m.ptr, plan, *w.Synthetic)
	} else {
		err = o.uploadWeight(m.ptr, plan, w)
	}
	if err != nil {
		o.ownedFree(m.ptr)
		return nil, fmt.Errorf("cuda: weight %s: %w", w.Name, err)
	}
	if bias != nil {
		if m.bias, err = o.uploadOwned(bias); err != nil {
			o.ownedFree(m.ptr)
			return nil, fmt.Errorf("cuda: upload bias of %s: %w", w.Name, err)
		}
	}
	return m, nil
}

// MatrixGroup is device.MatrixGrouper: the weights are uploaded into one
// allocation, one after another, so that when their dtypes and input
// widths agree and each is a whole number of 16-byte words, matrix i+1
// starts where matrix i ends (adjacent: one GEMM serves them all, see
// linear). Otherwise they are Matrix's.
func (o *ModelOps) MatrixGroup(ws []tensor.Weight, biases [][]float32) ([]device.Matrix, error) {
	plans := make([]weightPlan, len(ws))
	total, contiguous := 0, len(ws) > 1
	for i, w := range ws {
		// Compact matrices are uploaded one by one (quantLinear groups
		// them into one launch without adjacency).
		contiguous = contiguous && !o.keepsQuantized(w)
		plan, err := planWeight(w, o.opts.WeightDType, weightChunkBytes)
		if err != nil {
			return nil, fmt.Errorf("cuda: weight %s: %w", w.Name, err)
		}
		if biases != nil && biases[i] != nil && len(biases[i]) != plan.Out {
			return nil, fmt.Errorf("cuda: weight %s: bias of %d values for %d outputs", w.Name, len(biases[i]), plan.Out)
		}
		plans[i] = plan
		total += plan.Bytes()
		contiguous = contiguous && plan.Bytes()%16 == 0 && plan.DType == plans[0].DType && plan.In == plans[0].In
	}
	if !contiguous {
		ms := make([]device.Matrix, len(ws))
		for i, w := range ws {
			var b []float32
			if biases != nil {
				b = biases[i]
			}
			m, err := o.Matrix(w, b)
			if err != nil {
				return nil, err
			}
			ms[i] = m
		}
		return ms, nil
	}
	base, err := o.ownedAlloc(total)
	if err != nil {
		return nil, fmt.Errorf("cuda: weights %s… (%d bytes): %w", ws[0].Name, total, err)
	}
	ms := make([]device.Matrix, len(ws))
	at := base
	for i, w := range ws {
		m := &Matrix{out: plans[i].Out, in: plans[i].In, dtype: plans[i].DType, ptr: at}
		if w.Synthetic != nil {
			err = o.fillSynthetic(m.ptr, plans[i], *w.Synthetic)
		} else {
			err = o.uploadWeight(m.ptr, plans[i], w)
		}
		if err == nil && biases != nil && biases[i] != nil {
			m.bias, err = o.uploadOwned(biases[i])
		}
		if err != nil {
			return nil, fmt.Errorf("cuda: weight %s: %w", w.Name, err)
		}
		ms[i] = m
		at = at.Add(plans[i].Bytes())
	}
	return ms, nil
}

var _ device.MatrixGrouper = (*ModelOps)(nil)

// adjacent reports whether mats lie one after another in memory with the
// same dtype and input width (MatrixGroup): one GEMM with their summed
// outputs computes them all.
func adjacent(mats []*Matrix) bool {
	if len(mats) < 2 {
		return false
	}
	for i := 1; i < len(mats); i++ {
		p := mats[i-1]
		if mats[i].quant != nil || p.quant != nil || mats[i].dtype != p.dtype || mats[i].in != p.in ||
			mats[i].ptr != p.ptr.Add(p.out*p.in*ElemSize(p.dtype)) {
			return false
		}
	}
	return true
}

// uploadWeight converts w's rows as plan says and copies them to dst, one
// chunk at a time.
func (o *ModelOps) uploadWeight(dst DevicePtr, plan weightPlan, w tensor.Weight) error {
	for _, c := range plan.Chunks() {
		data, err := plan.rows(w, c[0], c[1])
		if err == nil {
			err = CopyHtoD(o.dev, dst.Add(c[0]*plan.RowBytes), data)
		}
		if err != nil {
			return fmt.Errorf("upload: %w", err)
		}
	}
	return nil
}

// Vector uploads v as float32.
func (o *ModelOps) Vector(v []float32) (device.Vector, error) {
	if len(v) == 0 {
		return nil, errors.New("cuda: empty vector")
	}
	p, err := o.uploadOwned(v)
	if err != nil {
		return nil, fmt.Errorf("cuda: upload vector of %d values: %w", len(v), err)
	}
	return &Vector{n: len(v), ptr: p}, nil
}

// ownedAlloc allocates memory that lives until Close.
func (o *ModelOps) ownedAlloc(bytes int) (DevicePtr, error) {
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return 0, errors.New("ModelOps is closed")
	}
	p, err := o.dev.Malloc(max(bytes, 1))
	if err != nil {
		return 0, err
	}
	o.mu.Lock()
	o.owned[p] = bytes
	o.mu.Unlock()
	return p, nil
}

func (o *ModelOps) ownedFree(p DevicePtr) {
	o.mu.Lock()
	delete(o.owned, p)
	o.mu.Unlock()
	o.dev.Free(p)
}

// uploadOwned copies float32 values to new owned memory (synchronously:
// these are load-time uploads).
func (o *ModelOps) uploadOwned(v []float32) (DevicePtr, error) {
	p, err := o.ownedAlloc(4 * len(v))
	if err != nil {
		return 0, err
	}
	if err := CopyHtoD(o.dev, p, v); err != nil {
		o.ownedFree(p)
		return 0, err
	}
	return p, nil
}

// WeightBytes is the device memory held by weights, biases, vectors and
// frequency tables.
func (o *ModelOps) WeightBytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, b := range o.owned {
		n += int64(b)
	}
	return n
}

// Close waits for the stream, then frees the activations, the staging
// memory and every weight. Matrices, vectors and tensors of this ModelOps
// are invalid afterwards. The device, kernels, cuBLASLt handle and stream
// belong to the caller and stay open.
func (o *ModelOps) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.mu.Unlock()
	return o.dev.Do(func() error {
		errs := []error{o.dev.StreamSync(o.stream), o.closeGraphs(), o.arena.reset(), o.staging.close(), o.stagingDev.close()}
		o.uploads.clear()
		o.mu.Lock()
		owned := o.owned
		o.owned = map[DevicePtr]int{}
		clear(o.ropes)
		o.mu.Unlock()
		for p := range owned {
			errs = append(errs, o.dev.Free(p))
		}
		return errors.Join(errs...)
	})
}

// weightPlan is how a stored weight becomes device memory.
type weightPlan struct {
	Out, In      int
	DType        DType // on the device
	RowBytes     int   // device bytes per row
	Direct       bool  // stored bytes are uploaded as they are (same dtype)
	RowsPerChunk int
}

// planWeight checks w and plans its upload as dt in chunks of about
// chunkBytes of converted data.
func planWeight(w tensor.Weight, dt DType, chunkBytes int) (weightPlan, error) {
	if err := (ModelOpsOptions{WeightDType: dt}).Validate(); err != nil {
		return weightPlan{}, err
	}
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return weightPlan{}, fmt.Errorf("want a 2-D [out, in] weight, have shape %v", w.Shape)
	}
	switch w.DType {
	case F32, F16, BF16, tensor.Q8_0, tensor.FP8E4M3:
	default:
		// The GGUF block formats (K-quants, IQ4) are widened at upload like
		// Q8_0: exact values, the device dtype's memory.
		if !tensor.IsBlockQuant(w.DType) {
			return weightPlan{}, fmt.Errorf("cannot decode stored dtype %v", w.DType)
		}
	}
	if err := w.Validate(); err != nil {
		return weightPlan{}, err
	}
	p := weightPlan{Out: w.Shape[0], In: w.Shape[1], DType: dt, Direct: w.DType == dt}
	p.RowBytes = p.In * ElemSize(dt)
	p.RowsPerChunk = max(1, chunkBytes/p.RowBytes)
	return p, nil
}

// Bytes is the device memory the weight takes.
func (p weightPlan) Bytes() int { return p.Out * p.RowBytes }

// Chunks are the row ranges [r0, r1) uploaded one at a time.
func (p weightPlan) Chunks() [][2]int {
	var out [][2]int
	for r := 0; r < p.Out; r += p.RowsPerChunk {
		out = append(out, [2]int{r, min(r+p.RowsPerChunk, p.Out)})
	}
	return out
}

// rows returns rows [r0, r1) of w as the device stores them: a view of the
// stored bytes when Direct, else a converted copy (made from the generator
// for a synthetic weight without bytes).
func (p weightPlan) rows(w tensor.Weight, r0, r1 int) ([]byte, error) {
	if w.Data == nil && w.Synthetic != nil {
		out := make([]byte, (r1-r0)*p.RowBytes)
		w.Synthetic.FillParallel(p.DType, r0*p.In, out)
		return out, nil
	}
	srcRow, err := w.DType.RowBytes(p.In)
	if err != nil {
		return nil, err
	}
	part := tensor.Weight{Name: w.Name, DType: w.DType, Shape: []int{r1 - r0, p.In}, Data: w.Data[r0*srcRow : r1*srcRow]}
	if p.Direct {
		return part.Data, nil
	}
	c, err := tensor.Convert(part, p.DType)
	if err != nil {
		return nil, err
	}
	return c.Data, nil
}
