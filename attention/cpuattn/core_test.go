package cpuattn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/conformance"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/cputime"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// TestConformanceSplit runs the battery (attention/conformance runs it on
// the flash and splitkv entries as registered) with the split forced down
// to a few keys per chunk, odd tiles and query blocks, so that every
// scenario (windows, tree masks, spans, MLA, FP8 …) goes through the
// merge, the online-softmax rescale and partial query blocks under each
// policy; and serially.
func TestConformanceSplit(t *testing.T) {
	workers := cpu.NewWorkers(4) // split even on a 1-core machine
	t.Cleanup(workers.Close)
	tiny := tuning{quantum: 2, itemsPerWorker: 256, queryBlock: 3, keyTile: 5, minSplit: 2}
	for _, c := range []struct {
		name    string
		policy  Policy
		workers *cpu.Workers
		tune    tuning
	}{
		{"prefix/tiny_chunks", SplitPrefix, workers, tiny},
		{"prefix/serial", SplitPrefix, nil, defaultTuning},
		{"prefix/serial_tiny_tiles", SplitPrefix, nil, tiny},
		{"idle/tiny_chunks", SplitWhenIdle, workers, tiny},
		{"idle/serial_tiny_tiles", SplitWhenIdle, nil, tiny},
	} {
		entry := attention.Entry{Name: "cpuattn/" + c.name, Caps: attention.CPUCaps}
		entry.New = func(attention.Options) (attention.Backend, error) {
			return newBackend(entry.Name, c.workers, c.policy, c.tune), nil
		}
		t.Run(c.name, func(t *testing.T) { conformance.Run(t, entry) })
	}
}

// testCache is one layer's cache with requests grown token by token.
type testCache struct {
	cache *kvcache.Cache
	seqs  []*kvcache.Seq
	rng   *rand.Rand
}

func newTestCache(tb testing.TB, spec kvcache.Spec, pageSize, reqs, maxLen int) *testCache {
	cache, err := kvcache.NewCache(spec, pageSize, reqs*(maxLen+pageSize), reqs, maxLen)
	if err != nil {
		tb.Fatal(err)
	}
	tc := &testCache{cache: cache, rng: rand.New(rand.NewPCG(7, uint64(pageSize)))}
	for range reqs {
		s, _ := cache.NewSeq()
		tc.seqs = append(tc.seqs, s)
	}
	return tc
}

// fill stores random K/V for tokens [Len, n) of request r without running
// attention, standing in for a prefill.
func (tc *testCache) fill(tb testing.TB, r, n int) {
	s := tc.seqs[r]
	from := s.Len
	if ok, err := tc.cache.Grow(s, n); !ok || err != nil {
		tb.Fatalf("grow: %v %v", ok, err)
	}
	spec := tc.cache.Pool.Spec
	host, err := tc.cache.Pool.Host()
	if err != nil {
		tb.Fatal(err)
	}
	k, v := make([]float32, spec.KWidth()), make([]float32, spec.VWidth())
	for i := from; i < n; i++ {
		slot := tc.cache.Table.Row(s.Row)[i]
		for l := range spec.NumLayers {
			randFill(tc.rng, k)
			randFill(tc.rng, v)
			host.StoreK(l, slot, k)
			host.StoreV(l, slot, v)
		}
	}
}

// batch grows each request by lens[r] new tokens and describes that forward.
func (tc *testCache) batch(tb testing.TB, mode forward.Mode, lens []int) *forward.Batch {
	b := &forward.Batch{Mode: mode, KV: tc.cache}
	for r, n := range lens {
		s := tc.seqs[r]
		prefix := s.Len
		if ok, err := tc.cache.Grow(s, prefix+n); !ok || err != nil {
			tb.Fatalf("grow: %v %v", ok, err)
		}
		b.ReqRows = append(b.ReqRows, int32(s.Row))
		b.PrefixLens = append(b.PrefixLens, int32(prefix))
		b.ExtendLens = append(b.ExtendLens, int32(n))
		for i := prefix; i < prefix+n; i++ {
			b.InputIDs = append(b.InputIDs, 0)
			b.Positions = append(b.Positions, int32(i))
			b.OutSlots = append(b.OutSlots, tc.cache.Table.Row(s.Row)[i])
		}
	}
	if err := b.Finalize(); err != nil {
		tb.Fatal(err)
	}
	return b
}

