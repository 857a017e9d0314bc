package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/tensor"
)

// The MLA and mixture-of-experts methods of ModelOps (modelops_moe.go)
// against refOps on random data, on the GPU (TestGPUModelOpsMoE, skipped
// without one) and on fakeGPU (TestFakeModelOpsMoE).

func (refOps) ConcatHeads(a, b tensor.T, heads int) tensor.T {
	da, db := a.Cols()/heads, b.Cols()/heads
	out := tensor.New(a.Rows(), heads*(da+db))
	for t := range a.Rows() {
		for h := range heads {
			dst := out.Row(t)[h*(da+db):]
			copy(dst, a.Row(t)[h*da:(h+1)*da])
			copy(dst[da:], b.Row(t)[h*db:(h+1)*db])
		}
	}
	return out
}

// LinearPerHead sums in float64 over x as it is (the kernel does not round
// x to the weight dtype).
func (refOps) LinearPerHead(x tensor.T, mat device.Matrix, heads int) tensor.T {
	m := mat.(*refMatrix)
	outH := m.out / heads
	y := tensor.New(x.Rows(), m.out)
	for t := range x.Rows() {
		for h := range heads {
			for o := range outH {
				var sum float64
				for i := range m.in {
					sum += float64(x.Row(t)[h*m.in+i]) * float64(m.w[(h*outH+o)*m.in+i])
				}
				y.Row(t)[h*outH+o] = float32(sum)
			}
		}
	}
	return y
}

// Route is the CPU's routing (device/cpu tests it against hand-worked cases).
func (refOps) Route(logits tensor.T, r *device.Router) ([]int32, []float32) {
	o := cpu.NewOps(nil)
	rr := *r
	if r.Bias != nil {
		b, err := o.Vector(r.Bias.(refVector))
		if err != nil {
			panic(err)
		}
		rr.Bias = b
	}
	return o.Route(logits, &rr)
}

func (refOps) ScatterAddRows(dst, src tensor.T, rows []int32, scales []float32) {
	for i, r := range rows {
		d := dst.Row(int(r))
		for c, v := range src.Row(i) {
			d[c] = float32(float64(d[c]) + float64(scales[i])*float64(v))
		}
	}
}

var moeOpsSuites = []struct {
	name string
	run  func(*testing.T, opsEnv)
}{
	{"ConcatHeads", testModelOpsConcatHeads},
	{"LinearPerHead", testModelOpsLinearPerHead},
	{"ScatterAddRows", testModelOpsScatterAddRows},
	{"Route", testModelOpsRoute},
	{"RouteInGraph", testModelOpsRouteInGraph},
	{"MoEArgumentChecks", testModelOpsMoEArgumentChecks},
	{"ExpertsAdd", testModelOpsExpertsAdd},
	{"RoutedExpertsAdd", testModelOpsRoutedExpertsAdd},
	{"RoutedInGraph", testModelOpsRoutedInGraph},
	{"MoEAlign", testModelOpsMoEAlign},
	{"ExpertsGEMM", testModelOpsExpertsGEMM},
}

func TestGPUModelOpsMoE(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	for _, s := range moeOpsSuites {
		subtest(t, s.name, func(t *testing.T) { s.run(t, opsEnv{dev: dev, k: k, lt: lt}) })
	}
}

func TestFakeModelOpsMoE(t *testing.T) {
	dev, k, lt, fake := openFakeDevice(t)
	env := opsEnv{dev: dev, k: k, lt: lt, fake: fake}
	for _, s := range moeOpsSuites {
		subtest(t, s.name, func(t *testing.T) { s.run(t, env) })
	}
	if err := dev.Mem.ReleaseCached(); err != nil {
		t.Error(err)
	}
	if st := dev.Mem.Stats(); st.InUse != 0 {
		t.Errorf("%d bytes still allocated", st.InUse)
	}
	fake.mu.Lock()
	blocks, pinned, err := len(fake.blocks), len(fake.pinned), fake.err
	fake.mu.Unlock()
	if blocks != 0 || pinned != 0 || err != nil {
		t.Errorf("after the suites: %d device blocks, %d pinned blocks, error %v", blocks, pinned, err)
	}
	if err := dev.Close(); err != nil {
		t.Error(err)
	}
}

func testModelOpsConcatHeads(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(60, 60))
	o := env.newOps(t, F32)
	var ref refOps
	for _, tc := range []struct{ rows, heads, da, db int }{
		{7, 4, 32, 16}, {1, 1, 512, 64}, {3, 3, 5, 1}, {0, 2, 4, 4}, {300, 16, 33, 7},
	} {
		subtest(t, fmt.Sprint(tc), func(t *testing.T) {
			o.BeginForward()
			defer o.EndForward()
			a := tensor.From(randn(rng, tc.rows*tc.heads*tc.da, 1), tc.rows, tc.heads*tc.da)
			b := tensor.From(randn(rng, tc.rows*tc.heads*tc.db, 1), tc.rows, tc.heads*tc.db)
			got := o.ConcatHeads(o.Upload(a), o.Upload(b), tc.heads)
			want := ref.ConcatHeads(a, b, tc.heads)
			if !slices.Equal(got.Shape, want.Shape) {
				t.Fatalf("shape %v, want %v", got.Shape, want.Shape)
			}
			compare(t, "concat", o.ToHost(got).HostData(), want.HostData(), 0, 0)
		})
	}
}

