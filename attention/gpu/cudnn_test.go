package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
)

// cudnnBatch builds a forward over a real paged cache: requests of
// (prefix, new tokens), their pages interleaved by growing them in turns.
func cudnnBatch(t *testing.T, mode forward.Mode, ps int, lens [][2]int) *forward.Batch {
	t.Helper()
	cache, err := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 2, HeadDim: 8, HeadDimV: 8}, ps, 2048, 8, 512)
	if err != nil {
		t.Fatal(err)
	}
	b := &forward.Batch{Mode: mode, KV: cache}
	seqs := make([]*kvcache.Seq, len(lens))
	for r := range lens {
		seqs[r], _ = cache.NewSeq()
		b.ReqRows = append(b.ReqRows, int32(seqs[r].Row))
	}
	for grown := 0; ; grown += 5 {
		more := false
		for r, l := range lens {
			if n := min(grown+5, l[0]+l[1]); n > grown {
				if ok, err := cache.Grow(seqs[r], n); !ok || err != nil {
					t.Fatal(ok, err)
				}
				more = true
			}
		}
		if !more {
			break
		}
	}
	for r, l := range lens {
		b.PrefixLens = append(b.PrefixLens, int32(l[0]))
		b.ExtendLens = append(b.ExtendLens, int32(l[1]))
		for i := l[0]; i < l[0]+l[1]; i++ {
			b.InputIDs = append(b.InputIDs, 0)
			b.Positions = append(b.Positions, int32(i))
			b.OutSlots = append(b.OutSlots, cache.Table.Row(seqs[r].Row)[i])
		}
	}
	if err := b.Finalize(); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCudnnShape: forwards share a plan shape while their batch and
// lengths stay in the same buckets, and not across one.
func TestCudnnShape(t *testing.T) {
	g := cudnnGeom{Heads: 4, KVHeads: 2, DimQK: 8, DimV: 8}
	shape := func(mode forward.Mode, ps int, lens [][2]int) cudnnShape {
		return cudnnShapeOf(cudnnBatch(t, mode, ps, lens), g, ps, 2048/ps)
	}
	d3 := shape(forward.Decode, 16, [][2]int{{70, 1}, {3, 1}, {100, 1}})
	if want := (cudnnShape{cudnnGeom: g, Decode: true, Batch: 4, MaxQ: 1, Pages: 8, PageSize: 16, Blocks: 128}); d3 != want {
		t.Fatalf("decode shape %+v, want %+v", d3, want)
	}
	if d4 := shape(forward.Decode, 16, [][2]int{{70, 1}, {3, 1}, {100, 1}, {126, 1}}); d4 != d3 {
		t.Errorf("a fourth request within the buckets changed the shape: %+v", d4)
	}
	if d5 := shape(forward.Decode, 16, [][2]int{{70, 1}, {3, 1}, {100, 1}, {5, 1}, {6, 1}}); d5.Batch != 8 || d5 == d3 {
		t.Errorf("a fifth request: batch %d", d5.Batch)
	}
	if long := shape(forward.Decode, 16, [][2]int{{128, 1}}); long.Pages != 16 || long.SKV() != 256 {
		t.Errorf("129 keys: %d pages (%d keys), want 16 (256)", long.Pages, long.SKV())
	}
	e := shape(forward.Mixed, 1, [][2]int{{0, 70}, {40, 1}})
	if e.Decode || e.MaxQ != 128 || e.Pages != 128 || e.Batch != 2 {
		t.Errorf("extend shape %+v", e)
	}
	if e.MaxQ > e.SKV() {
		t.Errorf("%d queries over %d keys: bottom-right causal needs max queries <= max keys", e.MaxQ, e.SKV())
	}
}

