// Package conformance is the battery every attention backend must pass for
// every capability it claims: ragged batches that mix fresh prefill,
// prefill over a cached prefix, decode and tree verification, across page
// sizes, GQA ratios, head dims, windows, softcaps, bidirectional spans,
// encoder batches, MLA and KV dtypes. Outputs are compared with an
// independent float64 computation that quantises K/V exactly as the pool
// stores them.
package conformance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// Scenario is one configuration of the battery.
type Scenario struct {
	Name                    string
	Heads, KVHeads          int
	HeadDim, HeadDimV       int
	MLA                     bool
	Window                  int
	Softcap                 float32
	Sinks                   bool // one random sink logit per head (Layer.Sinks)
	PageSize                int
	DType                   tensor.DType
	TreeMask, Spans, Encode bool
	// Long uses sequences of a few hundred tokens, so split-KV backends
	// really split and windows slide past whole pages.
	Long bool
}

// needs lists the capability fields the scenario exercises.
// Unmet names the first capability the scenario needs that c lacks ("" if none).
func (s Scenario) Unmet(c attention.Caps) string {
	switch {
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
	case s.Sinks && !c.Sinks:
		return "attention sinks"
	case s.TreeMask && !c.SpecDecoding:
		return "tree masks"
	case (s.Spans || s.Encode) && !c.Multimodal:
		return "bidirectional attention"
	case s.MLA && !c.MLA:
		return "MLA"
	}
	return ""
}

// Scenarios is the battery.
func Scenarios() []Scenario {
	var out []Scenario
	add := func(s Scenario) {
		if s.HeadDimV == 0 {
			s.HeadDimV = s.HeadDim
		}
		if s.PageSize == 0 {
			s.PageSize = 1
		}
		out = append(out, s)
	}
	for _, ps := range []int{1, 3, 16, 64} {
		for _, ratio := range []int{1, 2, 4, 8} {
			add(Scenario{Name: fmt.Sprintf("gqa%d/page%d", ratio, ps), Heads: 8, KVHeads: 8 / ratio, HeadDim: 64, PageSize: ps})
		}
	}
	for _, d := range []int{64, 80, 96, 128, 256} {
		add(Scenario{Name: fmt.Sprintf("headdim%d", d), Heads: 4, KVHeads: 2, HeadDim: d, PageSize: 16})
	}
	add(Scenario{Name: "dk192_dv128", Heads: 4, KVHeads: 2, HeadDim: 192, HeadDimV: 128, PageSize: 3})
	add(Scenario{Name: "window5/page1", Heads: 4, KVHeads: 2, HeadDim: 64, Window: 5})
	add(Scenario{Name: "window8/page3", Heads: 4, KVHeads: 1, HeadDim: 64, Window: 8, PageSize: 3})
	add(Scenario{Name: "window4/page16", Heads: 8, KVHeads: 2, HeadDim: 80, Window: 4, PageSize: 16})
	add(Scenario{Name: "softcap", Heads: 4, KVHeads: 2, HeadDim: 64, Softcap: 2, PageSize: 16})
	add(Scenario{Name: "softcap_window", Heads: 4, KVHeads: 4, HeadDim: 128, Softcap: 5, Window: 6, PageSize: 1})
	// Sinks (GPT-OSS): with GQA, a window, tree masks, a long split-KV
	// sequence and converted KV, so every normalisation path meets one.
	add(Scenario{Name: "sinks/page1", Heads: 4, KVHeads: 2, HeadDim: 64, Sinks: true})
	add(Scenario{Name: "sinks_window/page16", Heads: 8, KVHeads: 2, HeadDim: 64, Sinks: true, Window: 5, PageSize: 16})
	add(Scenario{Name: "sinks_treemask/page3", Heads: 4, KVHeads: 1, HeadDim: 64, Sinks: true, TreeMask: true, PageSize: 3})
	add(Scenario{Name: "sinks_long/page16", Heads: 4, KVHeads: 2, HeadDim: 64, Sinks: true, Long: true, PageSize: 16})
	add(Scenario{Name: "sinks_long_window_bf16/page1", Heads: 8, KVHeads: 2, HeadDim: 64, Sinks: true, Window: 70, Long: true, DType: tensor.BF16})
	add(Scenario{Name: "treemask/page1", Heads: 4, KVHeads: 2, HeadDim: 64, TreeMask: true})
	add(Scenario{Name: "treemask/page16", Heads: 8, KVHeads: 1, HeadDim: 96, TreeMask: true, PageSize: 16})
	add(Scenario{Name: "treemask_window", Heads: 4, KVHeads: 2, HeadDim: 64, TreeMask: true, Window: 7, PageSize: 3})
	add(Scenario{Name: "spans/page1", Heads: 4, KVHeads: 2, HeadDim: 64, Spans: true})
	add(Scenario{Name: "spans/page64", Heads: 4, KVHeads: 4, HeadDim: 80, Spans: true, PageSize: 64})
	add(Scenario{Name: "encode", Heads: 4, KVHeads: 2, HeadDim: 64, Encode: true})
	add(Scenario{Name: "encode_dk_dv", Heads: 8, KVHeads: 8, HeadDim: 80, HeadDimV: 64, Encode: true})
	add(Scenario{Name: "mla512+64/page1", Heads: 16, KVHeads: 1, HeadDim: 576, HeadDimV: 512, MLA: true})
	add(Scenario{Name: "mla512+64/page64", Heads: 16, KVHeads: 1, HeadDim: 576, HeadDimV: 512, MLA: true, PageSize: 64})
	add(Scenario{Name: "mla512+64_bf16/page16", Heads: 24, KVHeads: 1, HeadDim: 576, HeadDimV: 512, MLA: true, PageSize: 16, DType: tensor.BF16})
	add(Scenario{Name: "mla_small_fp8", Heads: 4, KVHeads: 1, HeadDim: 48, HeadDimV: 32, MLA: true, PageSize: 16, DType: tensor.FP8E4M3})
	add(Scenario{Name: "long/page1", Heads: 4, KVHeads: 2, HeadDim: 64, Long: true})
	add(Scenario{Name: "long_window/page16", Heads: 8, KVHeads: 2, HeadDim: 64, Window: 70, PageSize: 16, Long: true})
	add(Scenario{Name: "long_mla_treemask/page3", Heads: 4, KVHeads: 1, HeadDim: 48, HeadDimV: 32, MLA: true, TreeMask: true, PageSize: 3, Long: true})
	for _, dt := range []tensor.DType{tensor.BF16, tensor.FP8E4M3} {
		add(Scenario{Name: fmt.Sprintf("kv_%v/page1", dt), Heads: 4, KVHeads: 2, HeadDim: 64, DType: dt})
		add(Scenario{Name: fmt.Sprintf("kv_%v/page16_window", dt), Heads: 8, KVHeads: 2, HeadDim: 128, DType: dt, PageSize: 16, Window: 6})
	}
	return out
}

