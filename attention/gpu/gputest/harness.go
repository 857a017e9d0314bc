// Package gputest runs the attention conformance battery on the GPU. It is
// a package of its own (not part of attention/gpu) because it imports
// attention/conformance, whose tests import every backend, attention/gpu
// included.
package gputest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/conformance"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// The device conformance harness: the scenarios of attention/conformance,
// run through a CUDA backend with q/k/v uploaded as device tensors and a
// device KV pool, compared with a float64 reference. conformance exports
// only Scenarios, so its schedule, tree masks and reference are restated
// here (kept in step by hand: same schedule, same visibility rule).

var testRT struct {
	once sync.Once
	rt   *gpu.Runtime
	skip string
	err  error
}

// TestRuntime opens GPU 0 once per test binary, loads the kernels (through
// the on-disk NVRTC cache) and attaches the runtime as "cuda". It skips the
// test with one line when the driver cannot be opened.
func TestRuntime(t testing.TB) *gpu.Runtime {
	t.Helper()
	testRT.once.Do(func() {
		if err := cuda.DriverAvailable(); err != nil {
			testRT.skip = "libcuda.so.1 cannot be opened: " + err.Error()
			return
		}
		dev, err := cuda.Open(0)
		if err != nil {
			testRT.skip = "no CUDA device: " + err.Error()
			return
		}
		nv, err := cuda.LoadNVRTC()
		if err != nil {
			testRT.err = err
			return
		}
		kernels, err := cuda.LoadKernels(dev, nv, cuda.NewDefaultKernelCache())
		if err != nil {
			testRT.err = err
			return
		}
		testRT.rt = gpu.NewRuntime(dev, kernels)
		fmt.Fprintf(os.Stderr, "gpu: %v; kernels: %d compiled, %d cached, %v\n", dev.Info, kernels.Compiled, kernels.CacheHits, kernels.LoadTime)
	})
	if testRT.skip != "" {
		t.Skip(testRT.skip)
	}
	if testRT.err != nil {
		t.Fatal(testRT.err)
	}
	return testRT.rt
}

// RunCUDA runs the conformance battery against a CUDA entry, once with
// float32 activations (tolerance 1e-4 relative, whatever the KV storage:
// the reference quantises K/V as the pool stores them) and once with bf16
// activations (the tensor-core path; the reference takes the bf16-rounded
// inputs, tolerance 2e-2 for the bf16 output and probabilities). Scenarios
// needing a capability the entry does not claim are skipped and named.
func RunCUDA(t *testing.T, entry attention.Entry) {
	rt := TestRuntime(t)
	for _, act := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(act.String(), func(t *testing.T) {
			for _, s := range conformance.Scenarios() {
				t.Run(s.Name, func(t *testing.T) {
					if why := unmet(s, entry.Caps); why != "" {
						t.Skipf("%s does not claim %s", entry.Name, why)
					}
					runScenario(t, rt, entry, s, act)
				})
			}
		})
	}
}

// unmet restates conformance's capability check, adding the device.
func unmet(s conformance.Scenario, c attention.Caps) string {
	switch {
	case !slices.Contains(c.Devices, "cuda"):
		return "the cuda device"
	case !c.PageSizes.Allows(s.PageSize) && !s.Encode:
		return fmt.Sprintf("page size %d", s.PageSize)
	case c.HeadDims != nil && !slices.Contains(c.HeadDims, s.HeadDim):
		return fmt.Sprintf("head dim %d", s.HeadDim)
	case !slices.Contains(c.KVDTypes, s.DType):
		return fmt.Sprintf("KV dtype %v", s.DType)
	case s.Window > 0 && !c.SlidingWindow:
		return "sliding window"
	case s.Softcap > 0 && !c.LogitSoftcap:
		return "logit softcap"
	case s.TreeMask && !c.SpecDecoding:
		return "tree masks"
	case (s.Spans || s.Encode) && !c.Multimodal:
		return "bidirectional attention"
	case s.MLA && !c.MLA:
		return "MLA"
	}
	return ""
}

type step struct {
	mode forward.Mode
	lens []int
}