// TestCudnnStatsPlan: of a layer with sinks and one without in the same
// forward (shapes that differ only in Stats, so plans of their own), the
// sink plan's graph binds exactly one tensor more: the float32
// statistics, one per query row of each sequence and head.
func TestCudnnStatsPlan(t *testing.T) {
	g := cudnnGeom{Heads: 4, KVHeads: 2, DimQK: 64, DimV: 64}
	for _, mode := range []forward.Mode{forward.Extend, forward.Decode} {
		lens := [][2]int{{0, 13}, {40, 7}, {150, 1}}
		if mode == forward.Decode {
			lens = [][2]int{{12, 1}, {40, 1}, {150, 1}}
		}
		plain := cudnnShapeOf(cudnnBatch(t, mode, 16, lens), g, 16, 128)
		plain.DType, plain.Scale = cudnnTestDType, 0.125
		sink := plain
		sink.Stats = true
		gp, err := cudnnSDPAGraph(plain)
		if err != nil {
			t.Fatal(err)
		}
		gs, err := cudnnSDPAGraph(sink)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(gp.Bound(), cudnnUIDStats); !slices.Equal(gs.Bound(), want) {
			t.Fatalf("%v: the sink graph binds %v, want %v", mode, gs.Bound(), want)
		}
		st := gs.Tensor(cudnnUIDStats)
		rows := int64(sink.Batch * sink.Heads * sink.MaxQ)
		if st.DType != cuda.CudnnFloat || st.Virtual || st.Ragged != 0 || st.Dims[0]*st.Dims[1]*st.Dims[2]*st.Dims[3] != rows {
			t.Fatalf("%v: statistics %+v, want %d dense float32 values", mode, *st, rows)
		}
		if gp.Tensor(cudnnUIDStats) != nil {
			t.Fatalf("%v: the plain graph has a statistics tensor", mode)
		}
	}
}

// TestCudnnArrays: the per-sequence arrays match the batch: lengths,
// element offsets of each sequence's first query and output row, and the
// page table, whose pages give back every slot of every sequence; padding
// sequences read one key at page 0 (and own a query row in decode only),
// and each array is 16-byte aligned.
func TestCudnnArrays(t *testing.T) {
	g := cudnnGeom{Heads: 4, KVHeads: 2, DimQK: 8, DimV: 16}
	for _, ps := range []int{1, 16, 64} {
		for _, mode := range []forward.Mode{forward.Extend, forward.Decode} {
			lens := [][2]int{{0, 13}, {40, 7}, {150, 1}}
			if mode == forward.Decode {
				lens = [][2]int{{12, 1}, {40, 1}, {150, 1}}
			}
			b := cudnnBatch(t, mode, ps, lens)
			s := cudnnShapeOf(b, g, ps, 2048/ps)
			a := s.arrays()
			for _, at := range []int{a.SeqQ, a.SeqKV, a.QOff, a.OOff, a.Table} {
				if at%4 != 0 {
					t.Fatalf("array at word %d is not 16-byte aligned", at)
				}
			}
			w := appendCudnnArrays([]int32{7, 7, 7, 7}, b, s)[4:]
			if len(w) != a.Words {
				t.Fatalf("%d words, want %d", len(w), a.Words)
			}
			for i := range s.Batch {
				qStart, seqQ, seqKV := int32(b.NumTokens()), int32(0), 1
				if mode == forward.Decode {
					seqQ = 1
				}
				if i < b.NumReqs() {
					qStart, seqQ, seqKV = b.ExtendStarts[i], b.ExtendLens[i], b.SeqLen(i)
					for j, slot := range b.SeqSlots(i) {
						if page := w[a.Table+i*s.Pages+j/ps]; page*int32(ps)+int32(j%ps) != slot {
							t.Fatalf("page %d %v, sequence %d key %d: page %d, slot %d", ps, mode, i, j, page, slot)
						}
					}
				}
				if mode == forward.Decode {
					qStart = int32(i)
				}
				if w[a.SeqQ+i] != seqQ || int(w[a.SeqKV+i]) != seqKV || w[a.QOff+i] != qStart*4*8 || w[a.OOff+i] != qStart*4*16 {
					t.Fatalf("page %d %v sequence %d: seqQ %d seqKV %d qOff %d oOff %d", ps, mode, i, w[a.SeqQ+i], w[a.SeqKV+i], w[a.QOff+i], w[a.OOff+i])
				}
			}
		}
	}
}