// Run runs the battery against a backend; scenarios needing a capability
// the backend does not claim are skipped (and named).
func Run(t *testing.T, entry attention.Entry) {
	workers := cpu.NewWorkers(0)
	t.Cleanup(workers.Close)
	for _, s := range Scenarios() {
		t.Run(s.Name, func(t *testing.T) {
			if why := s.Unmet(entry.Caps); why != "" {
				t.Skipf("%s does not claim %s", entry.Name, why)
			}
			runScenario(t, entry, s, workers)
		})
	}
}

// Step is one forward: new tokens per request (0 = not in the batch).
type Step struct {
	Mode forward.Mode
	Lens []int
}

// Schedule is the scenario's forwards: fresh prefills, a mixed batch,
// decodes, a verify (tree-masked or a plain extend), decodes.
func Schedule(s Scenario) []Step {
	if s.Encode {
		return []Step{{forward.Encode, []int{7, 12, 1}}}
	}
	verify := Step{forward.Extend, []int{4, 0, 3}}
	if s.TreeMask {
		verify.Mode = forward.TargetVerify
	}
	if s.Long {
		return []Step{
			{forward.Extend, []int{150, 70, 0}},
			{forward.Mixed, []int{1, 90, 130}},
			{forward.Decode, []int{1, 1, 1}},
			verify,
			{forward.Decode, []int{1, 1, 1}},
		}
	}
	return []Step{
		{forward.Extend, []int{13, 5, 0}}, // fresh prefills
		{forward.Mixed, []int{1, 7, 9}},   // decode-like, prefix extend, fresh prefill
		{forward.Decode, []int{1, 1, 1}},
		verify, // tree verification of drafts (or plain extend)
		{forward.Decode, []int{1, 1, 0}},
	}
}

// Span is the bidirectional span the battery gives request r (the
// member-th request of the batch, prefix tokens cached) at step si of a
// Spans scenario, if any: one inside the first prefill, one inside a
// later extend.
func (s Scenario) Span(si, r, member, prefix int) (forward.Span, bool) {
	switch {
	case !s.Spans:
	case si == 0 && r == 0:
		return forward.Span{Req: int32(member), Start: 3, End: 8}, true
	case si == 1 && r == 1:
		return forward.Span{Req: int32(member), Start: int32(prefix + 1), End: int32(prefix + 6)}, true
	}
	return forward.Span{}, false
}