// schedule is conformance's: fresh prefills, a mixed batch, decodes, a
// verify (tree-masked or plain extend), decodes.
func schedule(s conformance.Scenario) []step {
	if s.Encode {
		return []step{{forward.Encode, []int{7, 12, 1}}}
	}
	verify := step{forward.Extend, []int{4, 0, 3}}
	if s.TreeMask {
		verify.mode = forward.TargetVerify
	}
	if s.Long {
		return []step{
			{forward.Extend, []int{150, 70, 0}},
			{forward.Mixed, []int{1, 90, 130}},
			{forward.Decode, []int{1, 1, 1}},
			verify,
			{forward.Decode, []int{1, 1, 1}},
		}
	}
	return []step{
		{forward.Extend, []int{13, 5, 0}},
		{forward.Mixed, []int{1, 7, 9}},
		{forward.Decode, []int{1, 1, 1}},
		verify,
		{forward.Decode, []int{1, 1, 0}},
	}
}

type seqState struct {
	q, k, v [][]float64 // per token, as the device sees them (k, v as stored)
	seq     *kvcache.Seq
}

const (
	fp8KScale, fp8VScale = 0.05, 0.03
)

func runScenario(t *testing.T, rt *gpu.Runtime, entry attention.Entry, s conformance.Scenario, act tensor.DType) {
	rng := rand.New(rand.NewPCG(uint64(len(s.Name)), uint64(s.HeadDim*131+s.PageSize)))
	layer := attention.Layer{Index: 1, NumHeads: s.Heads, NumKVHeads: s.KVHeads, HeadDim: s.HeadDim, HeadDimV: s.HeadDimV,
		Scale: float32(1 / math.Sqrt(float64(s.HeadDim))), SlidingWindow: s.Window, LogitSoftcap: s.Softcap, MLA: s.MLA}
	var cache *kvcache.Cache
	if !s.Encode {
		spec := kvcache.Spec{NumLayers: 2, NumKVHeads: s.KVHeads, HeadDim: s.HeadDim, HeadDimV: s.HeadDimV, SharedV: s.MLA, DType: s.DType}
		var err error
		if cache, err = kvcache.NewCache(spec, s.PageSize, 1024, 4, 512); err != nil {
			t.Fatal(err)
		}
		pool, err := kvcache.NewDevicePool(spec, cache.Alloc.NumPages()*s.PageSize, s.PageSize, rt.PoolMemory())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.FreeDevice(rt.PoolMemory()) })
		cache.Pool = pool
		if s.DType == tensor.FP8E4M3 {
			pool.SetScales(0, fp8KScale, fp8VScale)
			pool.SetScales(1, fp8KScale, fp8VScale)
		}
	}
	// Two layers per forward with the same inputs: a backend must plan once
	// and serve every layer from that plan.
	layer0 := layer
	layer0.Index = 0
	be, err := entry.New(attention.Options{Device: "cuda", KV: cache, Layers: []attention.Layer{layer0, layer}, GPU: rt})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := be.(interface{ Close() error }); ok {
		t.Cleanup(func() { c.Close() })
	}
	reqs := make([]*seqState, 3)
	for i := range reqs {
		reqs[i] = &seqState{}
		if cache != nil {
			reqs[i].seq, _ = cache.NewSeq()
		}
	}
	qw, kw, vw := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.KVHeads*s.HeadDimV
	if s.MLA {
		vw = 0
	}
	tol := 1e-4
	if act != tensor.F32 {
		tol = 2e-2
	}
	for si, st := range schedule(s) {
		b := &forward.Batch{Mode: st.mode, KV: cache}
		var qs, ks, vs []float32
		var members []int
		var masks [][][]bool
		for r, n := range st.lens {
			if n == 0 {
				continue
			}
			sq := reqs[r]
			prefix := len(sq.k)
			members = append(members, r)
			b.ReqRows = append(b.ReqRows, 0)
			if cache != nil {
				if ok, err := cache.Grow(sq.seq, prefix+n); !ok || err != nil {
					t.Fatalf("grow: %v %v", ok, err)
				}
				b.ReqRows[len(b.ReqRows)-1] = int32(sq.seq.Row)
			}
			b.PrefixLens = append(b.PrefixLens, int32(prefix))
			b.ExtendLens = append(b.ExtendLens, int32(n))
			for i := prefix; i < prefix+n; i++ {
				b.InputIDs = append(b.InputIDs, 0)
				b.Positions = append(b.Positions, int32(i))
				if cache != nil {
					b.OutSlots = append(b.OutSlots, cache.Table.Row(sq.seq.Row)[i])
				}
				q, k, v := randRow(rng, qw, act), randRow(rng, kw, act), randRow(rng, vw, act)
				qs, ks, vs = append(qs, q...), append(ks, k...), append(vs, v...)
				sq.q = append(sq.q, stored(q, tensor.F32, 1))
				kdt := s.DType
				if s.Encode {
					kdt = tensor.F32
				}
				sq.k = append(sq.k, stored(k, kdt, fp8KScale))
				sq.v = append(sq.v, stored(v, kdt, fp8VScale))
			}
			if st.mode == forward.TargetVerify {
				masks = append(masks, treeMask(rng, prefix, n))
			}
			if s.Spans && si == 0 && r == 0 {
				b.Spans = append(b.Spans, forward.Span{Req: int32(len(members) - 1), Start: 3, End: 8})
			}
			if s.Spans && si == 1 && r == 1 {
				b.Spans = append(b.Spans, forward.Span{Req: int32(len(members) - 1), Start: int32(prefix + 1), End: int32(prefix + 6)})
			}
		}
		for _, m := range masks {
			b.MaskStarts = append(b.MaskStarts, int32(len(b.CustomMask)))
			for _, row := range m {
				b.CustomMask = append(b.CustomMask, row...)
			}
		}
		if cache == nil {
			b.PrefixLens = make([]int32, len(members))
			b.OutSlots = make([]int32, len(b.InputIDs))
		}
		if err := b.Finalize(); err != nil {
			t.Fatalf("step %d: %v", si, err)
		}
		nt := b.NumTokens()
		qT, kT := upload(t, rt, qs, act, nt, qw), upload(t, rt, ks, act, nt, kw)
		var vT tensor.T
		if !s.MLA {
			vT = upload(t, rt, vs, act, nt, vw)
		}
		if err := be.Plan(b); err != nil {
			t.Fatalf("step %d: plan: %v", si, err)
		}
		out0, err := attention.Run(be, qT, kT, vT, &layer0, b)
		if err != nil {
			t.Fatalf("step %d (%v), layer 0: %v", si, st.mode, err)
		}
		out, err := attention.Run(be, qT, kT, vT, &layer, b)
		if err != nil {
			t.Fatalf("step %d (%v): %v", si, st.mode, err)
		}
		got0, got := download(t, rt, out0), download(t, rt, out)
		for i := range got {
			if got[i] != got0[i] {
				t.Fatalf("step %d (%v): layers 0 and 1 got the same inputs but differ at %d: %v vs %v", si, st.mode, i, got0[i], got[i])
			}
		}
		if len(got) != nt*s.Heads*s.HeadDimV {
			t.Fatalf("step %d: output has %d values, want [%d, %d]", si, len(got), nt, s.Heads*s.HeadDimV)
		}
		cols := s.Heads * s.HeadDimV
		for mi, r := range members {
			sq := reqs[r]
			prefix, n := int(b.PrefixLens[mi]), int(b.ExtendLens[mi])
			var spans [][2]int
			for _, sp := range b.Spans {
				if int(sp.Req) == mi {
					spans = append(spans, [2]int{int(sp.Start), int(sp.End)})
				}
			}
			for t0 := range n {
				var maskRow []bool
				if masks != nil {
					maskRow = masks[mi][t0]
				}
				want := reference(sq, prefix+t0, prefix+n, layer, s.Encode, spans, maskRow)
				row := int(b.ExtendStarts[mi]) + t0
				for x, w := range want {
					g := got[row*cols+x]
					if d := math.Abs(float64(g) - w); d > tol*max(1, math.Abs(w)) || math.IsNaN(float64(g)) {
						t.Fatalf("step %d (%v), request %d, token %d, value %d: got %.7g, want %.7g", si, st.mode, r, prefix+t0, x, g, w)
					}
				}
			}
		}
	}
}

