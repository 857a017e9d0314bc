package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// TestGPUQKV16Attention: one attention layer of a 300-token prefill on
// the GPU, its q, k and v in bf16 from their GEMMs (NormLinearGroup16),
// rotated by rope_bf16 and stored into a bf16 or fp8 KV cache by
// attn_store_bf16_*, against the float32 path it replaces (float32
// products, rope_f32, attn_store_f32_*, q rounded by convert_f32_bf16
// before the tensor-core kernel). The cache must hold exactly the
// rotated bf16 k and v (rounded to fp8 over an fp8 cache), the caches of
// the two paths must differ by bf16 rounding alone, and so must the
// attention outputs, for the flash, splitkv and native backends.
func TestGPUQKV16Attention(t *testing.T) {
	checkQKV16Attention(t, cuda.NeedGPUModelOps(t, tensor.BF16), []attention.Entry{gpu.FlashEntry, gpu.SplitKVEntry, gpu.NativeEntry})
}

// TestFakeQKV16Store is TestGPUQKV16Attention's KV store on the emulated
// GPU, which has no attention kernels: the layer's k and v go to the
// cache through gpu.Runtime.StoreKV alone.
func TestFakeQKV16Store(t *testing.T) {
	checkQKV16Attention(t, cuda.NewFakeModelOpsWith(t, cuda.ModelOpsOptions{WeightDType: tensor.BF16}), nil)
}