func testModelOpsLinearPerHead(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(61, 61))
	for _, wdt := range []DType{F32, BF16, F16} {
		o := env.newOps(t, wdt)
		ref := refOps{wdt: wdt}
		for _, tc := range []struct{ rows, heads, in, outH int }{
			{1, 4, 32, 48}, {37, 3, 19, 5}, {70, 2, 64, 33}, {5, 1, 100, 40}, {0, 2, 8, 8},
		} {
			subtest(t, fmt.Sprintf("%v/%v", wdt, tc), func(t *testing.T) {
				o.BeginForward()
				defer o.EndForward()
				vals := randn(rng, tc.heads*tc.outH*tc.in, 1)
				m, _ := testMatrix(t, o, vals, BF16, tc.heads*tc.outH, tc.in, nil)
				rm, err := ref.Matrix(storedWeight(t, vals, BF16, tc.heads*tc.outH, tc.in), nil)
				if err != nil {
					t.Fatal(err)
				}
				x := tensor.From(randn(rng, tc.rows*tc.heads*tc.in, 1), tc.rows, tc.heads*tc.in)
				got := o.LinearPerHead(o.Upload(x), m, tc.heads)
				want := ref.LinearPerHead(x, rm, tc.heads)
				if !slices.Equal(got.Shape, want.Shape) {
					t.Fatalf("shape %v, want %v", got.Shape, want.Shape)
				}
				compare(t, "per-head linear", o.ToHost(got).HostData(), want.HostData(), 1e-5*float64(tc.in), 1e-5)
			})
		}
	}
}

func testModelOpsScatterAddRows(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(62, 62))
	o := env.newOps(t, F32)
	var ref refOps
	for _, tc := range []struct{ n, width, picked int }{{20, 96, 7}, {5, 1500, 5}, {1, 3, 1}, {9, 8, 0}} {
		subtest(t, fmt.Sprint(tc), func(t *testing.T) {
			o.BeginForward()
			defer o.EndForward()
			dst := tensor.From(randn(rng, tc.n*tc.width, 1), tc.n, tc.width)
			rows := make([]int32, tc.picked)
			for i, r := range rng.Perm(tc.n)[:tc.picked] {
				rows[i] = int32(r)
			}
			src := tensor.From(randn(rng, tc.picked*tc.width, 1), tc.picked, tc.width)
			scales := randn(rng, tc.picked, 1)
			dDst := o.Upload(dst)
			o.ScatterAddRows(dDst, o.Upload(src), rows, scales)
			want := tensor.From(slices.Clone(dst.HostData()), dst.Shape...)
			ref.ScatterAddRows(want, src, rows, scales)
			compare(t, "scatter-add", o.ToHost(dDst).HostData(), want.HostData(), 1e-6, 1e-6)
		})
	}
}

// testModelOpsRoute compares the device's choice with the CPU's, token
// by token, on tokens whose choice is not a near tie: those where the
// reference chooses the same experts for slightly perturbed logits.
func testModelOpsRoute(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(63, 63))
	o := env.newOps(t, F32)
	var ref refOps
	const nTok = 40
	for _, tc := range []struct {
		name    string
		experts int
		bias    bool
		r       device.Router
	}{
		{"v3 grouped, biased", 64, true, device.Router{TopK: 8, Groups: 8, TopKGroups: 4, NormTopK: true, Scale: 2.5}},
		{"v3 groups of 9", 72, true, device.Router{TopK: 6, Groups: 8, TopKGroups: 3, NormTopK: true, Scale: 1}},
		{"sigmoid ungrouped", 33, false, device.Router{TopK: 3, Scale: 1.5}},
		{"v2 greedy softmax", 64, false, device.Router{TopK: 6, Softmax: true, Scale: 1}},
		{"v2 group_limited_greedy", 160, false, device.Router{TopK: 6, Softmax: true, Groups: 8, TopKGroups: 3, GroupByMaxScore: true, Scale: 16}},
		{"groups of one", 8, true, device.Router{TopK: 2, Groups: 8, TopKGroups: 3, NormTopK: true, Scale: 1}},
		{"every expert", 5, false, device.Router{TopK: 5, NormTopK: true, Scale: 1}},
	} {
		subtest(t, tc.name, func(t *testing.T) {
			o.BeginForward()
			defer o.EndForward()
			gr, rr := tc.r, tc.r
			if tc.bias {
				b := randn(rng, tc.experts, 0.3)
				gr.Bias, rr.Bias = testVector(t, o, b), refVector(b)
			}
			logits := tensor.From(randn(rng, nTok*tc.experts, 2), nTok, tc.experts)
			gotE, gotW := o.Route(o.Upload(logits), &gr)
			wantE, wantW := ref.Route(logits, &rr)
			if len(gotE) != nTok*tc.r.TopK || len(gotW) != len(gotE) {
				t.Fatalf("%d experts and %d weights for %d tokens of top-%d", len(gotE), len(gotW), nTok, tc.r.TopK)
			}
			stable := stableRoutes(rng, ref, logits, &rr)
			compared := 0
			k := tc.r.TopK
			for tok := range nTok {
				if !stable[tok] {
					continue
				}
				compared++
				if !slices.Equal(gotE[tok*k:(tok+1)*k], wantE[tok*k:(tok+1)*k]) {
					t.Fatalf("token %d: experts %v, want %v", tok, gotE[tok*k:(tok+1)*k], wantE[tok*k:(tok+1)*k])
				}
				compare(t, fmt.Sprint("token ", tok, " weights"), gotW[tok*k:(tok+1)*k], wantW[tok*k:(tok+1)*k], 1e-6, 1e-5)
			}
			if compared < nTok*3/4 {
				t.Fatalf("only %d of %d tokens are clear of near ties; pick another seed", compared, nTok)
			}
		})
	}
	// No tokens: nothing to route, nothing launched.
	o.BeginForward()
	e, w := o.Route(o.Upload(tensor.New(0, 8)), &device.Router{TopK: 2, Scale: 1})
	if len(e) != 0 || len(w) != 0 {
		t.Errorf("no tokens: %v %v", e, w)
	}
	o.EndForward()
}

