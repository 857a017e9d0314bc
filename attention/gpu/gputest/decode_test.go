package gputest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/conformance"
	"github.com/gosling-ai/gosling/attention/flash"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/attention/splitkv"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// decodeCase is one shape of TestCUDADecodeLong.
type decodeCase struct {
	dim, group, page int
	kv, act          tensor.DType
	softcap          float32
	window           int
}

func (c decodeCase) String() string {
	s := fmt.Sprintf("d%d/g%d/page%d/kv-%v/q-%v", c.dim, c.group, c.page, c.kv, c.act)
	if c.softcap > 0 {
		s += fmt.Sprintf("/softcap%g", c.softcap)
	}
	if c.window > 0 {
		s += fmt.Sprintf("/window%d", c.window)
	}
	return s
}

// TestCUDADecodeLong checks the decode kernels over long, paged contexts
// (the conformance battery's sequences are short): three requests of 1,
// 300 and 2,500 keys whose pages interleave, every head dim and GQA group
// the kernels take, page sizes 1 and 16, 16- and 8-bit caches, float32 and
// bf16 queries, with and without splits (splitkv, flash), against a
// float64 reference over the keys as stored. The new token's k and v are
// stored by the kernel itself.
func TestCUDADecodeLong(t *testing.T) {
	rt := TestRuntime(t)
	var cases []decodeCase
	for _, dim := range []int{64, 128, 256} {
		for _, group := range []int{1, 4, 8, 16} {
			if dim == 256 && group > 8 {
				continue
			}
			for _, page := range []int{1, 16} {
				for _, kv := range []tensor.DType{tensor.BF16, tensor.FP8E4M3} {
					for _, act := range []tensor.DType{tensor.F32, tensor.BF16} {
						cases = append(cases, decodeCase{dim: dim, group: group, page: page, kv: kv, act: act})
					}
				}
			}
		}
	}
	cases = append(cases,
		decodeCase{dim: 128, group: 4, page: 16, kv: tensor.BF16, act: tensor.F32, softcap: 30},
		decodeCase{dim: 128, group: 4, page: 1, kv: tensor.FP8E4M3, act: tensor.BF16, window: 1000},
		decodeCase{dim: 256, group: 2, page: 16, kv: tensor.BF16, act: tensor.BF16, softcap: 50, window: 700},
		decodeCase{dim: 128, group: 4, page: 16, kv: tensor.F32, act: tensor.F32},
		decodeCase{dim: 128, group: 8, page: 1, kv: tensor.F16, act: tensor.F32},
	)
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { runDecodeCase(t, rt, c) })
	}
}