// TestCudnnSDPAGraph evaluates the operation graph on the host, with the
// meaning the backend API gives each operation, over gosling's own
// memory: the pool's slot-major K/V rows read through the page table, the
// token-major q rows through the ragged offsets (or dense in decode), the
// output written back the same way. Every output row must equal causal
// attention over its request's prefix and new tokens (GQA groups, interleaved
// pages, padding sequences), which checks the strides, offsets, masks and
// bindings the plan is built from.
//
// With sinks the statistics are a bound output: each row's must be the
// log-sum-exp of its visible scores, and the rows rescaled as
// attn_sink_scale does (its sequence and query index from the plan's
// tok_req and req words, the statistic at the strides the backend passes
// it) must equal attention with the sink logit in the denominator.
func TestCudnnSDPAGraph(t *testing.T) {
	for _, c := range []struct {
		mode  forward.Mode
		ps    int
		lens  [][2]int
		sinks bool
	}{
		{forward.Extend, 16, [][2]int{{0, 13}, {0, 5}}, false},
		{forward.Mixed, 1, [][2]int{{20, 1}, {9, 7}, {0, 9}}, false},
		{forward.Mixed, 64, [][2]int{{70, 3}, {0, 2}, {5, 30}}, false},
		{forward.Decode, 16, [][2]int{{40, 1}, {3, 1}, {17, 1}}, false},
		{forward.Decode, 1, [][2]int{{9, 1}}, false},
		{forward.Extend, 16, [][2]int{{0, 13}, {0, 5}}, true},
		{forward.Mixed, 64, [][2]int{{70, 3}, {0, 2}, {5, 30}}, true},
		{forward.Decode, 16, [][2]int{{40, 1}, {3, 1}, {17, 1}}, true},
	} {
		name := fmt.Sprintf("%v/page%d", c.mode, c.ps)
		if c.sinks {
			name += "/sinks"
		}
		t.Run(name, func(t *testing.T) {
			b := cudnnBatch(t, c.mode, c.ps, c.lens)
			g := cudnnGeom{Heads: 4, KVHeads: 2, DimQK: 8, DimV: 6}
			s := cudnnShapeOf(b, g, c.ps, 2048/c.ps)
			s.Scale, s.Lowest = 0.3, float32(math.Inf(-1))
			s.DType = cudnnTestDType
			s.Stats = c.sinks
			graph, err := cudnnSDPAGraph(s)
			if err != nil {
				t.Fatal(err)
			}
			var passed []int64
			for uid := range cudnnBindings(s, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000) {
				passed = append(passed, uid)
			}
			slices.Sort(passed)
			if got := graph.Bound(); !slices.Equal(got, passed) {
				t.Fatalf("the graph binds %v, the backend passes %v", got, passed)
			}
			rng := rand.New(rand.NewPCG(1, uint64(c.ps)))
			draw := func(n int) []float64 {
				x := make([]float64, n)
				for i := range x {
					x[i] = rng.NormFloat64()
				}
				return x
			}
			rows := b.NumTokens()
			if s.Decode {
				rows = s.Batch
			}
			slots := 2048
			mem := map[int64][]float64{
				cudnnUIDQ: draw(rows * g.Heads * g.DimQK),
				cudnnUIDK: draw(slots * g.KVHeads * g.DimQK),
				cudnnUIDV: draw(slots * g.KVHeads * g.DimV),
				cudnnUIDO: make([]float64, rows*g.Heads*g.DimV),
			}
			words := appendCudnnArrays(nil, b, s)
			a := s.arrays()
			ints := func(at, n int) []float64 {
				out := make([]float64, n)
				for i := range out {
					out[i] = float64(words[at+i])
				}
				return out
			}
			mem[cudnnUIDSeqQ], mem[cudnnUIDSeqKV] = ints(a.SeqQ, s.Batch), ints(a.SeqKV, s.Batch)
			mem[cudnnUIDPageK], mem[cudnnUIDPageV] = ints(a.Table, s.Batch*s.Pages), ints(a.Table, s.Batch*s.Pages)
			mem[cudnnUIDQOff], mem[cudnnUIDOOff] = ints(a.QOff, s.Batch+1), ints(a.OOff, s.Batch+1)
			dims, strides := s.statsLayout()
			if c.sinks {
				mem[cudnnUIDStats] = make([]float64, dims[0]*dims[1]*dims[2])
			}
			if err := evalCudnnGraph(graph, mem); err != nil {
				t.Fatal(err)
			}
			var sinks []float64
			if c.sinks {
				sinks = []float64{1.5, -2, 0.25, 8}
				// attn_sink_scale over the output rows, indexing as the kernel does.
				lay, err := BuildLayout(b, nil)
				if err != nil {
					t.Fatal(err)
				}
				for tok := range b.NumTokens() {
					r := int(lay.Words[lay.TokReqAt+tok])
					i := tok - int(lay.Words[lay.ReqAt+r*reqFields+reqExtStart])
					for h := range g.Heads {
						lse := mem[cudnnUIDStats][int64(r)*strides[0]+int64(h)*strides[1]+int64(i)*strides[2]]
						f := 1 / (1 + math.Exp(sinks[h]-lse))
						for d := range g.DimV {
							mem[cudnnUIDO][(tok*g.Heads+h)*g.DimV+d] *= f
						}
					}
				}
			}
			group := g.Heads / g.KVHeads
			for r := range b.NumReqs() {
				slotsR := b.SeqSlots(r)
				for tk := range int(b.ExtendLens[r]) {
					row := int(b.ExtendStarts[r]) + tk
					i := int(b.PrefixLens[r]) + tk
					for h := range g.Heads {
						kvh := h / group
						q := mem[cudnnUIDQ][(row*g.Heads+h)*g.DimQK:][:g.DimQK]
						scores := make([]float64, i+1)
						top := math.Inf(-1)
						for j := 0; j <= i; j++ {
							k := mem[cudnnUIDK][(int(slotsR[j])*g.KVHeads+kvh)*g.DimQK:][:g.DimQK]
							for d := range q {
								scores[j] += q[d] * k[d]
							}
							scores[j] *= float64(s.Scale)
							top = max(top, scores[j])
						}
						sum := 0.0
						for j := range scores {
							scores[j] = math.Exp(scores[j] - top)
							sum += scores[j]
						}
						if sinks != nil {
							lse := mem[cudnnUIDStats][int64(r)*strides[0]+int64(h)*strides[1]+int64(tk)*strides[2]]
							if want := top + math.Log(sum); math.Abs(lse-want) > 1e-9 {
								t.Fatalf("request %d token %d head %d: statistic %v, log-sum-exp %v", r, i, h, lse, want)
							}
							sum += math.Exp(sinks[h] - top)
						}
						for d := range g.DimV {
							want := 0.0
							for j := range scores {
								want += scores[j] / sum * mem[cudnnUIDV][(int(slotsR[j])*g.KVHeads+kvh)*g.DimV+d]
							}
							got := mem[cudnnUIDO][(row*g.Heads+h)*g.DimV+d]
							if math.Abs(got-want) > 1e-9 {
								t.Fatalf("request %d token %d head %d value %d: graph gives %v, attention %v", r, i, h, d, got, want)
							}
						}
					}
				}
			}
		})
	}
}

