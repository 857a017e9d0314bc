package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// A small two-layer model written once against device.Ops runs on
// ModelOps and on refOps, a plain host implementation of the same
// contract; the logits must agree. Then the forward lifecycle: recycled
// buffers, ToHost after EndForward, Release and Adopt.

// refOps is device.Ops on the host in float32 with float64 sums, taking
// weights as the device stores them (rounded to wdt) and, with bf16
// weights, Linear's input rounded to bf16 as ModelOps does.
type refOps struct{ wdt DType }

type refMatrix struct {
	out, in int
	w, bias []float32
}

func (m *refMatrix) Out() int { return m.out }
func (m *refMatrix) In() int  { return m.in }

type refVector []float32

func (v refVector) Len() int { return len(v) }

var _ device.Ops = refOps{}

func (refOps) Name() string { return "ref" }

func (r refOps) Matrix(w tensor.Weight, bias []float32) (device.Matrix, error) {
	return &refMatrix{out: w.Rows(), in: w.Cols(), w: roundAll(w.Float32(), r.wdt), bias: bias}, nil
}

func (refOps) Vector(v []float32) (device.Vector, error) { return refVector(slices.Clone(v)), nil }
func (refOps) BeginForward()                             {}
func (refOps) EndForward()                               {}
func (refOps) Adopt(tensor.T)                            {}

func (refOps) Embed(table device.Matrix, ids []int32) tensor.T {
	m := table.(*refMatrix)
	out := tensor.New(len(ids), m.in)
	for i, id := range ids {
		copy(out.Row(i), m.w[int(id)*m.in:(int(id)+1)*m.in])
	}
	return out
}

func (r refOps) Linear(x tensor.T, mat device.Matrix) tensor.T {
	m := mat.(*refMatrix)
	y := linearRef(x.HostData(), m.w, m.bias, x.Rows(), m.in, m.out, r.wdt)
	return tensor.From(y, withCols(x.Shape, m.out)...)
}

func (r refOps) LinearGroup(x tensor.T, ms ...device.Matrix) []tensor.T {
	var out []tensor.T
	for _, m := range ms {
		out = append(out, r.Linear(x, m))
	}
	return out
}

func (refOps) RMSNorm(x tensor.T, w device.Vector, eps float64) tensor.T {
	return tensor.From(rmsnormRef(x.HostData(), w.(refVector), float32(eps), 0, F32), x.Shape...)
}

func (refOps) Rope(x tensor.T, positions []int32, r *device.Rope) {
	heads, rot, err := ropeShape(r, x.Cols(), x.Rows(), len(positions))
	if err != nil {
		panic(err)
	}
	ropeRef(x.HostData(), x.Cols(), heads, r.HeadDim, rot, positions, r.InvFreq, r.Interleaved, 1, F32)
}

func (r refOps) RopeQK(q, k tensor.T, positions []int32, rope *device.Rope) {
	r.Rope(q, positions, rope)
	r.Rope(k, positions, rope)
}

func refGated(gate, up tensor.T, act func(float64) float64) {
	for i, g := range gate.HostData() {
		gate.HostData()[i] = float32(act(float64(g)) * float64(up.HostData()[i]))
	}
}

func refSiLU(g float64) float64 { return g / (1 + math.Exp(-g)) }
func refGeLUTanh(g float64) float64 {
	return 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g)))
}

func (refOps) SiLUMul(gate, up tensor.T)     { refGated(gate, up, refSiLU) }
func (refOps) GeLUTanhMul(gate, up tensor.T) { refGated(gate, up, refGeLUTanh) }

func (r refOps) NormLinearGroup(x tensor.T, w device.Vector, eps float64, ms ...device.Matrix) []tensor.T {
	return r.LinearGroup(r.RMSNorm(x, w, eps), ms...)
}

func (r refOps) LinearAdd(dst, x tensor.T, m device.Matrix) { r.Add(dst, r.Linear(x, m)) }

func (r refOps) GatedMLPAdd(x tensor.T, w device.Vector, eps float64, gate, up, down device.Matrix) {
	gu := r.NormLinearGroup(x, w, eps, gate, up)
	if r.wdt != F32 && !gemvRows(x.Rows()) { // the cuBLASLt path lands gate and up in the weights' dtype
		for _, t := range gu {
			copy(t.HostData(), roundAll(t.HostData(), r.wdt))
		}
	}
	r.SiLUMul(gu[0], gu[1])
	r.LinearAdd(x, gu[0], down)
}

func (refOps) Add(dst, src tensor.T) {
	for i, v := range src.HostData() {
		dst.HostData()[i] += v
	}
}

func (refOps) Scale(x tensor.T, s float32) {
	for i := range x.HostData() {
		x.HostData()[i] *= s
	}
}