// stableRoutes marks the tokens whose reference choice survives three
// perturbations of their logits by up to 1e-4 (so a few ulps of
// difference in sigmoid or exp cannot change it).
func stableRoutes(rng *rand.Rand, ref refOps, logits tensor.T, r *device.Router) []bool {
	want, _ := ref.Route(logits, r)
	k := r.TopK
	stable := make([]bool, logits.Rows())
	for i := range stable {
		stable[i] = true
	}
	for range 3 {
		p := tensor.From(slices.Clone(logits.HostData()), logits.Shape...)
		for i := range p.HostData() {
			p.HostData()[i] += float32((rng.Float64()*2 - 1) * 1e-4)
		}
		got, _ := ref.Route(p, r)
		for tok := range stable {
			if !slices.Equal(got[tok*k:(tok+1)*k], want[tok*k:(tok+1)*k]) {
				stable[tok] = false
			}
		}
	}
	return stable
}

// testModelOpsRouteInGraph: a forward that routes cannot be a CUDA graph.
// RunGraph's dry run must get through it (Route hands back a placeholder
// the dispatch accepts) and then run it eagerly, with the real choice.
func testModelOpsRouteInGraph(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(64, 64))
	o := env.newOps(t, F32)
	var ref refOps
	const nTok, nExp, width = 6, 16, 10
	r := device.Router{TopK: 4, Groups: 4, TopKGroups: 2, NormTopK: true, Scale: 1}
	logits := tensor.From(randn(rng, nTok*nExp, 2), nTok, nExp)
	src := tensor.From(randn(rng, nTok*width, 1), nTok, width)
	var experts []int32
	var weights []float32
	var sums tensor.T
	run, err := o.RunGraph(1, func() error {
		o.BeginForward()
		experts, weights = o.Route(o.Upload(logits), &r)
		// Dispatch as model/deepseek does: bucket the tokens by expert,
		// gather each bucket's rows and add them back weighted (a stand-in
		// for the expert); a bucket's tokens must be distinct.
		sums = o.Upload(tensor.New(nTok, width))
		dSrc := o.Upload(src)
		tokens, scales := make([][]int32, nExp), make([][]float32, nExp)
		for i, e := range experts {
			tokens[e] = append(tokens[e], int32(i/r.TopK))
			scales[e] = append(scales[e], weights[i])
		}
		for e, toks := range tokens {
			if len(toks) > 0 {
				o.ScatterAddRows(sums, o.GatherRows(dSrc, toks), toks, scales[e])
			}
		}
		o.EndForward()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if run.Path != GraphEager || !strings.Contains(run.Reason, "MoE routing") {
		t.Fatalf("RunGraph ran %v (%q), want eager because of the routing", run.Path, run.Reason)
	}
	wantE, wantW := ref.Route(logits, &r)
	if !slices.Equal(experts, wantE) {
		t.Fatalf("experts %v, want %v", experts, wantE)
	}
	want := tensor.New(nTok, width) // sums[t] = Σ over t's experts of weight·src[t]
	for i := range wantE {
		ref.ScatterAddRows(want, tensor.From(src.Row(i/r.TopK), 1, width), []int32{int32(i / r.TopK)}, wantW[i:i+1])
	}
	compare(t, "dispatched sums", o.ToHost(sums).HostData(), want.HostData(), 1e-5, 1e-5)
}

func testModelOpsMoEArgumentChecks(t *testing.T, env opsEnv) {
	o := env.newOps(t, F32)
	o.BeginForward()
	defer o.EndForward()
	x := o.Upload(tensor.New(4, 12))
	m, _ := testMatrix(t, o, make([]float32, 10*4), F32, 10, 4, nil)
	for _, tc := range []struct {
		name, want string
		call       func()
	}{
		{"concat rows differ", "differ in rows", func() { o.ConcatHeads(x, o.Upload(tensor.New(3, 12)), 2) }},
		{"concat heads", "do not split into 5 heads", func() { o.ConcatHeads(x, x, 5) }},
		{"per-head width", "does not fit 2 heads", func() { o.LinearPerHead(x, m, 2) }},
		{"per-head stacking", "does not stack 3 heads", func() { o.LinearPerHead(x, m, 3) }},
		{"scatter duplicate rows", "dst row 1 appears twice", func() {
			o.ScatterAddRows(x, o.Upload(tensor.New(2, 12)), []int32{1, 1}, []float32{1, 1})
		}},
		{"scatter row outside", "outside [0, 4)", func() {
			o.ScatterAddRows(x, o.Upload(tensor.New(1, 12)), []int32{4}, []float32{1})
		}},
		{"scatter scales", "disagree", func() { o.ScatterAddRows(x, o.Upload(tensor.New(1, 12)), []int32{0}, nil) }},
		{"route top-k", "top-k 13", func() { o.Route(x, &device.Router{TopK: 13}) }},
		{"route host logits", "not a device tensor", func() { o.Route(tensor.New(4, 12), &device.Router{TopK: 1}) }},
		{"route too many experts", "shared memory", func() { o.Route(o.Upload(tensor.New(1, 5000)), &device.Router{TopK: 1}) }},
	} {
		oe := catchOpError(t, tc.call)
		if !strings.Contains(oe.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, oe, tc.want)
		}
	}
}

// The Go side's launch shapes must be the kernel's: head_linear's tile
// (a grid that does not cover the outputs or rows leaves values unwritten)
// and the router's shared memory.
func TestMoEKernelShapes(t *testing.T) {
	srcs, err := KernelSources()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(srcs, func(s KernelSource) bool { return s.Name == "moe.cu" })
	if i < 0 {
		t.Fatal("kernels/moe.cu is not embedded")
	}
	if tile := fmt.Sprintf("#define HL_TILE %d\n", headLinearTile); !strings.Contains(string(srcs[i].Source), tile) {
		t.Errorf("moe.cu does not define HL_TILE as headLinearTile (%d)", headLinearTile)
	}
	j := slices.IndexFunc(srcs, func(s KernelSource) bool { return s.Name == "gemv.cu" })
	if outs := fmt.Sprintf("#define MOE_GEMV_OUTS %d\n", moeGemvOuts); j < 0 || !strings.Contains(string(srcs[j].Source), outs) {
		t.Errorf("gemv.cu does not define MOE_GEMV_OUTS as moeGemvOuts (%d)", moeGemvOuts)
	}
	p := RouteParams{NExperts: 256, TopK: 8, Groups: 8, TopKGroups: 4}
	if err := p.check(); err != nil || p.sharedBytes() != 4*(3*256+2*8) {
		t.Errorf("DeepSeek-V3 routing: %v, %d bytes of shared memory", err, p.sharedBytes())
	}
}