// AttachMasks appends each request's tree-mask rows (one [new][seq] mask
// per masked request, in batch order) to b's CustomMask with MaskStarts.
func AttachMasks(b *forward.Batch, masks [][][]bool) {
	for _, m := range masks {
		b.MaskStarts = append(b.MaskStarts, int32(len(b.CustomMask)))
		for _, row := range m {
			b.CustomMask = append(b.CustomMask, row...)
		}
	}
}

// History is one request's tokens as the reference sees them.
type History struct {
	Q, K, V [][]float64 // per token; K, V as stored (quantised)
}

type seqState struct {
	History
	seq *kvcache.Seq
}

func runScenario(t *testing.T, entry attention.Entry, s Scenario, workers *cpu.Workers) {
	rng := rand.New(rand.NewPCG(uint64(len(s.Name)), uint64(s.HeadDim*131+s.PageSize)))
	// Two layers per forward with the same inputs: a backend must plan once
	// and serve every layer from that plan.
	layer := attention.Layer{Index: 1, NumHeads: s.Heads, NumKVHeads: s.KVHeads, HeadDim: s.HeadDim, HeadDimV: s.HeadDimV,
		Scale: float32(1 / math.Sqrt(float64(s.HeadDim))), SlidingWindow: s.Window, LogitSoftcap: s.Softcap, MLA: s.MLA}
	if s.Sinks {
		layer.Sinks = DrawSinks(rng, s.Heads)
	}
	var cache *kvcache.Cache
	if !s.Encode {
		spec := kvcache.Spec{NumLayers: 2, NumKVHeads: s.KVHeads, HeadDim: s.HeadDim, HeadDimV: s.HeadDimV, SharedV: s.MLA, DType: s.DType}
		var err error
		if cache, err = kvcache.NewCache(spec, s.PageSize, 1024, 4, 512); err != nil {
			t.Fatal(err)
		}
		if s.DType == tensor.FP8E4M3 {
			cache.Pool.SetScales(0, 0.05, 0.03)
			cache.Pool.SetScales(1, 0.05, 0.03)
		}
	}
	l0 := layer
	l0.Index = 0
	be, err := entry.New(attention.Options{Device: "cpu", KV: cache, Runtime: cpu.NewRuntime(workers), Layers: []attention.Layer{l0, layer}})
	if err != nil {
		t.Fatal(err)
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
	for si, st := range Schedule(s) {
		b := &forward.Batch{Mode: st.Mode, KV: cache}
		var qs, ks, vs []float32
		var members []int
		var masks [][][]bool // per member: [new, seqLen]
		for r, n := range st.Lens {
			if n == 0 {
				continue
			}
			sq := reqs[r]
			prefix := len(sq.K)
			members = append(members, r)
			b.ReqRows = append(b.ReqRows, int32(0))
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
				q, k, v := randRow(rng, qw), randRow(rng, kw), randRow(rng, vw)
				qs, ks, vs = append(qs, q...), append(ks, k...), append(vs, v...)
				sq.Q = append(sq.Q, widen(q))
				sq.K = append(sq.K, Stored(k, s.DType, 0.05))
				sq.V = append(sq.V, Stored(v, s.DType, 0.03))
			}
			if st.Mode == forward.TargetVerify {
				masks = append(masks, TreeMask(rng, prefix, n))
			}
			if sp, ok := s.Span(si, r, len(members)-1, prefix); ok {
				b.Spans = append(b.Spans, sp)
			}
		}
		AttachMasks(b, masks)
		if cache == nil {
			b.PrefixLens = make([]int32, len(members))
			b.OutSlots = make([]int32, len(b.InputIDs))
		}
		if err := b.Finalize(); err != nil {
			t.Fatalf("step %d: %v", si, err)
		}
		nt := b.NumTokens()
		var vT tensor.T
		if !s.MLA {
			vT = tensor.From(vs, nt, vw)
		}
		if err := be.Plan(b); err != nil {
			t.Fatalf("step %d (%v): plan: %v", si, st.Mode, err)
		}
		layer0 := layer
		layer0.Index = 0
		out0, err := attention.Run(be, tensor.From(qs, nt, qw), tensor.From(ks, nt, kw), vT, &layer0, b)
		if err != nil {
			t.Fatalf("step %d (%v), layer 0: %v", si, st.Mode, err)
		}
		out, err := attention.Run(be, tensor.From(qs, nt, qw), tensor.From(ks, nt, kw), vT, &layer, b)
		if err != nil {
			t.Fatalf("step %d (%v): %v", si, st.Mode, err)
		}
		for i := range out.HostData() {
			if out.HostData()[i] != out0.HostData()[i] {
				t.Fatalf("step %d (%v): layers 0 and 1 got the same inputs but differ at %d: %v vs %v", si, st.Mode, i, out0.HostData()[i], out.HostData()[i])
			}
		}
		if len(out.HostData()) != nt*s.Heads*s.HeadDimV {
			t.Fatalf("step %d: output has %d values, want [%d, %d]", si, len(out.HostData()), nt, s.Heads*s.HeadDimV)
		}
		for mi, r := range members {
			sq := reqs[r]
			prefix, n := int(b.PrefixLens[mi]), int(b.ExtendLens[mi])
			var mask [][]bool
			if masks != nil {
				mask = masks[mi]
			}
			var spans [][2]int
			for _, sp := range b.Spans {
				if int(sp.Req) == mi {
					spans = append(spans, [2]int{int(sp.Start), int(sp.End)})
				}
			}
			for t0 := range n {
				i := prefix + t0
				var maskRow []bool
				if mask != nil {
					maskRow = mask[t0]
				}
				want := Reference(&sq.History, i, prefix+n, layer, s.Encode, spans, maskRow)
				got := out.Row(int(b.ExtendStarts[mi]) + t0)
				for x := range want {
					if d := math.Abs(float64(got[x]) - want[x]); d > 1e-4*max(1, math.Abs(want[x])) || math.IsNaN(float64(got[x])) {
						t.Fatalf("step %d (%v), request %d, token %d, value %d: got %.7g, want %.7g", si, st.Mode, r, i, x, got[x], want[x])
					}
				}
			}
		}
	}
}