// upload copies rows of values to a new device tensor in dt, freed with the test.
func upload(t *testing.T, rt *gpu.Runtime, vals []float32, dt tensor.DType, rows, cols int) tensor.T {
	t.Helper()
	raw := make([]byte, len(vals)*elemBytes(dt))
	tensor.EncodeInto(dt, vals, raw)
	buf, err := rt.Alloc(len(raw))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Free(buf) })
	if err := cuda.CopyHtoD(rt.Dev, buf.Ptr, raw); err != nil {
		t.Fatal(err)
	}
	return tensor.T{Shape: []int{rows, cols}, Dev: uintptr(buf.Ptr), DType: dt}
}

// download copies a device tensor back as float32 and frees it.
func download(t *testing.T, rt *gpu.Runtime, x tensor.T) []float32 {
	t.Helper()
	defer rt.FreeTensor(x)
	n := x.NumElements()
	raw := make([]byte, n*elemBytes(x.DType))
	if err := cuda.CopyDtoH(rt.Dev, raw, cuda.DevicePtr(x.Dev)); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	tensor.DecodeInto(x.DType, raw, out)
	return out
}

// reference is conformance's float64 computation of token i's output.
func reference(sq *seqState, i, seqLen int, l attention.Layer, encode bool, spans [][2]int, mask []bool) []float64 {
	group := l.NumHeads / l.NumKVHeads
	out := make([]float64, l.NumHeads*l.HeadDimV)
	visible := func(j int) bool {
		if l.SlidingWindow > 0 && j <= i-l.SlidingWindow {
			return false
		}
		if mask != nil {
			return mask[j]
		}
		if encode || j <= i {
			return true
		}
		for _, s := range spans {
			if s[0] <= i && i < s[1] && j < s[1] {
				return true
			}
		}
		return false
	}
	for h := range l.NumHeads {
		g := h / group
		q := sq.q[i][h*l.HeadDim : (h+1)*l.HeadDim]
		var idx []int
		var scores []float64
		m := math.Inf(-1)
		for j := range seqLen {
			if !visible(j) {
				continue
			}
			k := sq.k[j][g*l.HeadDim : (g+1)*l.HeadDim]
			s := 0.0
			for d := range q {
				s += q[d] * k[d]
			}
			s *= float64(l.Scale)
			if c := float64(l.LogitSoftcap); c > 0 {
				s = c * math.Tanh(s/c)
			}
			idx, scores = append(idx, j), append(scores, s)
			m = max(m, s)
		}
		sum := 0.0
		for n := range scores {
			scores[n] = math.Exp(scores[n] - m)
			sum += scores[n]
		}
		for n, j := range idx {
			var v []float64
			if l.MLA {
				v = sq.k[j][:l.HeadDimV]
			} else {
				v = sq.v[j][g*l.HeadDimV : (g+1)*l.HeadDimV]
			}
			for d := range v {
				out[h*l.HeadDimV+d] += scores[n] / sum * v[d]
			}
		}
	}
	return out
}