// NewFakeModelOps is a float32 ModelOps over fakeGPU, for the tests of
// package cuda_test that run whole models on it (models_fake_test.go).
// The fake device is closed, and checked for leaks, at the end of the test.
func NewFakeModelOps(t testing.TB) *ModelOps {
	t.Helper()
	return NewFakeModelOpsWith(t, ModelOpsOptions{WeightDType: F32})
}

// NewFakeModelOpsWith is NewFakeModelOps with options.
func NewFakeModelOpsWith(t testing.TB, opts ModelOpsOptions) *ModelOps {
	t.Helper()
	dev, k, lt, fake := openFakeDevice(t)
	o := NewModelOps(dev, k, lt, dev.Stream, opts)
	fakesMu.Lock()
	fakes[o] = fake
	fakesMu.Unlock()
	t.Cleanup(func() {
		fakesMu.Lock()
		delete(fakes, o)
		fakesMu.Unlock()
		if err := o.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := dev.Mem.ReleaseCached(); err != nil {
			t.Error(err)
		}
		if st := dev.Mem.Stats(); st.InUse != 0 {
			t.Errorf("%d bytes still allocated after Close", st.InUse)
		}
		fake.mu.Lock()
		err := fake.err
		fake.mu.Unlock()
		if err != nil {
			t.Errorf("fake GPU: %v", err)
		}
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	return o
}

// fakes are the emulated GPUs under the ModelOps NewFakeModelOpsWith made.
var (
	fakesMu sync.Mutex
	fakes   = map[*ModelOps]*fakeGPU{}
)

// DropQueuedWork discards the work queued on o's emulated GPU and not yet
// run, for tests whose forwards launch kernels the fake does not emulate
// (attention) and that check only what was enqueued.
func (o *ModelOps) DropQueuedWork() {
	f := fakeOf(o)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.streams {
		st.done = len(st.queue)
	}
}

// fakeOf is the emulated GPU under o.
func fakeOf(o *ModelOps) *fakeGPU {
	fakesMu.Lock()
	defer fakesMu.Unlock()
	return fakes[o]
}

// fakeLaunches counts the launches of kernels whose names start with
// prefix on o's emulated GPU.
func fakeLaunches(o *ModelOps, prefix string) (n int) {
	f := fakeOf(o)
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, c := range f.launches {
		if strings.HasPrefix(name, prefix) {
			n += c
		}
	}
	return n
}

// fakeLaunchesWith counts the launches of kernels named prefix… with
// part in their name.
func fakeLaunchesWith(o *ModelOps, prefix, part string) (n int) {
	f := fakeOf(o)
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, c := range f.launches {
		if strings.HasPrefix(name, prefix) && strings.Contains(name, part) {
			n += c
		}
	}
	return n
}

// testExperts are a mixture's experts on a ModelOps, grouped, with their
// float32 values for the float64 reference (expertsRef).
type testExperts struct {
	grp    device.ExpertGroup
	act    device.ExpertActivation
	ws, bs [3][][]float32 // gate, up, down per expert; biases nil without
}

// newTestExperts makes nExp random experts of [inter, hidden] gate and up
// and [hidden, inter] down matrices (with biases when bias), grouped.
func newTestExperts(t *testing.T, o *ModelOps, rng *rand.Rand, nExp, hidden, inter int, bias bool, act device.ExpertActivation) *testExperts {
	t.Helper()
	return newCompactExperts(t, o, rng, nExp, hidden, inter, bias, act, 0, 0)
}

// newCompactExperts is newTestExperts with gate and up quantized to the
// block format gu and down to dn (compact on the device; 0: float32).
func newCompactExperts(t *testing.T, o *ModelOps, rng *rand.Rand, nExp, hidden, inter int, bias bool, act device.ExpertActivation, gu, dn DType) *testExperts {
	t.Helper()
	te := &testExperts{act: act}
	var ms [3][]device.Matrix
	for range nExp {
		for j := range 3 {
			out, in := inter, hidden
			if j == 2 {
				out, in = hidden, inter
			}
			var b []float32
			if bias {
				b = randn(rng, out, 0.3)
			}
			var m device.Matrix
			var w []float32
			if dt := [3]DType{gu, gu, dn}[j]; dt != 0 {
				q, err := tensor.Convert(tensor.FromFloat32("w", randn(rng, out*in, 0.3), out, in), dt)
				if err == nil {
					m, err = o.Matrix(q, b)
				}
				if err != nil {
					t.Fatal(err)
				}
				w = q.Float32()
			} else {
				m, w = testMatrix(t, o, randn(rng, out*in, 0.3), F32, out, in, b)
			}
			ms[j], te.ws[j], te.bs[j] = append(ms[j], m), append(te.ws[j], w), append(te.bs[j], b)
		}
	}
	grp, err := o.ExpertGroup(ms[0], ms[1], ms[2], act)
	if err != nil || grp == nil || grp.Experts() != nExp {
		t.Fatalf("ExpertGroup: %v, %v", grp, err)
	}
	te.grp = grp
	return te
}

// ref is res plus the chosen experts' weighted outputs for x [T, hidden]
// (k choices per token), in float64 over x and the weights as stored.
func (te *testExperts) ref(x, res []float32, hidden int, experts []int32, weights []float32) []float32 {
	return te.refRounded(x, res, hidden, experts, weights, F32)
}

// refRounded is ref with each projection's input (x, then the activation
// in float32) rounded to in first, as moe_gemm stages it for 16-bit
// weights.
func (te *testExperts) refRounded(x, res []float32, hidden int, experts []int32, weights []float32, in DType) []float32 {
	round := func(v float64) float64 { return float64(roundTo([]float32{float32(v)}, in)[0]) }
	lin := func(x []float64, e, j int) []float64 {
		w, b := te.ws[j][e], te.bs[j][e]
		out := make([]float64, len(w)/len(x))
		for o := range out {
			for i, v := range x {
				out[o] += v * float64(w[o*len(x)+i])
			}
			if b != nil {
				out[o] += float64(b[o])
			}
		}
		return out
	}
	k := len(experts) / (len(x) / hidden)
	want := slices.Clone(res)
	for i, e := range experts {
		tok := i / k
		xt := make([]float64, hidden)
		for c := range xt {
			xt[c] = round(float64(x[tok*hidden+c]))
		}
		g, u := lin(xt, int(e), 0), lin(xt, int(e), 1)
		for c := range g {
			if te.act.Clamped {
				gc, uc := min(g[c], float64(te.act.Limit)), min(max(u[c], -float64(te.act.Limit)), float64(te.act.Limit))
				g[c] = (uc + 1) * gc / (1 + math.Exp(-float64(te.act.Alpha)*gc))
			} else {
				g[c] = g[c] / (1 + math.Exp(-g[c])) * u[c]
			}
			g[c] = round(g[c])
		}
		for c, v := range lin(g, int(e), 2) {
			want[tok*hidden+c] += float32(float64(weights[i]) * v)
		}
	}
	return want
}

// expertActivations are the two activations the expert tests run: SiLU
// without biases, GPT-OSS's clamped SwiGLU with them.
var expertActivations = []struct {
	name string
	bias bool
	act  device.ExpertActivation
}{{"silu", false, device.ExpertActivation{}}, {"clamped+bias", true, device.ExpertActivation{Clamped: true, Alpha: 1.702, Limit: 0.6}}}

// testModelOpsExpertsAdd runs grouped experts against the experts computed
// one by one in float64 on the host (x as it is, the weights as stored):
// steps of 1, 5 and 24 tokens (the streaming kernel, then the tiles), float32 and bf16 weights, with biases and
// GPT-OSS's clamped SwiGLU or without and SiLU. A step with more rows for
// one expert than a tile is declined with the residual untouched.
func testModelOpsExpertsAdd(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(64, 64))
	const nExp, k = 6, 2
	// Float experts, and compact ones (gu: gate's and up's format, dn:
	// down's), which run moe_qgemv for steps of up to GemvMaxRows rows an
	// expert, decline larger ones and are never routed on the device.
	for _, kind := range []struct {
		wdt, gu, dn   DType
		hidden, inter int
	}{
		{F32, 0, 0, 40, 24},
		{BF16, 0, 0, 40, 24},
		{BF16, tensor.MXFP4, tensor.MXFP4, 64, 96},
		{BF16, tensor.AWQ4_G32, tensor.AWQ4_G32, 64, 96},
		{BF16, tensor.Q4_K, tensor.Q6_K, 256, 256},
	} {
		hidden, inter, quant := kind.hidden, kind.inter, kind.gu != 0
		wdt := kind.wdt.String()
		if quant {
			wdt = kind.gu.String() + "+" + kind.dn.String()
		}
		o := env.newOpsWith(t, ModelOpsOptions{WeightDType: kind.wdt, KeepQuantized: quant})
		for _, tc := range expertActivations {
			te := newCompactExperts(t, o, rng, nExp, hidden, inter, tc.bias, tc.act, kind.gu, kind.dn)
			grp := te.grp
			for _, tokens := range []int{1, 5, 24} {
				subtest(t, fmt.Sprintf("%v/%s/%d", wdt, tc.name, tokens), func(t *testing.T) {
					o.BeginForward()
					defer o.EndForward()
					x, res := randn(rng, tokens*hidden, 1), randn(rng, tokens*hidden, 1)
					experts, weights := make([]int32, 0, tokens*k), make([]float32, 0, tokens*k)
					for range tokens {
						for _, e := range rng.Perm(nExp)[:k] {
							experts, weights = append(experts, int32(e)), append(weights, rng.Float32())
						}
					}
					dRes := o.Upload(tensor.From(slices.Clone(res), tokens, hidden))
					gemvBefore := env.moeGemvLaunches()
					counts := make([]int, nExp)
					for _, e := range experts {
						counts[e]++
					}
					ran := o.ExpertsAdd(dRes, o.Upload(tensor.From(x, tokens, hidden)), grp, experts, weights)
					switch {
					case quant && slices.Max(counts) > GemvMaxRows:
						if ran {
							t.Fatalf("compact experts ran a step of %d rows for one expert grouped", slices.Max(counts))
						}
						compare(t, "declined residual", o.ToHost(dRes).HostData(), res, 0, 0)
						return
					case !ran:
						t.Fatal("a step of at most 24 rows per expert was declined")
					}
					if quant && o.RoutedExpertsAdd(dRes, o.Upload(tensor.From(x, tokens, hidden)), o.Upload(tensor.From(randn(rng, tokens*nExp, 1), tokens, nExp)),
						&device.Router{TopK: k, Softmax: true, Scale: 1}, grp) {
						t.Fatal("compact experts were routed on the device")
					}
					// Up to GemvMaxRows rows per expert take the streaming kernel
					// (moe_qgemv for compact experts) for all three projections,
					// more the 32×32 tiles.
					if env.fake != nil {
						o.ToHost(dRes)
						want := 0
						if slices.Max(counts) <= GemvMaxRows {
							want = 3
						}
						if got := env.moeGemvLaunches() - gemvBefore; got != want {
							t.Errorf("%d rows for the busiest expert ran %d moe_gemv launches, want %d", slices.Max(counts), got, want)
						}
					}
					compare(t, "residual", o.ToHost(dRes).HostData(), te.ref(x, res, hidden, experts, weights), 2e-5*float64(hidden), 1e-4)
				})
			}
			subtest(t, fmt.Sprintf("%v/%s/declined", wdt, tc.name), func(t *testing.T) {
				o.BeginForward()
				defer o.EndForward()
				const tokens = groupedExpertRows + 1
				res := randn(rng, tokens*hidden, 1)
				experts, weights := make([]int32, 0, tokens*k), make([]float32, 0, tokens*k)
				for range tokens {
					experts, weights = append(experts, 0, 1), append(weights, 0.5, 0.5)
				}
				dRes := o.Upload(tensor.From(slices.Clone(res), tokens, hidden))
				if o.ExpertsAdd(dRes, o.Upload(tensor.From(randn(rng, tokens*hidden, 1), tokens, hidden)), grp, experts, weights) {
					t.Fatalf("a step of %d rows for one expert ran grouped", tokens)
				}
				compare(t, "declined residual", o.ToHost(dRes).HostData(), res, 0, 0)
			})
		}
	}
}

// routedRouters are the routing rules of the mixtures gosling runs:
// softmax over the top k renormalised (Qwen3-MoE, Mixtral; GPT-OSS's
// softmax after the top k is the same weights), softmax without
// renormalising (Qwen2-MoE), and DeepSeek-V3's biased sigmoid over groups.
var routedRouters = []struct {
	name string
	bias bool
	r    device.Router
}{
	{"softmax+norm", false, device.Router{TopK: 4, Softmax: true, NormTopK: true, Scale: 1}},
	{"softmax", false, device.Router{TopK: 4, Softmax: true, Scale: 1}},
	{"v3 grouped, biased", true, device.Router{TopK: 4, Groups: 4, TopKGroups: 2, NormTopK: true, Scale: 2.5}},
}

// testModelOpsRoutedExpertsAdd runs routing on the device against its
// reference, the host-routed path: the same ModelOps' Route (the choice
// read back) and the experts in float64 over that choice. Steps of 1, 5,
// 24 and 64 tokens take the streaming kernels (64 × top-4 of 16 experts
// is the most rows per expert they take, 16 on average, so some expert
// has more than GemvMaxRows and its tile loops), steps of 65 and 300 the
// grouped GEMMs (16-bit weights: x and the activation rounded to them);
// under GOSLING_MOE_PREFILL_LOOP=1 those are declined with the residual
// untouched.
func testModelOpsRoutedExpertsAdd(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(65, 65))
	const nExp, hidden, inter = 16, 40, 24
	for _, wdt := range []DType{F32, BF16} {
		o := env.newOps(t, wdt)
		for _, tc := range expertActivations {
			te := newTestExperts(t, o, rng, nExp, hidden, inter, tc.bias, tc.act)
			for _, rc := range routedRouters {
				r := rc.r
				if rc.bias {
					r.Bias = testVector(t, o, randn(rng, nExp, 0.3))
				}
				for _, tokens := range []int{1, 5, 24, 64, 65, 300} {
					subtest(t, fmt.Sprintf("%v/%s/%s/%d", wdt, tc.name, rc.name, tokens), func(t *testing.T) {
						o.BeginForward()
						defer o.EndForward()
						x, res := randn(rng, tokens*hidden, 1), randn(rng, tokens*hidden, 1)
						dx, logits := o.Upload(tensor.From(x, tokens, hidden)), o.Upload(tensor.From(randn(rng, tokens*nExp, 2), tokens, nExp))
						dRes := o.Upload(tensor.From(slices.Clone(res), tokens, hidden))
						if !o.RoutedExpertsAdd(dRes, dx, logits, &r, te.grp) {
							t.Fatalf("a step of %d tokens was declined", tokens)
						}
						experts, weights := o.Route(logits, &r)
						in, atol, rtol := F32, 2e-5*float64(hidden), 1e-4
						if plan, _ := o.planGEMM(o.expertGroupOf("test", te.grp), tokens*r.TopK, DevicePtr(dx.DevPtr())); tokens*r.TopK > routedRows(wdt)*nExp && plan.mma {
							in, atol, rtol = wdt, 3e-2, 1e-3
						}
						compare(t, "residual", o.ToHost(dRes).HostData(), te.refRounded(x, res, hidden, experts, weights, in), atol, rtol)
					})
				}
			}
			subtest(t, fmt.Sprintf("%v/%s/declined", wdt, tc.name), func(t *testing.T) {
				t.Setenv("GOSLING_MOE_PREFILL_LOOP", "1")
				te := newTestExperts(t, o, rng, nExp, hidden, inter, tc.bias, tc.act)
				o.BeginForward()
				defer o.EndForward()
				r := routedRouters[0].r
				tokens := routedRows(wdt)*nExp/r.TopK + 1
				res := randn(rng, tokens*hidden, 1)
				dRes := o.Upload(tensor.From(slices.Clone(res), tokens, hidden))
				if o.RoutedExpertsAdd(dRes, o.Upload(tensor.From(randn(rng, tokens*hidden, 1), tokens, hidden)),
					o.Upload(tensor.From(randn(rng, tokens*nExp, 2), tokens, nExp)), &r, te.grp) {
					t.Fatalf("under GOSLING_MOE_PREFILL_LOOP=1 a step of %d tokens (%d rows per expert) was routed on the device", tokens, tokens*r.TopK/nExp)
				}
				compare(t, "declined residual", o.ToHost(dRes).HostData(), res, 0, 0)
			})
		}
	}
}