// Reference computes token i's output in float64 from first principles.
func Reference(sq *History, i, seqLen int, l attention.Layer, encode bool, spans [][2]int, mask []bool) []float64 {
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
		q := sq.Q[i][h*l.HeadDim : (h+1)*l.HeadDim]
		var idx []int
		var scores []float64
		m := math.Inf(-1)
		for j := range seqLen {
			if !visible(j) {
				continue
			}
			k := sq.K[j][g*l.HeadDim : (g+1)*l.HeadDim]
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
		if l.Sinks != nil {
			sink := float64(l.Sinks[h])
			m = max(m, sink)
			sum = math.Exp(sink - m)
		}
		for n := range scores {
			scores[n] = math.Exp(scores[n] - m)
			sum += scores[n]
		}
		for n, j := range idx {
			var v []float64
			if l.MLA {
				v = sq.K[j][:l.HeadDimV]
			} else {
				v = sq.V[j][g*l.HeadDimV : (g+1)*l.HeadDimV]
			}
			for d := range v {
				out[h*l.HeadDimV+d] += scores[n] / sum * v[d]
			}
		}
	}
	return out
}

// TreeMask builds a draft tree of n tokens after prefix: each draft sees
// the whole prefix, itself and its ancestors.
func TreeMask(rng *rand.Rand, prefix, n int) [][]bool {
	parent := make([]int, n)
	rows := make([][]bool, n)
	for t := range n {
		parent[t] = rng.IntN(t+1) - 1 // -1: a root hanging off the prefix
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

func randRow(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// DrawSinks draws one sink logit per head for a Sinks scenario: around the
// scores' own size (a few units), so that a sink neither vanishes nor
// swamps the keys, and the first large enough to dominate its row, which
// the overflow-safe normalisation must survive.
func DrawSinks(rng *rand.Rand, heads int) []float32 {
	sinks := make([]float32, heads)
	for h := range sinks {
		sinks[h] = float32(rng.NormFloat64() * 2)
	}
	sinks[0] = 60
	return sinks
}

// Stored is x as the pool gives it back.
func Stored(x []float32, dt tensor.DType, fp8Scale float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		switch dt {
		case tensor.BF16:
			v = tensor.BF16ToF32(tensor.F32ToBF16(v))
		case tensor.F16:
			v = tensor.F16ToF32(tensor.F32ToF16(v))
		case tensor.FP8E4M3:
			// Multiplied by the inverse scale, as kvcache.Pool and the CUDA
			// store kernel do: v/scale may round to the other fp8 neighbour.
			v = tensor.FP8E4M3ToF32(tensor.F32ToFP8E4M3(v*(1/fp8Scale))) * fp8Scale
		}
		out[i] = float64(v)
	}
	return out
}