// cudnnTestDType is the 16-bit dtype the graph tests build for.
var cudnnTestDType = CudnnCaps.KVDTypes[0]

// TestCudnnRefusal: everything the backend refuses at run time names a
// column of `gosling backends`, and is a column its Caps leave out.
func TestCudnnRefusal(t *testing.T) {
	titles := map[string]bool{}
	for _, c := range registry.Columns {
		titles[c.Title] = !c.Has(CudnnCaps)
	}
	decode := &forward.Batch{Mode: forward.Decode}
	for _, c := range []struct {
		layer attention.Layer
		b     *forward.Batch
	}{
		{attention.Layer{MLA: true}, decode},
		{attention.Layer{SlidingWindow: 8}, decode},
		{attention.Layer{LogitSoftcap: 30}, decode},
		{attention.Layer{}, &forward.Batch{Mode: forward.TargetVerify, CustomMask: []bool{true}}},
		{attention.Layer{}, &forward.Batch{Mode: forward.Encode}},
		{attention.Layer{}, &forward.Batch{Mode: forward.Extend, Spans: []forward.Span{{End: 2}}}},
	} {
		why := cudnnRefusal(&c.layer, c.b)
		if lacks, ok := titles[why]; !ok || !lacks {
			t.Errorf("refusal %q for %+v is not a column cudnn lacks", why, c.layer)
		}
	}
	for _, l := range []attention.Layer{{}, {Sinks: []float32{0.5}}} {
		if why := cudnnRefusal(&l, decode); why != "" {
			t.Errorf("decode of %+v refused: %s", l, why)
		}
	}
	// The backend is only offered where cuDNN loads; here the reason is
	// the one CudnnAvailable gives.
	if _, err := cuda.CudnnAvailable(); err != nil {
		if got := CudnnEntry.Unavailable(); got == nil || !strings.Contains(got.Error(), cuda.LibCUDNN) {
			t.Errorf("not offered: %v", got)
		}
	}
}