// treeMask: each draft token sees the whole prefix, itself and its ancestors.
func treeMask(rng *rand.Rand, prefix, n int) [][]bool {
	parent := make([]int, n)
	rows := make([][]bool, n)
	for t := range n {
		parent[t] = rng.IntN(t+1) - 1
		rows[t] = make([]bool, prefix+n)
		for j := range prefix {
			rows[t][j] = true
		}
		for a := t; a >= 0; a = parent[a] {
			rows[t][prefix+a] = true
		}
	}
	return rows
}

// randRow draws normal values, rounded to the activation dtype so that
// the reference sees exactly what the device gets.
func randRow(rng *rand.Rand, n int, act tensor.DType) []float32 {
	out := make([]float32, n)
	for i := range out {
		v := float32(rng.NormFloat64())
		switch act {
		case tensor.BF16:
			v = tensor.BF16ToF32(tensor.F32ToBF16(v))
		case tensor.F16:
			v = tensor.F16ToF32(tensor.F32ToF16(v))
		}
		out[i] = v
	}
	return out
}

// stored is x as the device pool gives it back: fp8 through x·(1/scale),
// exactly as kvcache.Pool and the store kernel quantise.
func stored(x []float32, dt tensor.DType, fp8Scale float32) []float64 {
	out := make([]float64, len(x))
	inv := 1 / fp8Scale
	for i, v := range x {
		switch dt {
		case tensor.BF16:
			v = tensor.BF16ToF32(tensor.F32ToBF16(v))
		case tensor.FP8E4M3:
			v = tensor.FP8E4M3ToF32(tensor.F32ToFP8E4M3(v*inv)) * fp8Scale
		}
		out[i] = float64(v)
	}
	return out
}

func elemBytes(dt tensor.DType) int {
	switch dt {
	case tensor.F32:
		return 4
	case tensor.FP8E4M3:
		return 1
	}
	return 2
}