func runDecodeCase(t *testing.T, grt *gpu.Runtime, c decodeCase) {
	const kvHeads = 2
	lens := []int{1, 300, 2500}
	heads := kvHeads * c.group
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: kvHeads, HeadDim: c.dim, HeadDimV: c.dim, DType: c.kv}
	maxCtx := 2560
	numPages := len(lens)*(maxCtx+c.page-1)/c.page + 4
	alloc, err := kvcache.NewAllocator(c.page, numPages)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := kvcache.NewDevicePool(spec, numPages*c.page, c.page, grt.PoolMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.FreeDevice(grt.PoolMemory())
	const kScale, vScale = 0.05, 0.03
	if c.kv == tensor.FP8E4M3 {
		pool.SetScales(0, kScale, vScale)
	}
	cache := &kvcache.Cache{Alloc: alloc, Table: kvcache.NewReqToToken(len(lens), maxCtx), Pool: pool}
	// Grow the requests in turns so that their pages interleave.
	seqs := make([]*kvcache.Seq, len(lens))
	for r := range lens {
		seqs[r], _ = cache.NewSeq()
	}
	for done := false; !done; {
		done = true
		for r, n := range lens {
			if cur := seqs[r].Len; cur < n {
				if ok, err := cache.Grow(seqs[r], min(n, cur+37)); !ok || err != nil {
					t.Fatal(ok, err)
				}
				done = false
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(c.dim*7+c.group), uint64(c.page*131+int(c.kv))))
	width := kvHeads * c.dim
	slots := numPages * c.page
	// The pool's rows as stored (host float64) and their device image.
	kRef, vRef := make([][]float64, slots), make([][]float64, slots)
	kAll, vAll := make([]float32, slots*width), make([]float32, slots*width)
	for i := range kAll {
		kAll[i], vAll[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	for s := range slots {
		kRef[s] = conformance.Stored(kAll[s*width:(s+1)*width], c.kv, kScale)
		vRef[s] = conformance.Stored(vAll[s*width:(s+1)*width], c.kv, vScale)
	}
	uploadPool(t, grt, pool.DevK[0], kAll, c.kv, kScale)
	uploadPool(t, grt, pool.DevV[0], vAll, c.kv, vScale)

	batch := &forward.Batch{Mode: forward.Decode, KV: cache}
	var qs, ks, vs []float32
	for r, n := range lens {
		batch.ReqRows = append(batch.ReqRows, int32(seqs[r].Row))
		batch.PrefixLens = append(batch.PrefixLens, int32(n-1))
		batch.ExtendLens = append(batch.ExtendLens, 1)
		batch.InputIDs = append(batch.InputIDs, 0)
		batch.Positions = append(batch.Positions, int32(n-1))
		slot := cache.Table.Row(seqs[r].Row)[n-1]
		batch.OutSlots = append(batch.OutSlots, slot)
		q, k, v := randRow(rng, heads*c.dim, c.act), randRow(rng, width, c.act), randRow(rng, width, c.act)
		qs, ks, vs = append(qs, q...), append(ks, k...), append(vs, v...)
		kRef[slot] = conformance.Stored(k, c.kv, kScale)
		vRef[slot] = conformance.Stored(v, c.kv, vScale)
	}
	if err := batch.Finalize(); err != nil {
		t.Fatal(err)
	}
	layer := attention.Layer{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: c.dim, HeadDimV: c.dim,
		Scale: float32(1 / math.Sqrt(float64(c.dim))), LogitSoftcap: c.softcap, SlidingWindow: c.window}
	// Reference per request and head.
	want := make([]float64, len(lens)*heads*c.dim)
	for r, n := range lens {
		row := cache.Table.Row(seqs[r].Row)
		lo := 0
		if c.window > 0 {
			lo = max(0, n-c.window)
		}
		for h := range heads {
			g := h / c.group
			q := qs[(r*heads+h)*c.dim : (r*heads+h+1)*c.dim]
			sc := make([]float64, n)
			mx := math.Inf(-1)
			for j := lo; j < n; j++ {
				kr := kRef[row[j]][g*c.dim : (g+1)*c.dim]
				var d float64
				for x := range c.dim {
					d += float64(q[x]) * kr[x]
				}
				d *= float64(layer.Scale)
				if c.softcap > 0 {
					d = float64(c.softcap) * math.Tanh(d/float64(c.softcap))
				}
				sc[j] = d
				mx = max(mx, d)
			}
			var sum float64
			out := want[(r*heads+h)*c.dim : (r*heads+h+1)*c.dim]
			for j := lo; j < n; j++ {
				p := math.Exp(sc[j] - mx)
				sum += p
				vr := vRef[row[j]][g*c.dim : (g+1)*c.dim]
				for x := range c.dim {
					out[x] += p * vr[x]
				}
			}
			for x := range out {
				out[x] /= sum
			}
		}
	}
	tol := 1e-3 // float32 queries: the kernels keep about 16 bits of q and the probabilities
	if c.act != tensor.F32 {
		tol = 2e-2
	}
	nt := len(lens)
	for _, e := range []attention.Entry{splitkv.CUDAEntry, flash.CUDAEntry} {
		// The new rows are stored by each run; the same values each time.
		qT, kT, vT := upload(t, grt, qs, c.act, nt, heads*c.dim), upload(t, grt, ks, c.act, nt, width), upload(t, grt, vs, c.act, nt, width)
		be, err := e.New(attention.Options{Device: "cuda", KV: cache, Layers: []attention.Layer{layer}, GPU: grt})
		if err != nil {
			t.Fatal(err)
		}
		if err := be.Plan(batch); err != nil {
			t.Fatal(err)
		}
		out, err := attention.Run(be, qT, kT, vT, &layer, batch)
		if err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		got := download(t, grt, out)
		if cl, ok := be.(interface{ Close() error }); ok {
			cl.Close()
		}
		worst := 0.0
		for i, w := range want {
			d := math.Abs(float64(got[i])-w) / max(1, math.Abs(w))
			if math.IsNaN(float64(got[i])) {
				d = math.Inf(1)
			}
			worst = max(worst, d)
			if d > tol {
				r, rest := i/(heads*c.dim), i%(heads*c.dim)
				t.Fatalf("%s: request %d (%d keys), head %d, dim %d: got %.7g, want %.7g", e.Name, r, lens[r], rest/c.dim, rest%c.dim, got[i], w)
			}
		}
		t.Logf("%s: max relative error %.2e", e.Name, worst)
	}
}

// uploadPool writes a whole layer of the pool (float32 values, stored as
// dt; fp8 divided by its scale first, as the pool stores them).
func uploadPool(t *testing.T, grt *gpu.Runtime, dst uintptr, vals []float32, dt tensor.DType, fp8Scale float32) {
	t.Helper()
	src := vals
	if dt == tensor.FP8E4M3 {
		src = make([]float32, len(vals))
		for i, v := range vals {
			src[i] = v * (1 / fp8Scale)
		}
	}
	raw := make([]byte, len(src)*elemBytes(dt))
	tensor.EncodeInto(dt, src, raw)
	if err := cuda.CopyHtoD(grt.Dev, cuda.DevicePtr(dst), raw); err != nil {
		t.Fatal(err)
	}
}