func (refOps) Softcap(x tensor.T, c float32) {
	for i, v := range x.HostData() {
		x.HostData()[i] = float32(float64(c) * math.Tanh(float64(v)/float64(c)))
	}
}

func (refOps) GatherRows(x tensor.T, rows []int32) tensor.T {
	out := tensor.New(len(rows), x.Cols())
	for i, r := range rows {
		copy(out.Row(i), x.Row(int(r)))
	}
	return out
}

func (refOps) ToHost(x tensor.T) tensor.T { return x }

// miniModel is a two-layer llama/qwen-like stack: embedding, per layer
// norm → q,k,v (with bias) → q/k head norm → rope → a stand-in for
// attention (q+k+v) → o → residual → norm → gate/up → act → down →
// residual; then the last rows, final norm, tied head, scale, softcap.
type miniModel struct {
	embed     device.Matrix
	layers    []miniLayer
	finalNorm device.Vector
	rope      *device.Rope
}

type miniLayer struct {
	attnNorm, mlpNorm, qNorm, kNorm device.Vector
	q, k, v, o, gate, up, down      device.Matrix
}

// miniWeights are stored weights in a mix of checkpoint dtypes.
type miniWeights struct {
	embed     tensor.Weight
	layers    [][7]tensor.Weight // q k v o gate up down
	biases    [][3][]float32
	norms     [][4][]float32 // attn, mlp, q, k
	finalNorm []float32
}

const (
	miniHeads, miniHeadDim           = 3, 32
	miniHidden                       = miniHeads * miniHeadDim
	miniInter, miniVocab, miniLayers = 200, 300, 2
	miniEps                          = 1e-6
)

func newMiniWeights(t *testing.T, rng *rand.Rand) miniWeights {
	t.Helper()
	mat := func(out, in int, dt DType) tensor.Weight {
		return storedWeight(t, randn(rng, out*in, float32(1/math.Sqrt(float64(in)))), dt, out, in)
	}
	norm := func(n int) []float32 {
		v := randn(rng, n, 0.2)
		for i := range v {
			v[i] += 1
		}
		return v
	}
	w := miniWeights{embed: storedWeight(t, randn(rng, miniVocab*miniHidden, 1), F32, miniVocab, miniHidden), finalNorm: norm(miniHidden)}
	for range miniLayers {
		w.layers = append(w.layers, [7]tensor.Weight{
			mat(miniHidden, miniHidden, BF16), mat(miniHidden, miniHidden, BF16), mat(miniHidden, miniHidden, BF16),
			mat(miniHidden, miniHidden, F16),
			mat(miniInter, miniHidden, tensor.Q8_0), mat(miniInter, miniHidden, tensor.Q8_0),
			mat(miniHidden, miniInter, F32),
		})
		w.biases = append(w.biases, [3][]float32{randn(rng, miniHidden, 0.1), randn(rng, miniHidden, 0.1), randn(rng, miniHidden, 0.1)})
		w.norms = append(w.norms, [4][]float32{norm(miniHidden), norm(miniHidden), norm(miniHeadDim), norm(miniHeadDim)})
	}
	return w
}