// hostTensor is a graph tensor over host memory: element (i0, i1, i2,
// i3) is at base + i1·s1 + i2·s2 + i3·s3, base = ragged[i0] or i0·s0;
// a dimension of 1 broadcasts.
type hostTensor struct {
	t      *cuda.CudnnTensor
	data   []float64
	ragged []float64
}

func (h *hostTensor) offset(idx [4]int) (int, error) {
	off := 0
	for d := range 4 {
		i := idx[d]
		if h.t.Dims[d] == 1 {
			i = 0
		} else if i >= int(h.t.Dims[d]) {
			return 0, fmt.Errorf("tensor %s: index %v outside dims %v", h.t.Name, idx, h.t.Dims)
		}
		if d == 0 && h.ragged != nil {
			off += int(h.ragged[i])
			continue
		}
		off += i * int(h.t.Strides[d])
	}
	if off < 0 || off >= len(h.data) {
		return 0, fmt.Errorf("tensor %s: element %v at %d, outside its %d values", h.t.Name, idx, off, len(h.data))
	}
	return off, nil
}

func (h *hostTensor) get(idx [4]int) (float64, error) {
	off, err := h.offset(idx)
	if err != nil {
		return 0, err
	}
	return h.data[off], nil
}

// evalCudnnGraph runs graph on the host over mem (bound tensors by uid,
// written in place), giving each operation the meaning cuDNN's backend
// API documents for it.
func evalCudnnGraph(g *cuda.CudnnGraph, mem map[int64][]float64) error {
	ts := map[int64]*hostTensor{}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		h := &hostTensor{t: t}
		switch {
		case t.ByValue:
			h.data = []float64{float64(math.Float32frombits(t.Value))}
		case t.Virtual:
			n := 1
			for d := range t.Dims {
				n += int((t.Dims[d] - 1) * t.Strides[d])
			}
			h.data = make([]float64, n)
		default:
			if h.data = mem[t.UID]; h.data == nil {
				return fmt.Errorf("no memory bound for %s", t.Name)
			}
		}
		ts[t.UID] = h
	}
	for _, t := range ts {
		if t.t.Ragged != 0 {
			t.ragged = ts[t.t.Ragged].data
		}
	}
	perSeq := func(uid int64, b int) (int, error) {
		if uid == 0 {
			return math.MaxInt, nil
		}
		v, err := ts[uid].get([4]int{b})
		return int(v), err
	}
	for _, op := range g.Ops {
		out := ts[op.Out]
		in := make([]*hostTensor, len(op.In))
		for i, uid := range op.In {
			in[i] = ts[uid]
		}
		dims := out.t.Dims
		var idx [4]int
		for idx[0] = 0; idx[0] < int(dims[0]); idx[0]++ {
			for idx[1] = 0; idx[1] < int(dims[1]); idx[1]++ {
				for idx[2] = 0; idx[2] < int(dims[2]); idx[2]++ {
					for idx[3] = 0; idx[3] < int(dims[3]); idx[3]++ {
						v, write, err := evalAt(op, in, out, idx, perSeq)
						if err != nil {
							return fmt.Errorf("op %s: %w", op.Name, err)
						}
						if !write {
							continue
						}
						off, err := out.offset(idx)
						if err != nil {
							return fmt.Errorf("op %s: %w", op.Name, err)
						}
						out.data[off] = v
					}
				}
			}
		}
	}
	return nil
}

