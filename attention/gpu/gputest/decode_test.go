package gputest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/conformance"
	"github.com/gosling-ai/gosling/attention/gpu"
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
	sinks            bool // a sink logit per head (conformance.DrawSinks)
	// poison fills the pool rows no request reaches (the ends of the
	// requests' last pages among them) with NaN: a kernel must never
	// let an unwritten row reach O.
	poison bool
	// lens are the requests' lengths after the forward and ext their new
	// tokens (nil: decode, one each).
	lens, ext []int
}

func (c decodeCase) String() string {
	s := fmt.Sprintf("d%d/g%d/page%d/kv-%v/q-%v", c.dim, c.group, c.page, c.kv, c.act)
	if c.ext != nil {
		s = fmt.Sprintf("ext%v/", c.ext) + s
	}
	if c.softcap > 0 {
		s += fmt.Sprintf("/softcap%g", c.softcap)
	}
	if c.window > 0 {
		s += fmt.Sprintf("/window%d", c.window)
	}
	if c.sinks {
		s += "/sinks"
	}
	if c.poison {
		s += "/poison"
	}
	return s
}

// TestCUDADecodeLong checks the decode kernels over long, paged contexts
// (the conformance battery's sequences are short): three requests of 1,
// 300 and 2,500 keys whose pages interleave, every head dim and GQA group
// the kernels take, page sizes 1 and 16, 16- and 8-bit caches, float32 and
// bf16 queries, with and without splits (splitkv, flash) and sinks, and through
// cuDNN (cudnn, where it loads and claims the case), against a float64
// reference over the keys as stored. The new token's k and v are
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
		decodeCase{dim: 128, group: 8, page: 1, kv: tensor.FP8E4M3, act: tensor.F16},
		decodeCase{dim: 128, group: 4, page: 16, kv: tensor.BF16, act: tensor.BF16, sinks: true},
		decodeCase{dim: 64, group: 8, page: 1, kv: tensor.BF16, act: tensor.F32, sinks: true},
	)
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { runDecodeCase(t, rt, c) })
	}
}