// checkQKV16Attention is TestGPUQKV16Attention on ops through each of
// entries; with none, only the store.
func checkQKV16Attention(t *testing.T, ops *cuda.ModelOps, entries []attention.Entry) {
	rt := gpu.NewRuntime(ops.Device(), ops.Kernels())
	rt.Forward = ops
	t.Cleanup(func() { rt.Close() })
	const (
		hd   = 128
		rows = 300 // past the fused product of adjacent q, k, v: a GEMM each
		eps  = 1e-6
	)
	hidden, heads, kvHeads := 512, 8, 2
	if len(entries) == 0 { // the store alone, on the emulated GPU's host GEMMs
		hidden, heads, kvHeads = 128, 2, 1
	}
	rng := rand.New(rand.NewPCG(60, 60))
	normal := func(n int, scale float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * scale)
		}
		return out
	}
	outs := []int{heads * hd, kvHeads * hd, kvHeads * hd}
	ws := make([]tensor.Weight, len(outs))
	for i, n := range outs {
		ws[i] = tensor.FromFloat32(fmt.Sprintf("w%d", i), normal(n*hidden, 1/math.Sqrt(float64(hidden))), n, hidden)
	}
	mats, err := ops.MatrixGroup(ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	gamma := normal(hidden, 0.2)
	for i := range gamma {
		gamma[i]++
	}
	norm, err := ops.Vector(gamma)
	if err != nil {
		t.Fatal(err)
	}
	x := normal(rows*hidden, 1)
	rope := &device.Rope{HeadDim: hd, InvFreq: invFreq(hd, 500000)}
	layer := attention.Layer{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: hd, HeadDimV: hd,
		Scale: float32(1 / math.Sqrt(hd)), OutToLinear: true}

	// run is the layer's prefill through be over a fresh cache: its
	// output, the rotated k and the v handed to the attention, and the
	// cache's K and V rows of the prompt, as float32.
	type result struct{ out, k, v, kCache, vCache []float32 }
	run := func(t *testing.T, entry *attention.Entry, kv tensor.DType, sixteen bool) result {
		spec := kvcache.Spec{NumLayers: 1, NumKVHeads: kvHeads, HeadDim: hd, HeadDimV: hd, DType: kv}
		store := entry == nil
		if store {
			entry = &gpu.SplitKVEntry // its cache; the store goes through a planner of the test's
		}
		cache, be := deviceAttention(t, rt, *entry, spec, []attention.Layer{layer}, 16, rows+16, 1)
		seq, _ := cache.NewSeq()
		if ok, err := cache.Grow(seq, rows); !ok || err != nil {
			t.Fatal(ok, err)
		}
		b := &forward.Batch{Mode: forward.Extend, KV: cache, ReqRows: []int32{int32(seq.Row)}, PrefixLens: []int32{0},
			ExtendLens: []int32{rows}, OutSlots: cache.Table.Row(seq.Row)[:rows], LogitRows: []int32{rows - 1}}
		for i := range rows {
			b.InputIDs, b.Positions = append(b.InputIDs, 0), append(b.Positions, int32(i))
		}
		if err := b.Finalize(); err != nil {
			t.Fatal(err)
		}
		planner := gpu.NewPlanner(rt)
		defer planner.Close()
		plan, err := planner.Plan(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := be.Plan(b); err != nil {
			t.Fatal(err)
		}
		var r result
		err = ops.Run(func() error {
			ops.BeginForward()
			defer ops.EndForward()
			dx := ops.Upload(tensor.From(x, rows, hidden))
			var qkv []tensor.T
			if sixteen {
				qkv = ops.NormLinearGroup16(dx, norm, eps, tensor.BF16, mats...)
			} else {
				qkv = ops.NormLinearGroup(dx, norm, eps, mats...)
			}
			want := map[bool]tensor.DType{true: tensor.BF16, false: tensor.F32}[sixteen]
			for i, p := range qkv {
				if p.DType != want {
					return fmt.Errorf("product %d in %v, want %v", i, p.DType, want)
				}
			}
			ops.RopeQK(qkv[0], qkv[1], b.Positions, rope)
			r.k, r.v = ops.ToHost(qkv[1]).HostData(), ops.ToHost(qkv[2]).HostData()
			if store {
				k, _ := qkv[1].Device()
				v, _ := qkv[2].Device()
				return rt.StoreKV(plan, k, v, &layer, cache.Pool)
			}
			out, err := be.Extend(qkv[0], qkv[1], qkv[2], &layer, b)
			if err != nil {
				return err
			}
			ops.Adopt(out)
			r.out = ops.ToHost(out).HostData()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		r.kCache = cacheRows(t, ops.Device(), cache.Pool.Device.K[0], kv, b.OutSlots, kvHeads*hd)
		r.vCache = cacheRows(t, ops.Device(), cache.Pool.Device.V[0], kv, b.OutSlots, kvHeads*hd)
		return r
	}

	runs := []*attention.Entry{nil} // without entries: the store alone
	if len(entries) > 0 {
		runs = nil
		for i := range entries {
			runs = append(runs, &entries[i])
		}
	}
	for _, kv := range []tensor.DType{tensor.BF16, tensor.FP8E4M3} {
		for _, entry := range runs {
			name := "store"
			if entry != nil {
				name = entry.Name
			}
			t.Run(fmt.Sprintf("%v/%s", kv, name), func(t *testing.T) {
				got, ref := run(t, entry, kv, true), run(t, entry, kv, false)
				// The 16-bit store: the cache holds the rotated bf16 k and
				// the bf16 v, rounded to the cache's dtype (exactly for bf16).
				// fp8: a step either way where the device's rounding and the
				// host's part (2⁻⁹ below 2⁻⁶, subnormals).
				rel, atol := 0.0, 0.0
				if kv == tensor.FP8E4M3 {
					rel, atol = 1.0/8, 1.0/512
				}
				within(t, "k in the cache", got.kCache, roundTo(got.k, kv), atol, rel)
				within(t, "v in the cache", got.vCache, roundTo(got.v, kv), atol, rel)
				// Against the float32 path: a rotated value mixes two inputs
				// each rounded to bf16 once more there, then both paths round
				// to the cache's dtype (neighbours at most a step apart).
				step := map[tensor.DType]float64{tensor.BF16: 1.0 / 128, tensor.FP8E4M3: 1.0 / 8}[kv]
				pairs := pairSums(ref.kCache, hd)
				bad := 0
				for j := range ref.kCache {
					bound := 2.0/128*pairs[j] + step*math.Abs(float64(ref.kCache[j])) + 3e-3
					if d := math.Abs(float64(got.kCache[j] - ref.kCache[j])); d > bound {
						if bad < 5 {
							t.Errorf("k cache[%d] = %v, float32 path %v (bound %.3g)", j, got.kCache[j], ref.kCache[j], bound)
						}
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("k cache: %d of %d values off the float32 path", bad, len(ref.kCache))
				}
				within(t, "v cache against the float32 path", got.vCache, ref.vCache, 3e-3, 1.0/128+step)
				if entry == nil {
					return
				}
				// The outputs: the same attention of q, k and v that differ by
				// bf16 steps (relative 2⁻⁸), far below this bound.
				if d, s := rms(diff(got.out, ref.out)), rms(ref.out); d > 0.03*s {
					t.Errorf("outputs differ by %.3g RMS, of outputs %.3g RMS", d, s)
				} else {
					t.Logf("outputs differ by %.3g RMS, of outputs %.3g RMS", d, s)
				}
			})
		}
	}
}

// TestGPUQKV16Llama is TestFakeGPUQKV16Llama on the GPU: llama_gqa on
// bf16 weights through the flash backend over a device KV cache.
func TestGPUQKV16Llama(t *testing.T) {
	ops := cuda.NeedGPUModelOps(t, tensor.BF16)
	rt := gpu.NewRuntime(ops.Device(), ops.Kernels())
	rt.Forward = ops
	t.Cleanup(func() { rt.Close() })
	checkQKV16Llama(t, ops, func(t *testing.T, m model.Runnable, spec kvcache.Spec) (*kvcache.Cache, attention.Backend) {
		return deviceAttention(t, rt, gpu.FlashEntry, spec, m.AttentionLayers(), 16, 512, 1)
	})
}

// invFreq is the default rope's frequencies at head dim hd.
func invFreq(hd int, theta float64) []float32 {
	f := make([]float32, hd/2)
	for i := range f {
		f[i] = float32(1 / math.Pow(theta, float64(2*i)/float64(hd)))
	}
	return f
}

// cacheRows reads the rows of slots of a device KV cache of width values
// a row in dt, as float32 (fp8 at scale 1).
func cacheRows(t *testing.T, dev *cuda.Device, base uintptr, dt tensor.DType, slots []int32, width int) []float32 {
	t.Helper()
	size := 2
	if dt == tensor.FP8E4M3 {
		size = 1
	}
	out := make([]float32, 0, len(slots)*width)
	raw := make([]byte, width*size)
	row := make([]float32, width)
	for _, s := range slots {
		if err := cuda.CopyDtoH(dev, raw, cuda.DevicePtr(base).Add(int(s)*width*size)); err != nil {
			t.Fatal(err)
		}
		tensor.DecodeInto(dt, raw, row)
		out = append(out, row...)
	}
	return out
}

// roundTo is vals rounded to dt (BF16 or FP8E4M3 at scale 1).
func roundTo(vals []float32, dt tensor.DType) []float32 {
	out := make([]float32, len(vals))
	for i, v := range vals {
		if dt == tensor.FP8E4M3 {
			out[i] = tensor.FP8E4M3ToF32(tensor.F32ToFP8E4M3(v))
		} else {
			out[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
		}
	}
	return out
}

// pairSums is |x_a| + |x_b| for the rotate-half pair (a, b) of every value
// of rows of heads of hd values.
func pairSums(x []float32, hd int) []float64 {
	out := make([]float64, len(x))
	for j := range x {
		head, i := j-j%hd, j%hd%(hd/2)
		out[j] = math.Abs(float64(x[head+i])) + math.Abs(float64(x[head+i+hd/2]))
	}
	return out
}

// within fails t where |got − want| > atol + rtol·|want|.
func within(t *testing.T, what string, got, want []float32, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > atol+rtol*math.Abs(float64(want[i])) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off", what, bad, len(want))
	}
}

func diff(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

func rms(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(max(len(x), 1)))
}