// testModelOpsRoutedInGraph: a step routed on the device records with no
// refusal and the same signature whatever the router chooses, so it is
// captured once and replayed; on a GPU the replays, with other logits and
// x, give the host-routed reference's sums. The shared expert's sigmoid
// gate (SigmoidGatedAdd) is in the step too.
func testModelOpsRoutedInGraph(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(66, 66))
	const nExp, hidden, inter, tokens = 16, 40, 24, 3
	o := env.newOps(t, BF16)
	te := newTestExperts(t, o, rng, nExp, hidden, inter, false, device.ExpertActivation{})
	r := routedRouters[0].r
	var x, res, logits, gate, shared []float32
	var out tensor.T
	forward := func() error {
		o.BeginForward()
		dRes := o.Upload(tensor.From(slices.Clone(res), tokens, hidden))
		if !o.RoutedExpertsAdd(dRes, o.Upload(tensor.From(x, tokens, hidden)), o.Upload(tensor.From(logits, tokens, nExp)), &r, te.grp) {
			return errors.New("declined")
		}
		o.SigmoidGatedAdd(dRes, o.Upload(tensor.From(shared, tokens, hidden)), o.Upload(tensor.From(gate, tokens, 1)))
		out = dRes
		return nil
	}
	var sigs []uint64
	for step := range 3 {
		x, res, shared = randn(rng, tokens*hidden, 1), randn(rng, tokens*hidden, 1), randn(rng, tokens*hidden, 1)
		logits, gate = randn(rng, tokens*nExp, 2), randn(rng, tokens, 2)
		if env.fake != nil {
			sig, reason, err := o.DryRun(forward)
			o.EndForward()
			if err != nil || reason != "" {
				t.Fatalf("step %d: dry run: %v %q", step, err, reason)
			}
			sigs = append(sigs, sig)
			continue
		}
		run, err := o.RunGraph(1, forward)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]GraphPath{true: GraphCaptured, false: GraphReplayed}[step == 0]; run.Path != want {
			t.Fatalf("step %d ran %v (%q), want %v", step, run.Path, run.Reason, want)
		}
		experts, weights := o.Route(o.Upload(tensor.From(logits, tokens, nExp)), &r)
		want := te.ref(x, res, hidden, experts, weights)
		for tok := range tokens {
			s := 1 / (1 + math.Exp(-float64(gate[tok])))
			for c := range hidden {
				want[tok*hidden+c] += float32(s * float64(shared[tok*hidden+c]))
			}
		}
		compare(t, fmt.Sprint("step ", step, " residual"), o.ToHost(out).HostData(), want, 2e-5*hidden, 1e-4)
		o.EndForward()
	}
	for i, s := range sigs {
		if s != sigs[0] {
			t.Errorf("dry run %d signed %x, the first %x: the step's launches depend on the routing", i, s, sigs[0])
		}
	}
}