func prepareMini(t *testing.T, o device.Ops, w miniWeights) *miniModel {
	t.Helper()
	mat := func(w tensor.Weight, bias []float32) device.Matrix {
		m, err := o.Matrix(w, bias)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	vec := func(v []float32) device.Vector {
		d, err := o.Vector(v)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	m := &miniModel{
		embed: mat(w.embed, nil), finalNorm: vec(w.finalNorm),
		rope: &device.Rope{HeadDim: miniHeadDim, InvFreq: ropeInvFreq(miniHeadDim, 10000)},
	}
	for i, l := range w.layers {
		b, n := w.biases[i], w.norms[i]
		m.layers = append(m.layers, miniLayer{
			attnNorm: vec(n[0]), mlpNorm: vec(n[1]), qNorm: vec(n[2]), kNorm: vec(n[3]),
			q: mat(l[0], b[0]), k: mat(l[1], b[1]), v: mat(l[2], b[2]), o: mat(l[3], nil),
			gate: mat(l[4], nil), up: mat(l[5], nil), down: mat(l[6], nil),
		})
	}
	return m
}

// releaser is ModelOps's optional early release.
type releaser interface{ Release(...tensor.T) }

func (m *miniModel) forward(o device.Ops, ids, positions, lastRows []int32) tensor.T {
	release := func(ts ...tensor.T) {
		if r, ok := o.(releaser); ok {
			r.Release(ts...)
		}
	}
	o.BeginForward()
	x := o.Embed(m.embed, ids) // [T, hidden]
	for i, l := range m.layers {
		// Even layers take the fused ops (NormLinearGroup, LinearAdd,
		// GatedMLPAdd), odd layers their parts.
		fused := i%2 == 0
		var h tensor.T
		var qkv []tensor.T // [T, heads·headDim] each
		if fused {
			qkv = o.NormLinearGroup(x, l.attnNorm, miniEps, l.q, l.k, l.v)
		} else {
			h = o.RMSNorm(x, l.attnNorm, miniEps)
			qkv = o.LinearGroup(h, l.q, l.k, l.v)
		}
		q := o.RMSNorm(qkv[0], l.qNorm, miniEps)
		k := o.RMSNorm(qkv[1], l.kNorm, miniEps)
		o.Rope(q, positions, m.rope)
		o.Rope(k, positions, m.rope)
		o.Add(q, k)
		o.Add(q, qkv[2])
		if fused {
			o.LinearAdd(x, q, l.o)
			release(qkv[0], qkv[1], qkv[2], q, k)
			o.GatedMLPAdd(x, l.mlpNorm, miniEps, l.gate, l.up, l.down)
			continue
		}
		attn := o.Linear(q, l.o)
		o.Add(x, attn)
		release(h, qkv[0], qkv[1], qkv[2], q, k, attn)

		h = o.RMSNorm(x, l.mlpNorm, miniEps)
		gu := o.LinearGroup(h, l.gate, l.up) // [T, inter] each
		o.GeLUTanhMul(gu[0], gu[1])
		down := o.Linear(gu[0], l.down)
		o.Add(x, down)
		release(h, gu[0], gu[1], down)
	}
	last := o.GatherRows(x, lastRows)
	logits := o.Linear(o.RMSNorm(last, m.finalNorm, miniEps), m.embed) // tied head: [rows, vocab]
	o.Scale(logits, 0.5)
	o.Softcap(logits, 15)
	o.EndForward()
	return o.ToHost(logits) // after EndForward, as the engine reads logits
}

func testModelOpsMiniModel(t *testing.T, env opsEnv) {
	dev, k, lt := env.dev, env.k, env.lt
	rng := rand.New(rand.NewPCG(48, 48))
	w := newMiniWeights(t, rng)
	// A stream of its own: every method must use the ModelOps stream, not dev.Stream.
	stream, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.DestroyStream(stream) })
	for _, wdt := range []DType{F32, BF16, F16} {
		subtest(t, wdt.String(), func(t *testing.T) {
			o := NewModelOps(dev, k, lt, stream, ModelOpsOptions{WeightDType: wdt})
			defer func() {
				if err := o.Close(); err != nil {
					t.Error(err)
				}
				if o.WeightBytes() != 0 {
					t.Errorf("%d weight bytes after Close", o.WeightBytes())
				}
				if err := o.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
			}()
			ref := refOps{wdt: wdt}
			gm, rm := prepareMini(t, o, w), prepareMini(t, ref, w)
			atol, rtol := 2e-4, 2e-4
			if wdt != F32 {
				atol, rtol = 2e-2, 2e-2 // a 16-bit rounding of Linear's input may land either side
			}
			for step, tc := range []struct{ ids, pos, last []int32 }{
				{[]int32{1, 17, 299, 0, 42, 7}, []int32{0, 1, 2, 3, 4, 5}, []int32{5}},                           // prefill
				{[]int32{3, 9}, []int32{6, 3}, []int32{0, 1}},                                                    // decode, two requests
				{[]int32{5, 5, 5, 8, 250, 11, 12}, []int32{100, 101, 102, 0, 1, 7000, 7001}, []int32{2, 4, 6}},   // mixed
				{[]int32{3, 9}, []int32{6, 3}, []int32{0, 1}},                                                    // recycled buffers
				{[]int32{2, 4, 6, 8, 10, 12, 14, 16, 18, 20}, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, []int32{9}}, // past the skinny kernel
			} {
				var got tensor.T
				if err := o.Run(func() error { got = gm.forward(o, tc.ids, tc.pos, tc.last); return nil }); err != nil {
					t.Fatal(err)
				}
				want := rm.forward(ref, tc.ids, tc.pos, tc.last)
				if !slices.Equal(got.Shape, []int{len(tc.last), miniVocab}) || got.OnDevice() {
					t.Fatalf("logits %v on device %v", got.Shape, got.OnDevice())
				}
				compare(t, fmt.Sprintf("step %d logits", step), got.HostData(), want.HostData(), atol, rtol)
			}
		})
	}
}

