package flash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// longCase is one request prefilled with prompt tokens, extended by a short
// chunk over that cached prefix, then decoded; every flash configuration
// (worker counts, 0 = serial) is compared with native.
type longCase struct {
	name          string
	heads, kv, d  int
	pageSize      int
	window        int
	softcap       float32
	dtype         tensor.DType
	workers       []int
	prompt, chunk int
}

func TestAgainstNativeLong(t *testing.T) {
	cases := []longCase{
		// 16 workers for one KV head: the decodes and the short chunk split
		// their keys (flash-decoding) and merge.
		{name: "gqa4/page16", heads: 4, kv: 1, d: 64, pageSize: 16, workers: []int{0, 4, 16}, prompt: 2000, chunk: 5},
		{name: "bf16/window/softcap/page5", heads: 8, kv: 2, d: 32, pageSize: 5, window: 600, softcap: 30,
			dtype: tensor.BF16, workers: []int{3, 16}, prompt: 1000, chunk: 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkAgainstNative(t, c) })
	}
}

func checkAgainstNative(t *testing.T, c longCase) {
	rng := rand.New(rand.NewPCG(7, uint64(c.pageSize)))
	layer := attention.Layer{NumHeads: c.heads, NumKVHeads: c.kv, HeadDim: c.d, HeadDimV: c.d,
		Scale: float32(1 / math.Sqrt(float64(c.d))), SlidingWindow: c.window, LogitSoftcap: c.softcap}
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: c.kv, HeadDim: c.d, HeadDimV: c.d, DType: c.dtype}
	total := c.prompt + c.chunk + 3
	cache, err := kvcache.NewCache(spec, c.pageSize, total, 1, total)
	if err != nil {
		t.Fatal(err)
	}
	var fast []attention.Backend
	for _, n := range c.workers {
		var workers *cpu.Workers
		if n > 0 {
			workers = cpu.NewWorkers(n)
			defer workers.Close()
		}
		be, err := Entry.New(attention.Options{Runtime: cpu.NewRuntime(workers)})
		if err != nil {
			t.Fatal(err)
		}
		fast = append(fast, be)
	}
	ref := &native.Backend{}
	seq, _ := cache.NewSeq()
	steps := []struct {
		mode forward.Mode
		n    int
	}{{forward.Extend, c.prompt}, {forward.Extend, c.chunk}, {forward.Decode, 1}, {forward.Decode, 1}, {forward.Decode, 1}}
	for si, st := range steps {
		prefix := seq.Len
		if ok, err := cache.Grow(seq, prefix+st.n); !ok || err != nil {
			t.Fatalf("grow: %v %v", ok, err)
		}
		b := oneRequest(st.mode, cache, seq, prefix, st.n)
		q := randT(rng, st.n, c.heads*c.d)
		k, v := randT(rng, st.n, c.kv*c.d), randT(rng, st.n, c.kv*c.d)
		// Every backend stores the same k, v at the same slots first.
		want, err := attention.Run(ref, q, k, v, &layer, b)
		if err != nil {
			t.Fatal(err)
		}
		for fi, be := range fast {
			got, err := attention.Run(be, q, k, v, &layer, b)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want.HostData() {
				if d := math.Abs(float64(got.HostData()[i] - want.HostData()[i])); !(d <= 1e-4) {
					t.Fatalf("%d workers, step %d (%v): value %d (token %d): got %g, native %g",
						c.workers[fi], si, st.mode, i, i/want.Cols(), got.HostData()[i], want.HostData()[i])
				}
			}
		}
	}
}

// oneRequest is a finalized batch of one request with n new tokens after prefix.
func oneRequest(mode forward.Mode, cache *kvcache.Cache, seq *kvcache.Seq, prefix, n int) *forward.Batch {
	b := &forward.Batch{Mode: mode, KV: cache, ReqRows: []int32{int32(seq.Row)},
		PrefixLens: []int32{int32(prefix)}, ExtendLens: []int32{int32(n)}}
	for i := prefix; i < prefix+n; i++ {
		b.InputIDs = append(b.InputIDs, 0)
		b.Positions = append(b.Positions, int32(i))
		b.OutSlots = append(b.OutSlots, cache.Table.Row(seq.Row)[i])
	}
	if err := b.Finalize(); err != nil {
		panic(err)
	}
	return b
}

func randT(rng *rand.Rand, rows, cols int) tensor.T {
	out := tensor.New(rows, cols)
	for i := range out.HostData() {
		out.HostData()[i] = float32(rng.NormFloat64())
	}
	return out
}

// The benchmarks use Llama-3-8B's attention shape: 32 query heads, 8 KV
// heads, head dim 128, page size 16, float32 KV.
const (
	benchHeads, benchKVHeads, benchDim, benchPage = 32, 8, 128, 16
)

type benchSetup struct {
	layer attention.Layer
	cache *kvcache.Cache
	seqs  []*kvcache.Seq
}