// TestCUDAExtendLong is TestCUDADecodeLong for extends (chunked prefill
// over a cached prefix, a whole prompt, and one token in one batch),
// which the prefill kernels serve.
func TestCUDAExtendLong(t *testing.T) {
	rt := TestRuntime(t)
	var cases []decodeCase
	for _, dim := range []int{64, 128} {
		for _, group := range []int{1, 4} {
			for _, page := range []int{1, 16} {
				cases = append(cases, decodeCase{dim: dim, group: group, page: page, kv: tensor.BF16, act: tensor.BF16})
			}
		}
	}
	cases = append(cases,
		decodeCase{dim: 256, group: 2, page: 16, kv: tensor.BF16, act: tensor.BF16, softcap: 30},
		decodeCase{dim: 256, group: 4, page: 1, kv: tensor.BF16, act: tensor.BF16, window: 200},
		decodeCase{dim: 128, group: 8, page: 16, kv: tensor.BF16, act: tensor.BF16, softcap: 30},
		decodeCase{dim: 128, group: 4, page: 1, kv: tensor.BF16, act: tensor.BF16, window: 200},
		decodeCase{dim: 64, group: 2, page: 16, kv: tensor.BF16, act: tensor.F32},
		decodeCase{dim: 128, group: 4, page: 16, kv: tensor.FP8E4M3, act: tensor.BF16},
		decodeCase{dim: 64, group: 2, page: 1, kv: tensor.FP8E4M3, act: tensor.BF16, window: 200},
		decodeCase{dim: 128, group: 4, page: 16, kv: tensor.BF16, act: tensor.F32},
		decodeCase{dim: 128, group: 4, page: 16, kv: tensor.BF16, act: tensor.BF16, sinks: true},
		decodeCase{dim: 64, group: 2, page: 1, kv: tensor.BF16, act: tensor.F32, sinks: true},
	)
	// Pages of 16 keys or more take attn_fa3's tensor-memory-accelerator
	// producer: page runs shorter than, equal to and longer than its tile
	// (128 keys, 64 at dim 256), a GQA group that is no power of two (Q
	// gathered beside K/V boxes), and pools whose unreached rows are NaN
	// (the last tile, past the keys, is gathered with zero fill).
	cases = append(cases,
		decodeCase{dim: 128, group: 4, page: 64, kv: tensor.BF16, act: tensor.BF16, poison: true},
		decodeCase{dim: 128, group: 4, page: 128, kv: tensor.BF16, act: tensor.BF16, poison: true},
		decodeCase{dim: 128, group: 2, page: 256, kv: tensor.BF16, act: tensor.BF16, window: 200, poison: true},
		decodeCase{dim: 128, group: 3, page: 16, kv: tensor.BF16, act: tensor.BF16, poison: true},
		decodeCase{dim: 64, group: 8, page: 32, kv: tensor.BF16, act: tensor.BF16, poison: true},
		decodeCase{dim: 256, group: 4, page: 256, kv: tensor.BF16, act: tensor.BF16, softcap: 30, poison: true},
		decodeCase{dim: 256, group: 1, page: 16, kv: tensor.BF16, act: tensor.BF16, poison: true},
	)
	// Contexts of 1100 to 2500 keys: every K/V stage ring (4 stages at dim
	// 64, 2 above) laps twice or more before a block's last tile, which
	// runs past its keys and waits for its stage in ring order.
	long, longExt := []int{1100, 2500, 1300}, []int{1, 1, 300}
	cases = append(cases,
		decodeCase{dim: 64, group: 1, page: 16, kv: tensor.BF16, act: tensor.BF16, poison: true, lens: long, ext: longExt},
		decodeCase{dim: 128, group: 4, page: 16, kv: tensor.BF16, act: tensor.BF16, poison: true, lens: long, ext: longExt},
		decodeCase{dim: 128, group: 3, page: 32, kv: tensor.BF16, act: tensor.BF16, lens: long, ext: longExt},
		decodeCase{dim: 256, group: 2, page: 64, kv: tensor.BF16, act: tensor.BF16, poison: true, lens: long, ext: longExt},
	)
	// On Hopper every case runs on attn_fa3 (its producer's tensor memory
	// accelerator where it applies, unless GOSLING_FA3_TMA=0 turns it off),
	// again with the producer's cp.async gather alone (Runtime.NoTMA), and
	// on attn_fa2.
	type variant struct {
		suffix          string
		noHopper, noTMA bool
	}
	noTMA := rt.NoTMA
	variants := []variant{{noTMA: noTMA}}
	if rt.Hopper() {
		if !noTMA {
			variants = append(variants, variant{"/gather", false, true})
		}
		variants = append(variants, variant{"/sm80", true, false})
	}
	defer func() { rt.NoHopper, rt.NoTMA = false, noTMA }()
	for _, v := range variants {
		rt.NoHopper, rt.NoTMA = v.noHopper, v.noTMA
		for i := range cases {
			if cases[i].lens == nil {
				cases[i].lens, cases[i].ext = []int{300, 329, 701}, []int{300, 129, 1}
			}
			c := cases[i]
			t.Run(c.String()+v.suffix, func(t *testing.T) {
				before, _ := rt.TMALaunches()
				runDecodeCase(t, rt, c)
				after, err := rt.TMALaunches()
				if err != nil {
					t.Fatal(err)
				}
				// flash and splitkv each launch attn_fa3 once: over a bf16
				// cache, for bf16 queries or float32 ones (rounded to bf16).
				tma := rt.Hopper() && !v.noHopper && !v.noTMA && c.page >= 16 && c.kv == tensor.BF16 && c.act != tensor.F16
				if tma && after-before < 2 || !tma && after != before {
					t.Errorf("%d attn_fa3 launches used the tensor memory accelerator (want it: %v)", after-before, tma)
				}
			})
		}
	}
}