// moeGemvLaunches is the fake GPU's count of moe_gemv and moe_qgemv
// launches (0 on a GPU).
func (e opsEnv) moeGemvLaunches() int {
	n := 0
	for _, name := range append(slices.Clone(KernelNames.MoEGemv), KernelNames.MoEQGemv...) {
		n += e.launches(name)
	}
	return n
}

// groupedExpertsAdd is ExpertsAdd through the path RoutedExpertsAdd takes
// for large steps (moe_align's tiles, the grouped GEMMs, the combine)
// whatever the step's size, the choice uploaded; false where planGEMM
// declines the step.
func (o *ModelOps) groupedExpertsAdd(residual, x tensor.T, grp device.ExpertGroup, experts []int32, weights []float32) (plan gemmPlan, ok bool) {
	g := o.expertGroupOf("groupedExpertsAdd", grp)
	rows := x.Rows()
	if plan, ok = o.planGEMM(g, len(experts), DevicePtr(x.DevPtr())); !ok {
		return plan, false
	}
	o.do("groupedExpertsAdd", func() error {
		var sc scratch
		defer sc.release(o)
		dExp, err := o.uploadIndex(experts)
		if err != nil {
			return err
		}
		dW, err := o.uploadFloats(weights)
		if err != nil {
			return err
		}
		return o.expertsGEMM(&sc, g, plan, DevicePtr(residual.DevPtr()), DevicePtr(x.DevPtr()), dExp, dW, rows, len(experts)/rows)
	})
	return plan, true
}

