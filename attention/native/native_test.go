package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// dense is an independent float64 computation over contiguous per-request
// arrays: q [n, H*D], k [n, KV*D], v [n, KV*Dv] for all n tokens.
func dense(q, k, v []float64, n int, l attention.Layer) []float64 {
	h, kvh, d, dv := l.NumHeads, l.NumKVHeads, l.HeadDim, l.HeadDimV
	out := make([]float64, n*h*dv)
	for i := range n {
		for hh := range h {
			g := hh / (h / kvh)
			var scores []float64
			lo := 0
			if l.SlidingWindow > 0 {
				lo = max(0, i+1-l.SlidingWindow)
			}
			m := math.Inf(-1)
			for j := lo; j <= i; j++ {
				s := 0.0
				for x := range d {
					s += q[i*h*d+hh*d+x] * k[j*kvh*d+g*d+x]
				}
				s *= float64(l.Scale)
				scores = append(scores, s)
				m = max(m, s)
			}
			sum := 0.0
			for idx := range scores {
				scores[idx] = math.Exp(scores[idx] - m)
				sum += scores[idx]
			}
			for j := lo; j <= i; j++ {
				p := scores[j-lo] / sum
				for x := range dv {
					out[i*h*dv+hh*dv+x] += p * v[j*kvh*dv+g*dv+x]
				}
			}
		}
	}
	return out
}

func randVec(rng *rand.Rand, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = rng.NormFloat64()
	}
	return out
}

func toT(x []float64, rows int) tensor.T {
	f := make([]float32, len(x))
	for i, v := range x {
		f[i] = float32(v)
	}
	return tensor.From(f, rows, len(x)/rows)
}

// TestAgainstDense runs two requests through a prefill, an extend over the
// cached prefix and decodes, across page sizes, GQA ratios and windows, and
// compares every output row with the dense computation.
func TestAgainstDense(t *testing.T) {
	layers := []attention.Layer{
		{NumHeads: 4, NumKVHeads: 4, HeadDim: 8, HeadDimV: 8},
		{NumHeads: 8, NumKVHeads: 2, HeadDim: 16, HeadDimV: 16},
		{NumHeads: 4, NumKVHeads: 1, HeadDim: 8, HeadDimV: 12},
		{NumHeads: 4, NumKVHeads: 2, HeadDim: 8, HeadDimV: 8, SlidingWindow: 5},
	}
	for li, l := range layers {
		l.Scale = float32(1 / math.Sqrt(float64(l.HeadDim)))
		for _, ps := range []int{1, 7, 16} {
			t.Run(fmt.Sprintf("layer%d/page%d", li, ps), func(t *testing.T) {
				checkAgainstDense(t, l, ps)
			})
		}
	}
}

func checkAgainstDense(t *testing.T, l attention.Layer, pageSize int) {
	rng := rand.New(rand.NewPCG(1, uint64(pageSize)))
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: l.NumKVHeads, HeadDim: l.HeadDim, HeadDimV: l.HeadDimV}
	cache, err := kvcache.NewCache(spec, pageSize, 256, 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	be := &Backend{}
	// Two requests with different lengths; steps: (extend lengths per request, mode).
	total := []int{23, 14}
	steps := []struct {
		lens []int
		mode forward.Mode
	}{{[]int{9, 4}, forward.Extend}, {[]int{11, 8}, forward.Extend}, {[]int{1, 1}, forward.Decode}, {[]int{1, 1}, forward.Decode}, {[]int{1, 0}, forward.Extend}}
	q := [2][]float64{randVec(rng, total[0]*l.NumHeads*l.HeadDim), randVec(rng, total[1]*l.NumHeads*l.HeadDim)}
	k := [2][]float64{randVec(rng, total[0]*l.NumKVHeads*l.HeadDim), randVec(rng, total[1]*l.NumKVHeads*l.HeadDim)}
	v := [2][]float64{randVec(rng, total[0]*l.NumKVHeads*l.HeadDimV), randVec(rng, total[1]*l.NumKVHeads*l.HeadDimV)}
	want := [2][]float64{dense(q[0], k[0], v[0], total[0], l), dense(q[1], k[1], v[1], total[1], l)}

	seqs := [2]*kvcache.Seq{}
	for r := range seqs {
		seqs[r], _ = cache.NewSeq()
	}
	done := [2]int{}
	for si, step := range steps {
		b := &forward.Batch{Mode: step.mode, KV: cache}
		var qs, ks, vs []float64
		var reqs []int
		for r, n := range step.lens {
			if n == 0 {
				continue
			}
			reqs = append(reqs, r)
			if ok, err := cache.Grow(seqs[r], done[r]+n); !ok || err != nil {
				t.Fatalf("grow: %v %v", ok, err)
			}
			b.ReqRows = append(b.ReqRows, int32(seqs[r].Row))
			b.PrefixLens = append(b.PrefixLens, int32(done[r]))
			b.ExtendLens = append(b.ExtendLens, int32(n))
			for i := done[r]; i < done[r]+n; i++ {
				b.InputIDs = append(b.InputIDs, 0)
				b.Positions = append(b.Positions, int32(i))
				b.OutSlots = append(b.OutSlots, cache.Table.Row(seqs[r].Row)[i])
			}
			qw, kw, vw := l.NumHeads*l.HeadDim, l.NumKVHeads*l.HeadDim, l.NumKVHeads*l.HeadDimV
			qs = append(qs, q[r][done[r]*qw:(done[r]+n)*qw]...)
			ks = append(ks, k[r][done[r]*kw:(done[r]+n)*kw]...)
			vs = append(vs, v[r][done[r]*vw:(done[r]+n)*vw]...)
		}
		if err := b.Finalize(); err != nil {
			t.Fatal(err)
		}
		nt := b.NumTokens()
		out, err := attention.Run(be, toT(qs, nt), toT(ks, nt), toT(vs, nt), &l, b)
		if err != nil {
			t.Fatal(err)
		}
		row := 0
		for ri, r := range reqs {
			for i := done[r]; i < done[r]+int(b.ExtendLens[ri]); i++ {
				ow := l.NumHeads * l.HeadDimV
				for x := range ow {
					got, exp := float64(out.Row(row)[x]), want[r][i*ow+x]
					if math.Abs(got-exp) > 1e-5 {
						t.Fatalf("step %d req %d token %d elem %d: got %v, want %v", si, r, i, x, got, exp)
					}
				}
				row++
			}
			done[r] += int(b.ExtendLens[ri])
		}
	}
}

func TestShapeErrors(t *testing.T) {
	cache, _ := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 4, HeadDimV: 4}, 1, 16, 1, 16)
	seq, _ := cache.NewSeq()
	cache.Grow(seq, 2)
	b := &forward.Batch{Mode: forward.Extend, KV: cache, ReqRows: []int32{0}, PrefixLens: []int32{0}, ExtendLens: []int32{2},
		InputIDs: []int32{0, 0}, Positions: []int32{0, 1}, OutSlots: cache.Table.Row(0)[:2]}
	if err := b.Finalize(); err != nil {
		t.Fatal(err)
	}
	l := attention.Layer{NumHeads: 2, NumKVHeads: 1, HeadDim: 4, HeadDimV: 4, Scale: 0.5}
	_, err := attention.Run(&Backend{}, tensor.New(2, 4), tensor.New(2, 4), tensor.New(2, 4), &l, b)
	if err == nil {
		t.Fatal("q of the wrong width accepted")
	}
}