// newBenchSetup makes reqs sequences of ctx tokens each, the first ctx-new
// of them already in the pool.
func newBenchSetup(b *testing.B, reqs, ctx, fresh int) *benchSetup {
	rng := rand.New(rand.NewPCG(1, 2))
	layer := attention.Layer{NumHeads: benchHeads, NumKVHeads: benchKVHeads, HeadDim: benchDim, HeadDimV: benchDim,
		Scale: float32(1 / math.Sqrt(benchDim))}
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: benchKVHeads, HeadDim: benchDim, HeadDimV: benchDim}
	cache, err := kvcache.NewCache(spec, benchPage, reqs*ctx, reqs, ctx)
	if err != nil {
		b.Fatal(err)
	}
	s := &benchSetup{layer: layer, cache: cache}
	host, err := cache.Pool.Host()
	if err != nil {
		b.Fatal(err)
	}
	row := randT(rng, 1, benchKVHeads*benchDim).HostData()
	for range reqs {
		seq, _ := cache.NewSeq()
		cache.Grow(seq, ctx)
		for i := range ctx - fresh {
			for x := range row {
				row[x] = float32(rng.NormFloat64())
			}
			slot := cache.Table.Row(seq.Row)[i]
			host.StoreK(0, slot, row)
			host.StoreV(0, slot, row)
		}
		s.seqs = append(s.seqs, seq)
	}
	return s
}

// batch is the forward that adds the last fresh tokens of every sequence.
func (s *benchSetup) batch(mode forward.Mode, fresh int) *forward.Batch {
	b := &forward.Batch{Mode: mode, KV: s.cache}
	for _, seq := range s.seqs {
		b.ReqRows = append(b.ReqRows, int32(seq.Row))
		b.PrefixLens = append(b.PrefixLens, int32(seq.Len-fresh))
		b.ExtendLens = append(b.ExtendLens, int32(fresh))
		for i := seq.Len - fresh; i < seq.Len; i++ {
			b.InputIDs = append(b.InputIDs, 0)
			b.Positions = append(b.Positions, int32(i))
			b.OutSlots = append(b.OutSlots, s.cache.Table.Row(seq.Row)[i])
		}
	}
	if err := b.Finalize(); err != nil {
		panic(err)
	}
	return b
}

func benchBackends(b *testing.B, run func(b *testing.B, be attention.Backend)) {
	workers := cpu.NewWorkers(0)
	b.Cleanup(workers.Close)
	for _, e := range []attention.Entry{Entry, native.Entry} {
		b.Run(e.Name, func(b *testing.B) {
			be, err := e.New(attention.Options{Device: "cpu", Runtime: cpu.NewRuntime(workers)})
			if err != nil {
				b.Fatal(err)
			}
			run(b, be)
		})
	}
}

// BenchmarkPrefill is one 1024-token causal prefill.
func BenchmarkPrefill(b *testing.B) {
	const n = 1024
	benchBackends(b, func(b *testing.B, be attention.Backend) {
		s := newBenchSetup(b, 1, n, n)
		batch := s.batch(forward.Extend, n)
		rng := rand.New(rand.NewPCG(3, 4))
		q, k, v := randT(rng, n, benchHeads*benchDim), randT(rng, n, benchKVHeads*benchDim), randT(rng, n, benchKVHeads*benchDim)
		b.ResetTimer()
		for b.Loop() {
			if _, err := attention.Run(be, q, k, v, &s.layer, batch); err != nil {
				b.Fatal(err)
			}
		}
		// QKᵀ and PV: 2·(Dk+Dv) flops per visible (query, key, head).
		flops := float64(n*(n+1)/2) * benchHeads * 2 * (2 * benchDim)
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// BenchmarkDecode is one decode step: batch 1 at 8K context and batch 16
// at 2K; the figure of merit is the K/V read rate.
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct{ reqs, ctx int }{{1, 8192}, {16, 2048}} {
		b.Run(fmt.Sprintf("batch%d_ctx%d", c.reqs, c.ctx), func(b *testing.B) {
			benchBackends(b, func(b *testing.B, be attention.Backend) {
				s := newBenchSetup(b, c.reqs, c.ctx, 1)
				batch := s.batch(forward.Decode, 1)
				rng := rand.New(rand.NewPCG(5, 6))
				q := randT(rng, c.reqs, benchHeads*benchDim)
				k, v := randT(rng, c.reqs, benchKVHeads*benchDim), randT(rng, c.reqs, benchKVHeads*benchDim)
				b.ResetTimer()
				for b.Loop() {
					if _, err := attention.Run(be, q, k, v, &s.layer, batch); err != nil {
						b.Fatal(err)
					}
				}
				bytes := float64(c.reqs*c.ctx) * benchKVHeads * 2 * benchDim * 4
				b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		})
	}
}