// randomChoice is k distinct experts of nExp per token with random
// weights, and, when skewed, most tokens choosing among the first few
// experts (so that some expert has many tiles and others none).
func randomChoice(rng *rand.Rand, tokens, nExp, k int, skewed bool) ([]int32, []float32) {
	experts, weights := make([]int32, 0, tokens*k), make([]float32, 0, tokens*k)
	for range tokens {
		perm := rng.Perm(nExp)
		if skewed && rng.IntN(4) != 0 {
			perm = append(rng.Perm(k+1), perm...) // the first k+1 experts, then the rest (repeats skipped below)
		}
		seen := map[int]bool{}
		for _, e := range perm {
			if len(seen) == k {
				break
			}
			if !seen[e] {
				seen[e] = true
				experts, weights = append(experts, int32(e)), append(weights, rng.Float32())
			}
		}
	}
	return experts, weights
}

// testModelOpsMoEAlign runs moe_align on random choices (1 to 513 tokens,
// 8 to 128 experts, tiles of 32 and 64 rows, even and skewed routing) and
// checks what the grouped GEMMs rely on: pos is a permutation of the
// sorted rows with order[pos[i]] the token of pair i, each expert's rows
// contiguous and the experts ascending, the tiles covering every
// expert's rows in order in pieces of at most tile_rows, then empty tiles
// up to the list's bound.
func testModelOpsMoEAlign(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(67, 67))
	o := env.newOps(t, BF16)
	for _, ek := range [][2]int{{8, 2}, {16, 4}, {128, 8}} {
		nExp, k := ek[0], ek[1]
		for _, tokens := range []int{1, 7, 64, 513} {
			for _, tileRows := range []int{headLinearTile, moeGemmRows} {
				for _, skewed := range []bool{false, true} {
					subtest(t, fmt.Sprintf("%d_experts/top%d/%d/tiles%d/skewed=%v", nExp, k, tokens, tileRows, skewed), func(t *testing.T) {
						experts, _ := randomChoice(rng, tokens, nExp, k, skewed)
						pairs := len(experts)
						nTiles := (pairs + min(nExp, pairs)*(tileRows-1)) / tileRows
						order, pos, tiles := make([]int32, pairs), make([]int32, pairs), make([]int32, 3*nTiles)
						o.BeginForward()
						defer o.EndForward()
						o.do("align", func() error {
							var sc scratch
							defer sc.release(o)
							dExp, err := o.uploadIndex(experts)
							if err != nil {
								return err
							}
							var bufs [3]DevicePtr
							for i, n := range []int{pairs, pairs, 3 * nTiles} {
								if bufs[i], err = sc.alloc(o, 4*n); err != nil {
									return err
								}
							}
							if err := o.k.launchMoEAlign(o.stream, LaunchConfig{Grid: D1(1), Block: D1(moeAlignThreads), SharedMem: 12 * nExp},
								moEAlignArgs{Experts: dExp, Order: bufs[0], Pos: bufs[1], Tiles: bufs[2], Pairs: pairs, NExperts: nExp, K: k,
									NTiles: nTiles, TileRows: tileRows}); err != nil {
								return err
							}
							for i, dst := range [][]int32{order, pos, tiles} {
								if err := CopyDtoHAsync(o.dev, dst, bufs[i], o.stream); err != nil {
									return err
								}
							}
							return o.dev.StreamSync(o.stream)
						})
						rowExpert := make([]int32, pairs)
						seen := make([]bool, pairs)
						for i, r := range pos {
							if r < 0 || int(r) >= pairs || seen[r] {
								t.Fatalf("pair %d: sorted row %d (of %d) out of range or taken twice", i, r, pairs)
							}
							seen[r] = true
							if order[r] != int32(i/k) {
								t.Fatalf("pair %d at row %d: order says token %d, want %d", i, r, order[r], i/k)
							}
							rowExpert[r] = experts[i]
						}
						if !slices.IsSorted(rowExpert) {
							t.Fatalf("the sorted rows' experts are not ascending: %v", rowExpert)
						}
						next := 0 // the first sorted row no tile has covered
						for ti := range nTiles {
							e, r0, nr := tiles[3*ti], int(tiles[3*ti+1]), int(tiles[3*ti+2])
							if next == pairs {
								if e != 0 || r0 != 0 || nr != 0 {
									t.Fatalf("tile %d past the rows is (%d, %d, %d), want empty", ti, e, r0, nr)
								}
								continue
							}
							if r0 != next || nr < 1 || nr > tileRows || r0+nr > pairs {
								t.Fatalf("tile %d is (%d, %d, %d); the rows covered so far end at %d", ti, e, r0, nr, next)
							}
							for r := r0; r < r0+nr; r++ {
								if rowExpert[r] != e {
									t.Fatalf("tile %d of expert %d holds row %d of expert %d", ti, e, r, rowExpert[r])
								}
							}
							if last := r0 + nr; nr < tileRows && last < pairs && rowExpert[last] == e {
								t.Fatalf("tile %d of expert %d stops short at %d rows with the expert's rows going on", ti, e, nr)
							}
							next = r0 + nr
						}
						if next != pairs {
							t.Fatalf("the tiles cover %d of %d rows", next, pairs)
						}
					})
				}
			}
		}
	}
}