// inputs draws q, k, v for the batch's new tokens.
func (tc *testCache) inputs(l *attention.Layer, b *forward.Batch) (q, k, v tensor.T) {
	n := b.NumTokens()
	q, k, v = tensor.New(n, l.NumHeads*l.HeadDim), tensor.New(n, l.NumKVHeads*l.HeadDim), tensor.New(n, l.NumKVHeads*l.HeadDimV)
	for _, x := range []tensor.T{q, k, v} {
		randFill(tc.rng, x.HostData())
	}
	return q, k, v
}

func randFill(rng *rand.Rand, x []float32) {
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
}

func compare(t *testing.T, what string, got, want tensor.T, tol float64) {
	t.Helper()
	for i := range want.HostData() {
		g, w := float64(got.HostData()[i]), float64(want.HostData()[i])
		if d := math.Abs(g - w); !(d <= tol*max(1, math.Abs(w))) {
			t.Fatalf("%s: value %d (row %d): got %.7g, want %.7g", what, i, i/want.Cols(), g, w)
		}
	}
}

// TestLongSequenceMatchesNative prefills one request of 3000 tokens (page
// size 16, GQA 4) and decodes 5 more, comparing each forward with the
// reference backend over the same cache. With 4 workers and one KV head
// the decodes are cut into many chunks of several key tiles.
func TestLongSequenceMatchesNative(t *testing.T) {
	workers := cpu.NewWorkers(4)
	t.Cleanup(workers.Close)
	for _, policy := range []Policy{SplitPrefix, SplitWhenIdle} {
		t.Run(fmt.Sprintf("policy%d", policy), func(t *testing.T) { longSequence(t, workers, policy) })
	}
}

func longSequence(t *testing.T, workers *cpu.Workers, policy Policy) {
	l := attention.Layer{NumHeads: 4, NumKVHeads: 1, HeadDim: 32, HeadDimV: 32}
	l.Scale = float32(1 / math.Sqrt(float64(l.HeadDim)))
	tc := newTestCache(t, kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 32, HeadDimV: 32}, 16, 1, 3008)
	be := newBackend("test", workers, policy, defaultTuning)
	ref, _ := native.Entry.New(attention.Options{})

	steps := []forward.Mode{forward.Extend, forward.Decode, forward.Decode, forward.Decode, forward.Decode, forward.Decode}
	for si, mode := range steps {
		n := 1
		if mode == forward.Extend {
			n = 3000
		}
		b := tc.batch(t, mode, []int{n})
		if err := be.Plan(b); err != nil {
			t.Fatal(err)
		}
		if mode == forward.Decode && be.plan.reqs[0].chunks < 4 {
			t.Fatalf("decode of %d tokens on 4 workers cut into %d chunks", b.SeqLen(0), be.plan.reqs[0].chunks)
		}
		q, k, v := tc.inputs(&l, b)
		got, err := attention.Run(be, q, k, v, &l, b)
		if err != nil {
			t.Fatal(err)
		}
		want, err := attention.Run(ref, q, k, v, &l, b)
		if err != nil {
			t.Fatal(err)
		}
		compare(t, fmt.Sprintf("step %d (%v)", si, mode), got, want, 1e-4)
	}
}