// evalAt is one output element of op; write is false for rows and
// columns a matmul's overrides leave untouched.
func evalAt(op cuda.CudnnOp, in []*hostTensor, out *hostTensor, idx [4]int, perSeq func(uid int64, b int) (int, error)) (v float64, write bool, err error) {
	switch op.Kind {
	case cuda.CudnnOpPagedLoad:
		container, table := in[0], in[1]
		seq, err := perSeq(op.In[2], idx[0])
		if err != nil {
			return 0, false, err
		}
		s, d := idx[2], idx[3]
		if out.t.Strides[2] == 1 { // Kᵀ: [B, H, D, S]
			s, d = idx[3], idx[2]
		}
		if s >= seq {
			return 0, true, nil
		}
		ps := int(container.t.Dims[2])
		page, err := table.get([4]int{idx[0], 0, s / ps, 0})
		if err != nil {
			return 0, false, err
		}
		v, err := container.get([4]int{int(page), idx[1], s % ps, d})
		return v, true, err
	case cuda.CudnnOpMatmul:
		a, bm := in[0], in[1]
		m, err := perSeq(op.MOverride, idx[0])
		if err != nil {
			return 0, false, err
		}
		n, err := perSeq(op.NOverride, idx[0])
		if err != nil {
			return 0, false, err
		}
		k, err := perSeq(op.KOverride, idx[0])
		if err != nil {
			return 0, false, err
		}
		if idx[2] >= m {
			return 0, false, nil
		}
		if idx[3] >= n {
			return 0, true, nil
		}
		hb := idx[1] * int(bm.t.Dims[1]) / int(a.t.Dims[1]) // GQA: query heads share a KV head
		sum := 0.0
		for kk := range min(int(a.t.Dims[3]), k) {
			x, err := a.get([4]int{idx[0], idx[1], idx[2], kk})
			if err != nil {
				return 0, false, err
			}
			y, err := bm.get([4]int{idx[0], hb, kk, idx[3]})
			if err != nil {
				return 0, false, err
			}
			sum += x * y
		}
		return sum, true, nil
	case cuda.CudnnOpReduction:
		x := in[0]
		acc := math.Inf(-1)
		if op.Reduce == cuda.CudnnReduceAdd {
			acc = 0
		}
		var lo, hi [4]int
		for d := range 4 {
			lo[d], hi[d] = idx[d], idx[d]+1
			if out.t.Dims[d] == 1 && x.t.Dims[d] > 1 {
				lo[d], hi[d] = 0, int(x.t.Dims[d])
			}
		}
		for i0 := lo[0]; i0 < hi[0]; i0++ {
			for i1 := lo[1]; i1 < hi[1]; i1++ {
				for i2 := lo[2]; i2 < hi[2]; i2++ {
					for i3 := lo[3]; i3 < hi[3]; i3++ {
						v, err := x.get([4]int{i0, i1, i2, i3})
						if err != nil {
							return 0, false, err
						}
						if op.Reduce == cuda.CudnnReduceAdd {
							acc += v
						} else {
							acc = max(acc, v)
						}
					}
				}
			}
		}
		return acc, true, nil
	}
	if op.Mode == cuda.CudnnGenIndex {
		return float64(idx[op.Axis]), true, nil
	}
	vals := make([]float64, len(in))
	for i, t := range in {
		if vals[i], err = t.get(idx); err != nil {
			return 0, false, err
		}
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	switch op.Mode {
	case cuda.CudnnAdd:
		return vals[0] + vals[1], true, nil
	case cuda.CudnnSub:
		return vals[0] - vals[1], true, nil
	case cuda.CudnnMul:
		return vals[0] * vals[1], true, nil
	case cuda.CudnnDiv:
		return vals[0] / vals[1], true, nil
	case cuda.CudnnExp:
		return math.Exp(vals[0]), true, nil
	case cuda.CudnnLog:
		return math.Log(vals[0]), true, nil
	case cuda.CudnnCmpGE:
		return b2f(vals[0] >= vals[1]), true, nil
	case cuda.CudnnCmpLT:
		return b2f(vals[0] < vals[1]), true, nil
	case cuda.CudnnLogicalAnd:
		return b2f(vals[0] != 0 && vals[1] != 0), true, nil
	case cuda.CudnnBinarySelect:
		if vals[2] != 0 {
			return vals[0], true, nil
		}
		return vals[1], true, nil
	}
	return 0, false, fmt.Errorf("pointwise mode %d is not evaluated", op.Mode)
}