// testModelOpsExpertsGEMM runs the grouped path of large steps (align,
// grouped GEMMs, combine) against the experts in float64 on the host:
// 1, 7, 64 and 513 tokens over 8 (top 2), 16 (top 4) and 128 (top 8)
// experts, evenly and skewed, float32 weights (moe_linear's tiles), bf16
// and f16 (moe_gemm's tensor-core tiles, each projection's input rounded
// to the weights' type, as the reference does), SiLU and GPT-OSS's clamped
// SwiGLU with biases. The widths (72 in, 40 out) leave partial tiles of
// outputs and of k.
func testModelOpsExpertsGEMM(t *testing.T, env opsEnv) {
	rng := rand.New(rand.NewPCG(68, 68))
	const hidden, inter = 72, 40
	for _, wdt := range []DType{F32, BF16, F16} {
		o := env.newOps(t, wdt)
		for _, tc := range expertActivations {
			for _, ek := range [][2]int{{8, 2}, {16, 4}, {128, 8}} {
				nExp, k := ek[0], ek[1]
				te := newTestExperts(t, o, rng, nExp, hidden, inter, tc.bias, tc.act)
				for _, tokens := range []int{1, 7, 64, 513} {
					subtest(t, fmt.Sprintf("%v/%s/%d_experts/%d", wdt, tc.name, nExp, tokens), func(t *testing.T) {
						o.BeginForward()
						defer o.EndForward()
						experts, weights := randomChoice(rng, tokens, nExp, k, tokens > 64)
						x, res := randn(rng, tokens*hidden, 1), randn(rng, tokens*hidden, 1)
						dRes := o.Upload(tensor.From(slices.Clone(res), tokens, hidden))
						before := env.launches(nameMoEGemm(wdt))
						plan, ok := o.groupedExpertsAdd(dRes, o.Upload(tensor.From(x, tokens, hidden)), te.grp, experts, weights)
						if !ok {
							t.Fatal("declined")
						}
						if plan.mma != (wdt != F32 && o.dev.Info.Arch() >= 80) {
							t.Fatalf("plan %+v for %v weights", plan, wdt)
						}
						got := o.ToHost(dRes).HostData()
						if env.fake != nil && plan.mma {
							if n := env.launches(nameMoEGemm(wdt)) - before; n != 2 {
								t.Errorf("%d moe_gemm launches, want 2 (gate and up, down)", n)
							}
						}
						// With 16-bit weights an activation within float32's
						// error of a rounding boundary may round the other way
						// than the reference's: a 16-bit ulp of a few of the
						// down projection's inputs.
						in, atol, rtol := F32, 2e-5*float64(hidden), 1e-4
						if plan.mma {
							in, atol, rtol = wdt, 3e-2, 1e-3
						}
						compare(t, "residual", got, te.refRounded(x, res, hidden, experts, weights, in), atol, rtol)
					})
				}
			}
		}
	}
}

// launches is the fake GPU's count of launches of the kernel (0 on a GPU).
func (e opsEnv) launches(name string) int {
	if e.fake == nil {
		return 0
	}
	e.fake.mu.Lock()
	defer e.fake.mu.Unlock()
	return e.fake.launches[name]
}