// TestMergeEqualsSoftmax checks the log-sum-exp merge against a one-shot
// softmax, with an empty and an all-masked chunk among the partials.
func TestMergeEqualsSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const keys, dv = 40, 6
	scores := make([]float64, keys)
	values := make([][]float64, keys)
	for j := range keys {
		scores[j] = 4 * rng.NormFloat64()
		values[j] = make([]float64, dv)
		for d := range dv {
			values[j][d] = rng.NormFloat64()
		}
	}
	visible := func(j int) bool { return j < 10 || j >= 25 } // keys [10, 25) masked
	chunks := [][2]int{{0, 10}, {10, 10}, {10, 25}, {25, 33}, {33, 40}}

	// One partial per chunk, as attendChunk writes them: normalised output
	// and log-sum-exp, or (0, −Inf) when the chunk sees nothing.
	parts := make([]float32, len(chunks)*dv)
	lses := make([]float32, len(chunks))
	for c, ch := range chunks {
		m := math.Inf(-1)
		for j := ch[0]; j < ch[1]; j++ {
			if visible(j) {
				m = max(m, scores[j])
			}
		}
		lses[c] = float32(math.Inf(-1))
		if math.IsInf(m, -1) {
			continue
		}
		sum := 0.0
		o := make([]float64, dv)
		for j := ch[0]; j < ch[1]; j++ {
			if visible(j) {
				p := math.Exp(scores[j] - m)
				sum += p
				for d := range dv {
					o[d] += p * values[j][d]
				}
			}
		}
		for d := range dv {
			parts[c*dv+d] = float32(o[d] / sum)
		}
		lses[c] = float32(m + math.Log(sum))
	}

	got := make([]float32, dv)
	mergeStates(got, parts, lses, len(chunks), dv, 1, negInf)

	want := make([]float64, dv)
	m, sum := math.Inf(-1), 0.0
	for j := range keys {
		if visible(j) {
			m = max(m, scores[j])
		}
	}
	for j := range keys {
		if visible(j) {
			p := math.Exp(scores[j] - m)
			sum += p
			for d := range dv {
				want[d] += p * values[j][d]
			}
		}
	}
	for d := range dv {
		if w := want[d] / sum; math.Abs(float64(got[d])-w) > 1e-5 {
			t.Errorf("value %d: merged %.7g, one-shot softmax %.7g", d, got[d], w)
		}
	}

	// Nothing visible anywhere: zero, not NaN.
	clear(got)
	mergeStates(got, make([]float32, 2*dv), []float32{lses[2], lses[1]}, 2, dv, 1, negInf)
	for d, x := range got {
		if x != 0 {
			t.Fatalf("all-masked merge: value %d is %v, want 0", d, x)
		}
	}
}

// TestMaskedChunk runs the backend's own partials and merge on decodes
// whose custom mask hides whole chunks (and, for one request, all but the
// token itself), against the reference backend.
func TestMaskedChunk(t *testing.T) {
	workers := cpu.NewWorkers(4)
	t.Cleanup(workers.Close)
	l := attention.Layer{NumHeads: 4, NumKVHeads: 2, HeadDim: 16, HeadDimV: 8, Scale: 0.25}
	tc := newTestCache(t, kvcache.Spec{NumLayers: 1, NumKVHeads: 2, HeadDim: 16, HeadDimV: 8}, 4, 2, 64)
	tc.fill(t, 0, 40)
	tc.fill(t, 1, 20)
	b := tc.batch(t, forward.Decode, []int{1, 1})
	// Request 0 sees keys [0, 8) and [30, 41); request 1 only itself.
	b.MaskStarts = []int32{0, 41}
	b.CustomMask = make([]bool, 41+21)
	for j := range 41 {
		b.CustomMask[j] = j < 8 || j >= 30
	}
	b.CustomMask[41+20] = true
	if err := b.Finalize(); err != nil {
		t.Fatal(err)
	}
	be := newBackend("test", workers, SplitPrefix, tuning{quantum: 4, itemsPerWorker: 64, queryBlock: 4, keyTile: 3})
	q, k, v := tc.inputs(&l, b)
	got, err := attention.Run(be, q, k, v, &l, b)
	if err != nil {
		t.Fatal(err)
	}
	if rp := be.plan.reqs[0]; rp.chunks < 5 {
		t.Fatalf("request 0 cut into %d chunks; the test needs fully masked ones", rp.chunks)
	}
	ref, _ := native.Entry.New(attention.Options{})
	want, _ := attention.Run(ref, q, k, v, &l, b)
	compare(t, "masked decode", got, want, 1e-5)
}