func testModelOpsForwardLifecycle(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(49, 49))
	o := env.newOps(t, BF16)
	mem := o.Device().Mem
	const vocab, hidden, out = 50, 64, 40
	table, tableVals := testMatrix(t, o, randn(rng, vocab*hidden, 1), F32, vocab, hidden, nil)
	bias := randn(rng, out, 1)
	m, mVals := testMatrix(t, o, randn(rng, out*hidden, 0.1), BF16, out, hidden, bias)
	norm := randn(rng, hidden, 1)
	v := testVector(t, o, norm)
	ids := []int32{4, 8, 15, 16, 23, 42}

	forward := func() (ptrs []uintptr, x, logits tensor.T) {
		o.BeginForward()
		if n, _ := o.Held(); n != 0 {
			t.Errorf("a new forward starts with %d tensors held", n)
		}
		x = o.Embed(table, ids)
		h := o.RMSNorm(x, v, 1e-6)
		y := o.Linear(h, m)
		logits = o.GatherRows(y, []int32{5, 0})
		o.EndForward()
		return []uintptr{x.DevPtr(), h.DevPtr(), y.DevPtr(), logits.DevPtr()}, x, logits
	}
	forward()
	p2, _, _ := forward()
	allocs := mem.Stats().DeviceAllocs
	p3, x3, l3 := forward()
	if got := mem.Stats().DeviceAllocs - allocs; got != 0 {
		t.Errorf("a repeated forward made %d device allocations", got)
	}
	if !slices.Equal(p2, p3) {
		t.Errorf("a repeated forward got new addresses: %#x, then %#x", p2, p3)
	}
	// Tensors stay readable after EndForward, until the next BeginForward.
	got3 := o.ToHost(l3).HostData()
	xWant := make([]float32, 0, len(ids)*hidden)
	for _, id := range ids {
		xWant = append(xWant, tableVals[int(id)*hidden:(int(id)+1)*hidden]...)
	}
	compare(t, "x after EndForward", o.ToHost(x3).HostData(), xWant, 0, 0)
	hWant := rmsnormRef(xWant, norm, 1e-6, 0, F32)
	yWant := linearRef(hWant, mVals, bias, len(ids), hidden, out, BF16)
	lWant := append(slices.Clone(yWant[5*out:6*out]), yWant[:out]...)
	compare(t, "logits", got3, lWant, 2e-2, 2e-2)

	// Forwards enqueued back to back without waiting each see their own
	// ids, though the third reuses the first one's staging half.
	idSets := [][]int32{{1, 2, 3}, {4, 5, 6, 7}, {8, 9}, {10}}
	kept := make([]Buffer, len(idSets))
	var err error
	for i, set := range idSets {
		o.BeginForward()
		x := o.Embed(table, set)
		if kept[i], err = mem.Alloc(len(set) * hidden * 4); err != nil {
			t.Fatal(err)
		}
		if err := o.Device().CopyDtoDAsync(kept[i].Ptr, DevicePtr(x.DevPtr()), len(set)*hidden*4, o.Stream()); err != nil {
			t.Fatal(err)
		}
		o.EndForward()
	}
	if err := o.Device().StreamSync(o.Stream()); err != nil {
		t.Fatal(err)
	}
	for i, set := range idSets {
		want := make([]float32, 0, len(set)*hidden)
		for _, id := range set {
			want = append(want, tableVals[int(id)*hidden:(int(id)+1)*hidden]...)
		}
		compare(t, fmt.Sprintf("forward %d embedding", i), download(t, o.Device(), kept[i].Ptr, len(want), F32), want, 0, 0)
		mem.Free(kept[i])
	}

	// Release returns a tensor's memory for the next request of its size.
	o.BeginForward()
	a := o.NewTensor(100, 64)
	o.Release(a)
	b := o.NewTensor(100, 64)
	if a.DevPtr() != b.DevPtr() {
		t.Errorf("released memory not reused: %#x then %#x", a.DevPtr(), b.DevPtr())
	}
	o.Release(b, b, tensor.New(3), tensor.Device{Shape: []int{1}, Ptr: uintptr(m.(*Matrix).Ptr()), DType: BF16}.T()) // repeats, host tensors, weights: ignored
	if n, _ := o.Held(); n != 0 {
		t.Errorf("%d tensors held after releasing all", n)
	}

	// Adopted memory (an attention output) is freed by the next BeginForward.
	buf, err := mem.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	o.Adopt(tensor.Device{Shape: []int{1024}, Ptr: uintptr(buf.Ptr), DType: F32}.T())
	if n, _ := o.Held(); n != 1 {
		t.Errorf("%d tensors held after Adopt, want 1", n)
	}
	o.BeginForward()
	if err := mem.Free(buf); err == nil {
		t.Error("an adopted buffer was not freed by BeginForward")
	}
	o.EndForward()
}