func runDecodeCase(t *testing.T, grt *gpu.Runtime, c decodeCase) {
	const kvHeads = 2
	lens, ext := c.lens, c.ext
	if lens == nil {
		lens, ext = []int{1, 300, 2500}, []int{1, 1, 1}
	}
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
	defer pool.Free()
	const kScale, vScale = 0.05, 0.03
	if c.kv == tensor.FP8E4M3 {
		pool.SetScales(0, kScale, vScale)
	}
	cache := &kvcache.Cache{Alloc: alloc, Table: kvcache.NewReqToToken(len(lens), maxCtx), Pool: pool}
	seqs := interleavedSeqs(t, cache, lens)
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
	if c.poison {
		live := make([]bool, slots)
		for r, n := range lens {
			for _, slot := range cache.Table.Row(seqs[r].Row)[:n] {
				live[slot] = true
			}
		}
		nan := float32(math.NaN())
		for s := range slots {
			if !live[s] {
				for x := range width {
					kAll[s*width+x], vAll[s*width+x] = nan, nan
				}
			}
		}
	}
	uploadPool(t, grt, pool.Device.K[0], kAll, c.kv, kScale)
	uploadPool(t, grt, pool.Device.V[0], vAll, c.kv, vScale)

	mode := forward.Decode
	if c.ext != nil {
		mode = forward.Extend
	}
	batch := &forward.Batch{Mode: mode, KV: cache}
	var qs, ks, vs []float32
	for r, n := range lens {
		batch.ReqRows = append(batch.ReqRows, int32(seqs[r].Row))
		batch.PrefixLens = append(batch.PrefixLens, int32(n-ext[r]))
		batch.ExtendLens = append(batch.ExtendLens, int32(ext[r]))
		for i := n - ext[r]; i < n; i++ {
			batch.InputIDs = append(batch.InputIDs, 0)
			batch.Positions = append(batch.Positions, int32(i))
			slot := cache.Table.Row(seqs[r].Row)[i]
			batch.OutSlots = append(batch.OutSlots, slot)
			q, k, v := randRow(rng, heads*c.dim, c.act), randRow(rng, width, c.act), randRow(rng, width, c.act)
			qs, ks, vs = append(qs, q...), append(ks, k...), append(vs, v...)
			kRef[slot] = conformance.Stored(k, c.kv, kScale)
			vRef[slot] = conformance.Stored(v, c.kv, vScale)
		}
	}
	if err := batch.Finalize(); err != nil {
		t.Fatal(err)
	}
	layer := attention.Layer{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: c.dim, HeadDimV: c.dim,
		Scale: float32(1 / math.Sqrt(float64(c.dim))), LogitSoftcap: c.softcap, SlidingWindow: c.window}
	if c.sinks {
		layer.Sinks = conformance.DrawSinks(rng, heads)
	}
	// Reference per new token and head: causal over the keys as stored.
	nt := len(qs) / (heads * c.dim)
	want := make([]float64, nt*heads*c.dim)
	tok := 0
	for r, n := range lens {
		row := cache.Table.Row(seqs[r].Row)
		for i := n - ext[r]; i < n; i++ {
			lo := 0
			if c.window > 0 {
				lo = max(0, i+1-c.window)
			}
			for h := range heads {
				g := h / c.group
				q := qs[(tok*heads+h)*c.dim : (tok*heads+h+1)*c.dim]
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := lo; j <= i; j++ {
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
				if c.sinks {
					// The sink joins the denominator and adds no value.
					sink := float64(layer.Sinks[h])
					mx = max(mx, sink)
					sum = math.Exp(sink - mx)
				}
				out := want[(tok*heads+h)*c.dim : (tok*heads+h+1)*c.dim]
				for j := lo; j <= i; j++ {
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
			tok++
		}
	}
	tol := 1e-3 // float32 decode: the kernels keep about 16 bits of q and the probabilities
	if c.act != tensor.F32 || c.ext != nil {
		tol = 2e-2 // 16-bit queries or probabilities
	}
	var extra []attention.Entry
	// cudnn where it loads, for the cases its capabilities claim.
	// (Not over a poisoned pool: what cuDNN reads past a sequence is its own.)
	if cc := gpu.CudnnCaps; gpu.CudnnEntry.Unavailable() == nil && !c.poison && c.softcap == 0 && c.window == 0 && (!c.sinks || cc.Sinks) &&
		slices.Contains(cc.KVDTypes, c.kv) && slices.Contains(cc.HeadDims, c.dim) && cc.PageSizes.Allows(c.page) {
		extra = append(extra, gpu.CudnnEntry)
	}
	checkBackends(t, grt, cache, batch, layer, func() (tensor.T, tensor.T, tensor.T) {
		return upload(t, grt, qs, c.act, nt, heads*c.dim), upload(t, grt, ks, c.act, nt, width), upload(t, grt, vs, c.act, nt, width)
	}, want, c.dim, tol, extra...)
}

// checkBackends runs the layer through the CUDA splitkv and flash
// backends and extra (inputs uploaded afresh for each: a run stores the
// new rows) and compares their outputs with want (per token, heads × dv
// values) within tol, relative to max(1, |want|); cudnn within the 16-bit
// tolerance, as it rounds float32 queries to the bf16 cache's dtype.
func checkBackends(t *testing.T, grt *gpu.Runtime, cache *kvcache.Cache, batch *forward.Batch, layer attention.Layer,
	inputs func() (q, k, v tensor.T), want []float64, dv int, tol float64, extra ...attention.Entry) {
	t.Helper()
	heads := layer.NumHeads
	for _, e := range append([]attention.Entry{gpu.SplitKVEntry, gpu.FlashEntry}, extra...) {
		tol := tol
		if e.Name == gpu.CudnnEntry.Name {
			tol = max(tol, 2e-2)
		}
		qT, kT, vT := inputs()
		be, err := e.New(attention.Options{Device: "cuda", KV: cache, Layers: []attention.Layer{layer}, Runtime: TestDevice(t)})
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
				tk, rest := i/(heads*dv), i%(heads*dv)
				t.Fatalf("%s: token %d, head %d, dim %d: got %.7g, want %.7g", e.Name, tk, rest/dv, rest%dv, got[i], w)
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

// TestCUDAKernelResources logs the registers and local memory of the
// tensor-core attention kernels, and fails if one at head dim 128 or less,
// or an MLA kernel, spills to local memory (a slow path its tiles are
// sized to avoid).
func TestCUDAKernelResources(t *testing.T) {
	rt := TestRuntime(t)
	names := slices.Concat(gpu.KernelNames.AttnDTC, gpu.KernelNames.AttnFA2, gpu.KernelNames.AttnMLA)
	if rt.Hopper() {
		names = slices.Concat(names, gpu.KernelNames.AttnFA3, gpu.KernelNames.AttnFA3FP8, gpu.KernelNames.AttnMLAWG)
	}
	for _, n := range names {
		f, err := rt.Kernels.Function(n)
		if err != nil {
			t.Fatal(err)
		}
		r, err := rt.Dev.FuncResources(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d registers, %d bytes of local memory", n, r.Regs, r.LocalBytes)
		if r.LocalBytes > 0 && !strings.Contains(n, "d256") {
			t.Errorf("%s spills: %d bytes of local memory", n, r.LocalBytes)
		}
	}
}

// TestCUDAMLADecodeLong checks MLA decode (attn_mla, and on Hopper
// attn_mla_wg) the same way: one latent KV head of 576 values whose first
// 512 are the value, 16, 24, 64 and 128 query heads (one partial and one
// or two full blocks of either kernel), pages of 1, 16 and 64 keys, bf16
// and float32 queries over a bf16 cache, contexts of 1, 300 and 2500 keys
// (tiles of 64 cut short) with and without splits (splitkv cuts them into
// chunks of a multiple of 16 keys, some empty) and a sliding window,
// against a float64 reference. Cache rows no sequence holds are NaN, so a
// kernel reading past its keys fails. On Hopper every bf16 case runs on
// both kernels (Runtime.NoMLAWG), and the launches of attn_mla_wg are
// counted: 64 heads and more take it, fewer never do.
func TestCUDAMLADecodeLong(t *testing.T) {
	rt := TestRuntime(t)
	type mlaCase struct {
		heads, page, window int
		act                 tensor.DType
	}
	var cases []mlaCase
	for _, heads := range []int{16, 24, 64, 128} {
		for _, page := range []int{1, 16, 64} {
			cases = append(cases, mlaCase{heads: heads, page: page, act: tensor.BF16})
			if page != 64 && heads != 64 {
				cases = append(cases, mlaCase{heads: heads, page: page, act: tensor.F32})
			}
		}
	}
	cases = append(cases, mlaCase{heads: 16, page: 16, window: 700, act: tensor.BF16},
		mlaCase{heads: 128, page: 16, window: 700, act: tensor.BF16}, mlaCase{heads: 128, page: 1, window: 100, act: tensor.BF16})
	noWG := rt.NoMLAWG
	defer func() { rt.NoMLAWG = noWG }()
	kernels := []bool{noWG}
	if rt.Hopper() && !noWG {
		kernels = append(kernels, true)
	}
	for _, c := range cases {
		for _, old := range kernels {
			name := fmt.Sprintf("h%d/page%d/q-%v/window%d", c.heads, c.page, c.act, c.window)
			if old != noWG {
				name += "/mma"
			}
			t.Run(name, func(t *testing.T) {
				rt.NoMLAWG = old
				before := rt.MLAWGLaunches()
				runMLADecodeCase(t, rt, c.heads, c.page, c.window, c.act)
				n := rt.MLAWGLaunches() - before
				// flash and splitkv launch it once each.
				// (float32 queries are rounded to bf16 for either kernel)
				if wg := rt.Hopper() && !old && c.heads >= 64; wg && n != 2 || !wg && n != 0 {
					t.Errorf("attn_mla_wg ran %d times (want it: %v)", n, wg)
				}
			})
		}
	}
}

func runMLADecodeCase(t *testing.T, grt *gpu.Runtime, heads, page, window int, act tensor.DType) {
	const dk, dv = 576, 512
	lens := []int{1, 300, 2500}
	spec := kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: dk, HeadDimV: dv, SharedV: true, DType: tensor.BF16}
	maxCtx := 2560
	numPages := len(lens)*(maxCtx+page-1)/page + 4
	alloc, err := kvcache.NewAllocator(page, numPages)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := kvcache.NewDevicePool(spec, numPages*page, page, grt.PoolMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	cache := &kvcache.Cache{Alloc: alloc, Table: kvcache.NewReqToToken(len(lens), maxCtx), Pool: pool}
	seqs := interleavedSeqs(t, cache, lens)
	rng := rand.New(rand.NewPCG(uint64(heads), uint64(page*131+window)))
	slots := numPages * page
	kRef := make([][]float64, slots)
	kAll := make([]float32, slots*dk)
	for i := range kAll {
		kAll[i] = float32(rng.NormFloat64())
	}
	for s := range slots {
		kRef[s] = conformance.Stored(kAll[s*dk:(s+1)*dk], tensor.BF16, 1)
	}
	// Rows past every sequence's keys (the tails of their last pages, the
	// free pages) are NaN: 0·NaN would reach O from a row read unmasked.
	held := make([]bool, slots)
	for r, n := range lens {
		for _, slot := range cache.Table.Row(seqs[r].Row)[:n] {
			held[slot] = true
		}
	}
	for s := range slots {
		if !held[s] {
			for x := range dk {
				kAll[s*dk+x] = float32(math.NaN())
			}
		}
	}
	uploadPool(t, grt, pool.Device.K[0], kAll, tensor.BF16, 1)
	batch := &forward.Batch{Mode: forward.Decode, KV: cache}
	var qs, ks []float32
	for r, n := range lens {
		batch.ReqRows = append(batch.ReqRows, int32(seqs[r].Row))
		batch.PrefixLens = append(batch.PrefixLens, int32(n-1))
		batch.ExtendLens = append(batch.ExtendLens, 1)
		batch.InputIDs = append(batch.InputIDs, 0)
		batch.Positions = append(batch.Positions, int32(n-1))
		slot := cache.Table.Row(seqs[r].Row)[n-1]
		batch.OutSlots = append(batch.OutSlots, slot)
		q, k := randRow(rng, heads*dk, act), randRow(rng, dk, act)
		qs, ks = append(qs, q...), append(ks, k...)
		kRef[slot] = conformance.Stored(k, tensor.BF16, 1)
	}
	if err := batch.Finalize(); err != nil {
		t.Fatal(err)
	}
	layer := attention.Layer{NumHeads: heads, NumKVHeads: 1, HeadDim: dk, HeadDimV: dv, MLA: true,
		Scale: float32(1 / math.Sqrt(float64(dk))), SlidingWindow: window}
	want := make([]float64, len(lens)*heads*dv)
	for r, n := range lens {
		row := cache.Table.Row(seqs[r].Row)
		i := n - 1
		lo := 0
		if window > 0 {
			lo = max(0, i+1-window)
		}
		for h := range heads {
			q := qs[(r*heads+h)*dk : (r*heads+h+1)*dk]
			sc := make([]float64, i+1)
			mx := math.Inf(-1)
			for j := lo; j <= i; j++ {
				var d float64
				for x, kx := range kRef[row[j]] {
					d += float64(q[x]) * kx
				}
				sc[j] = d * float64(layer.Scale)
				mx = max(mx, sc[j])
			}
			var sum float64
			out := want[(r*heads+h)*dv : (r*heads+h+1)*dv]
			for j := lo; j <= i; j++ {
				p := math.Exp(sc[j] - mx)
				sum += p
				for x := range dv {
					out[x] += p * kRef[row[j]][x]
				}
			}
			for x := range out {
				out[x] /= sum
			}
		}
	}
	const tol = 2e-2 // bf16 queries (float32 ones are rounded) and probabilities
	checkBackends(t, grt, cache, batch, layer, func() (tensor.T, tensor.T, tensor.T) {
		return upload(t, grt, qs, act, len(lens), heads*dk), upload(t, grt, ks, act, len(lens), dk), tensor.T{}
	}, want, dv, tol)
}

// interleavedSeqs starts a sequence per length and grows them in turns,
// so that their pages interleave.
func interleavedSeqs(t *testing.T, cache *kvcache.Cache, lens []int) []*kvcache.Seq {
	t.Helper()
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
	return seqs
}