// TestIdleRequest: a request in the batch with no new tokens (a mixed
// batch may carry one) gets no chunks and leaves the others intact.
func TestIdleRequest(t *testing.T) {
	workers := cpu.NewWorkers(4)
	t.Cleanup(workers.Close)
	l := attention.Layer{NumHeads: 4, NumKVHeads: 2, HeadDim: 8, HeadDimV: 8, Scale: 0.3}
	tc := newTestCache(t, kvcache.Spec{NumLayers: 1, NumKVHeads: 2, HeadDim: 8, HeadDimV: 8}, 4, 3, 300)
	for r := range 3 {
		tc.fill(t, r, 100+50*r)
	}
	be := newBackend("test", workers, SplitPrefix, tuning{quantum: 8, itemsPerWorker: 16, queryBlock: 4, keyTile: 16})
	ref, _ := native.Entry.New(attention.Options{})
	for _, lens := range [][]int{{5, 0, 1}, {0, 9, 0}} {
		b := tc.batch(t, forward.Mixed, lens)
		q, k, v := tc.inputs(&l, b)
		got, err := attention.Run(be, q, k, v, &l, b)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := attention.Run(ref, q, k, v, &l, b)
		compare(t, fmt.Sprint(lens), got, want, 1e-5)
	}
}

// TestPlanDecode checks the split rule: a decode item covers every KV
// head, so the chunks alone make itemsPerWorker items per worker, each a
// multiple of the quantum.
func TestPlanDecode(t *testing.T) {
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: 8, HeadDim: 8, HeadDimV: 8}
	for _, c := range []struct {
		policy                            Policy
		reqs, seqLen, workers, wantChunks int
	}{
		{SplitPrefix, 1, 8192, 1, 1},     // serial: nothing to gain from a merge
		{SplitPrefix, 1, 8192, 2, 8},     // 8 items of 1024 keys
		{SplitPrefix, 1, 8192, 16, 64},   // 64 items of 128 keys
		{SplitPrefix, 1, 100, 16, 2},     // chunks never shorter than the quantum
		{SplitPrefix, 16, 2048, 16, 4},   // 64 items of 512 keys
		{SplitPrefix, 64, 2048, 16, 1},   // the batch alone fills the workers
		{SplitWhenIdle, 1, 8192, 2, 8},   // too few items: 8 of 1024 keys
		{SplitWhenIdle, 1, 8192, 16, 32}, // never below minSplit keys
		{SplitWhenIdle, 1, 100, 16, 1},
		{SplitWhenIdle, 16, 2048, 2, 1}, // 16 items already fill 2 workers
	} {
		tc := newTestCache(t, spec, 16, c.reqs, c.seqLen)
		lens := make([]int, c.reqs)
		for r := range c.reqs {
			tc.cache.Grow(tc.seqs[r], c.seqLen-1) // the plan reads lengths only
			lens[r] = 1
		}
		b := tc.batch(t, forward.Decode, lens)
		var p plan
		p.make(b, c.policy, defaultTuning, c.workers)
		if got := p.reqs[0].chunks; got != c.wantChunks {
			t.Errorf("policy %d, %d×%d on %d workers: %d chunks, want %d", c.policy, c.reqs, c.seqLen, c.workers, got, c.wantChunks)
		}
	}
}

// decodeBench decodes one token for each of reqs requests of ctx tokens:
// heads query heads, kvHeads KV heads of width dim, float32 KV.
// With serial it runs on one goroutine and also reports the process's CPU
// time per call, which other processes on the machine disturb less than
// the wall time.
// planBenchBackend is the CPU backend over tc, planned for batch, on a
// worker pool of every core unless serial.
func planBenchBackend(b *testing.B, tc *testCache, batch *forward.Batch, serial bool) attention.Backend {
	var workers *cpu.Workers
	if !serial {
		workers = cpu.NewWorkers(0)
		b.Cleanup(workers.Close)
	}
	be := New("splitkv", attention.Options{Device: "cpu", KV: tc.cache, Runtime: cpu.NewRuntime(workers)}, SplitPrefix)
	if err := be.Plan(batch); err != nil {
		b.Fatal(err)
	}
	return be
}

func decodeBench(b *testing.B, reqs, ctx, heads, kvHeads, dim, pageSize int, serial bool) {
	l := attention.Layer{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: dim, HeadDimV: dim}
	l.Scale = float32(1 / math.Sqrt(float64(dim)))
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: kvHeads, HeadDim: dim, HeadDimV: dim}
	tc := newTestCache(b, spec, pageSize, reqs, ctx)
	lens := make([]int, reqs)
	for r := range reqs {
		tc.fill(b, r, ctx-1)
		lens[r] = 1
	}
	batch := tc.batch(b, forward.Decode, lens)
	q, k, v := tc.inputs(&l, batch)
	be := planBenchBackend(b, tc, batch, serial)
	// Each iteration rewrites the same new slot and reads the whole KV.
	kvBytes := float64(reqs*ctx) * float64(spec.KWidth()+spec.VWidth()) * 4
	b.ResetTimer()
	cpu0 := cputime.Process()
	for range b.N {
		if _, err := attention.Run(be, q, k, v, &l, batch); err != nil {
			b.Fatal(err)
		}
	}
	if serial {
		b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(kvBytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

func BenchmarkDecode(b *testing.B) {
	// 32 query heads, 8 KV heads, head dim 128, page size 16.
	b.Run("batch1_ctx8k", func(b *testing.B) { decodeBench(b, 1, 8192, 32, 8, 128, 16, false) })
	b.Run("batch16_ctx2k", func(b *testing.B) { decodeBench(b, 16, 2048, 32, 8, 128, 16, false) })
	b.Run("batch16_ctx2k_serial", func(b *testing.B) { decodeBench(b, 16, 2048, 32, 8, 128, 16, true) })
	// stories110M's layer (12 heads of 64, no GQA, page size 1) in a
	// batch-32 decode of short requests, as bench one-batch runs it.
	b.Run("batch32_ctx80_mha", func(b *testing.B) { decodeBench(b, 32, 80, 12, 12, 64, 1, false) })
	b.Run("batch32_ctx80_mha_serial", func(b *testing.B) { decodeBench(b, 32, 80, 12, 12, 64, 1, true) })
}

// BenchmarkPrefill is one fresh causal prefill of 1024 tokens, same heads.
func BenchmarkPrefill(b *testing.B) {
	const n = 1024
	l := attention.Layer{NumHeads: 32, NumKVHeads: 8, HeadDim: 128, HeadDimV: 128}
	l.Scale = float32(1 / math.Sqrt(128))
	tc := newTestCache(b, kvcache.Spec{NumLayers: 1, NumKVHeads: 8, HeadDim: 128, HeadDimV: 128}, 16, 1, n)
	batch := tc.batch(b, forward.Extend, []int{n})
	q, k, v := tc.inputs(&l, batch)
	workers := cpu.NewWorkers(0)
	defer workers.Close()
	be := New("splitkv", attention.Options{Device: "cpu", KV: tc.cache, Runtime: cpu.NewRuntime(workers)}, SplitPrefix)
	if err := be.Plan(batch); err != nil {
		b.Fatal(err)
	}
	// QKᵀ and PV: 2 flops per multiply-add, over n(n+1)/2 visible pairs.
	flops := 2 * float64(n*(n+1)/2) * float64(l.NumHeads*(l.HeadDim+l.HeadDimV))
	b.ResetTimer()
	for range b.N {
		if _, err := attention.Run(be, q, k, v, &l, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkDecodeModel times the attention of one decode step of a
// stories110M-shaped batch of 32 as bench one-batch runs it: 12 layers of
// 12 heads of 64, each request a 16-token prefill then tokens decoded
// round robin (so with one-token pages a request's slots are 32 apart,
// with 16-token pages its runs of 16), contexts 17..144 (190 MB of
// float32 KV, far beyond the caches: every layer reads from memory). One
// op is the 12 layers.
func BenchmarkDecodeModel(b *testing.B) {
	for _, page := range []int{1, 16} {
		for _, serial := range []bool{false, true} {
			name := fmt.Sprintf("batch32_ctx16-144_page%d", page)
			if serial {
				name += "_serial"
			}
			b.Run(name, func(b *testing.B) { decodeModelBench(b, 32, 16, 144, 12, page, serial, tensor.F32) })
		}
	}
	// Converted KV storage: GB/s of the stored bytes.
	for _, dtype := range []tensor.DType{tensor.BF16, tensor.FP8E4M3} {
		b.Run(fmt.Sprintf("batch32_ctx16-144_page16_%v", dtype), func(b *testing.B) { decodeModelBench(b, 32, 16, 144, 12, 16, false, dtype) })
	}
	// One request over a bf16 cache, as a batch-1 decode runs it (the
	// bf16 rows read in place).
	for _, ctx := range []int{64, 256} {
		for _, serial := range []bool{false, true} {
			name := fmt.Sprintf("batch1_ctx%d_page16_BF16", ctx)
			if serial {
				name += "_serial"
			}
			b.Run(name, func(b *testing.B) { decodeModelBench(b, 1, ctx-1, ctx, 12, 16, serial, tensor.BF16) })
		}
	}
}

func decodeModelBench(b *testing.B, reqs, prefill, ctx, layers, page int, serial bool, dtype tensor.DType) {
	const heads, dim = 12, 64
	l := attention.Layer{NumHeads: heads, NumKVHeads: heads, HeadDim: dim, HeadDimV: dim}
	l.Scale = float32(1 / math.Sqrt(float64(dim)))
	spec := kvcache.Spec{NumLayers: layers, NumKVHeads: heads, HeadDim: dim, HeadDimV: dim, DType: dtype}
	tc := newTestCache(b, spec, page, reqs, ctx)
	// Request r stops at a length spread over [prefill+1, ctx].
	final := make([]int, reqs)
	for r := range reqs {
		final[r] = prefill + 1 + r*(ctx-prefill-1)/max(1, reqs-1)
		tc.fill(b, r, prefill)
	}
	for n := prefill + 1; n < ctx; n++ {
		for r := range reqs {
			if n < final[r] {
				tc.fill(b, r, n)
			}
		}
	}
	lens := make([]int, reqs)
	var keys int
	for r := range reqs {
		lens[r] = 1
		keys += final[r]
	}
	batch := tc.batch(b, forward.Decode, lens)
	q, k, v := tc.inputs(&l, batch)
	// As the engine runs it: layer outputs in a cpu.Ops arena, recycled
	// every step.
	var workers *cpu.Workers
	if !serial {
		workers = cpu.NewWorkers(0)
		b.Cleanup(workers.Close)
	}
	ops := cpu.NewOps(workers)
	be := New("splitkv", attention.Options{Device: "cpu", KV: tc.cache, Runtime: cpu.NewRuntime(workers), Output: ops.NewActivation}, SplitPrefix)
	if err := be.Plan(batch); err != nil {
		b.Fatal(err)
	}
	elem := map[tensor.DType]float64{tensor.F32: 4, tensor.BF16: 2, tensor.FP8E4M3: 1}[dtype]
	kvBytes := float64(keys*layers) * float64(spec.KWidth()+spec.VWidth()) * elem
	b.ResetTimer()
	cpu0 := cputime.Process()
	for range b.N {
		ops.BeginForward()
		for li := range layers {
			l.Index = li
			if _, err := attention.Run(be, q, k, v, &l, batch); err != nil {
				b.Fatal(err)
			}
		}
		ops.EndForward()
	}
	if serial {
		b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
	}
	b.ReportMetric(kvBytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// TestWorkersFromRuntime: a backend splits over the pool its runtime
// carries, and runs serially without one.
func TestWorkersFromRuntime(t *testing.T) {
	workers := cpu.NewWorkers(3)
	defer workers.Close()
	for _, tc := range []struct {
		opts attention.Options
		want int
	}{
		{attention.Options{Device: "cpu", Runtime: cpu.NewRuntime(workers)}, 3},
		{attention.Options{Device: "cpu", Runtime: cpu.NewRuntime(nil)}, 1},
		{attention.Options{Device: "cpu"}, 1},
	} {
		if w := tc.opts.Workers(); (w == nil) != (tc.want == 1) {
			t.Errorf("Options.Workers() = %v with a runtime of %d workers", w, tc.want)
		}
		if be := New("splitkv", tc.opts, SplitPrefix); len(be.scratch) != tc.want {
			t.Errorf("%d scratch spaces, want %d", len(be.scratch), tc.want)
		}
	}
}

// TestBF16InPlaceMatchesDecoded runs decodes over a bfloat16 pool with
// the rows read in place (item.bf16) and decoded to float32 first, and
// wants the same bits: widening is exact and the kernels sum in the same
// order. Head counts, GQA groups and widths the assembly takes or leaves
// to the Go loops, odd lengths, several tiles and chunks, the Go kernels
// and the assembly; and against the reference backend, loosely.
func TestBF16InPlaceMatchesDecoded(t *testing.T) {
	workers := cpu.NewWorkers(3)
	t.Cleanup(workers.Close)
	defer func(was bool) { bf16InPlace = was }(bf16InPlace)
	defer cpu.SetAssembly(cpu.SetAssembly(true))
	for _, asm := range []bool{true, false} {
		cpu.SetAssembly(asm)
		for _, c := range []struct{ heads, kvHeads, dim, dimV int }{
			{12, 12, 64, 64}, {8, 2, 32, 32}, {6, 3, 16, 16}, {4, 1, 12, 12}, {4, 2, 16, 8},
		} {
			for _, tune := range []tuning{defaultTuning, {quantum: 4, itemsPerWorker: 64, queryBlock: 4, keyTile: 7, minSplit: 4}} {
				name := fmt.Sprintf("asm=%v/h%d_kv%d_d%d_dv%d/tile%d", asm, c.heads, c.kvHeads, c.dim, c.dimV, tune.keyTile)
				t.Run(name, func(t *testing.T) {
					l := attention.Layer{NumHeads: c.heads, NumKVHeads: c.kvHeads, HeadDim: c.dim, HeadDimV: c.dimV}
					l.Scale = float32(1 / math.Sqrt(float64(c.dim)))
					spec := kvcache.Spec{NumLayers: 1, NumKVHeads: c.kvHeads, HeadDim: c.dim, HeadDimV: c.dimV, DType: tensor.BF16}
					tc := newTestCache(t, spec, 16, 3, 600)
					for r, n := range []int{37, 1, 513} {
						tc.fill(t, r, n)
					}
					be := newBackend("test", workers, SplitPrefix, tune)
					ref, _ := native.Entry.New(attention.Options{})
					for step := range 3 {
						b := tc.batch(t, forward.Decode, []int{1, 1, 1})
						q, k, v := tc.inputs(&l, b)
						bf16InPlace = false
						want, err := attention.Run(be, q, k, v, &l, b)
						if err != nil {
							t.Fatal(err)
						}
						bf16InPlace = true
						got, err := attention.Run(be, q, k, v, &l, b)
						if err != nil {
							t.Fatal(err)
						}
						for i, w := range want.HostData() {
							if g := got.HostData()[i]; math.Float32bits(g) != math.Float32bits(w) {
								t.Fatalf("step %d: value %d (row %d): in place %v, decoded %v", step, i, i/want.Cols(), g, w)
							}
						}
						nat, _ := attention.Run(ref, q, k, v, &l, b)
						compare(t, fmt.Sprintf("step %d against the reference", step), got, nat, 1e-4)
					}
				})
			}
		}
	}
}
