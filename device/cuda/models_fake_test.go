package cuda_test

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/native"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/internal/shared"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/tensor"
)

// Whole models on cuda.ModelOps over the emulated GPU: Gemma 2, DeepSeek
// (MLA, MoE), the mixtures of experts (grouped on the device, one by one
// on the CPU), GPT-OSS (sinks, clamped SwiGLU) and Phi-3 run the same
// forward code as on cpu.Ops and must give the same logits. Attention is the CPU's native backend behind
// hostAttention, so what is checked is every other op on the device path
// (and the models' use of them), not the CUDA attention kernels.

// hostAttention runs a CPU backend for device tensors: q, k, v come to the
// host, the output goes back into device memory, as a CUDA backend's would.
type hostAttention struct {
	be  attention.Backend
	ops *cuda.ModelOps
}

func (h *hostAttention) Name() string                { return "host(" + h.be.Name() + ")" }
func (h *hostAttention) Plan(b *forward.Batch) error { return h.be.Plan(b) }

func (h *hostAttention) Extend(q, k, v tensor.T, l *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return h.run(h.be.Extend, q, k, v, l, b)
}

func (h *hostAttention) Decode(q, k, v tensor.T, l *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return h.run(h.be.Decode, q, k, v, l, b)
}

func (h *hostAttention) run(fn func(q, k, v tensor.T, l *attention.Layer, b *forward.Batch) (tensor.T, error), q, k, v tensor.T, l *attention.Layer, b *forward.Batch) (tensor.T, error) {
	if v.OnDevice() {
		v = h.ops.ToHost(v)
	}
	out, err := fn(h.ops.ToHost(q), h.ops.ToHost(k), v, l, b)
	if err != nil {
		return tensor.T{}, err
	}
	dev := h.ops.Device()
	buf, err := dev.Mem.Alloc(4 * max(len(out.HostData()), 1))
	if err != nil {
		return tensor.T{}, err
	}
	if err := cuda.CopyHtoD(dev, buf.Ptr, out.HostData()); err != nil {
		return tensor.T{}, err
	}
	return tensor.Device{Shape: out.Shape, Ptr: uintptr(buf.Ptr), DType: tensor.F32}.T(), nil
}

// modelRun runs a prefill of prompt (logits for every token) and one
// decode step per token of decode through m, returning each forward's
// logits on the host.
func modelRun(t *testing.T, m model.Runnable, ops device.Ops, wrap func(attention.Backend) attention.Backend, prompt, decode []int32) [][]float32 {
	t.Helper()
	cache, err := kvcache.NewCache(m.KVSpec(), 4, 64, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	return modelRunIn(t, m, ops, wrap, cache, prompt, decode)
}

// modelRunIn is modelRun over a host KV cache of the caller's.
func modelRunIn(t *testing.T, m model.Runnable, ops device.Ops, wrap func(attention.Backend) attention.Backend, cache *kvcache.Cache, prompt, decode []int32) [][]float32 {
	t.Helper()
	w := cpu.NewWorkers(1)
	defer w.Close()
	be, err := native.Entry.New(attention.Options{Device: "cpu", KV: cache, Runtime: cpu.NewRuntime(w), Layers: m.AttentionLayers()})
	if err != nil {
		t.Fatal(err)
	}
	return modelRunWith(t, m, ops, wrap(be), cache, prompt, decode)
}

// modelRunWith is modelRunIn through the caller's attention backend over
// its cache.
func modelRunWith(t *testing.T, m model.Runnable, ops device.Ops, be attention.Backend, cache *kvcache.Cache, prompt, decode []int32) [][]float32 {
	t.Helper()
	seq, ok := cache.NewSeq()
	if !ok {
		t.Fatal("no sequence")
	}
	var out [][]float32
	step := func(mode forward.Mode, ids []int32) {
		prefix := seq.Len
		if ok, err := cache.Grow(seq, prefix+len(ids)); !ok || err != nil {
			t.Fatalf("grow to %d: %v", prefix+len(ids), err)
		}
		b := &forward.Batch{Mode: mode, KV: cache, ReqRows: []int32{int32(seq.Row)}, PrefixLens: []int32{int32(prefix)},
			ExtendLens: []int32{int32(len(ids))}, InputIDs: ids, OutSlots: cache.Table.Row(seq.Row)[prefix : prefix+len(ids)]}
		for i := range ids {
			b.Positions = append(b.Positions, int32(prefix+i))
			b.LogitRows = append(b.LogitRows, int32(i))
		}
		if err := b.Finalize(); err != nil {
			t.Fatal(err)
		}
		forwardOnce := func() error {
			if err := be.Plan(b); err != nil {
				return err
			}
			logits, err := m.Forward(b, be)
			if err != nil {
				return err
			}
			out = append(out, append([]float32(nil), ops.ToHost(logits).HostData()...))
			return nil
		}
		var err error
		if g, ok := ops.(*cuda.ModelOps); ok {
			err = g.Run(forwardOnce)
		} else {
			err = forwardOnce()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	step(forward.Extend, prompt)
	for _, id := range decode {
		step(forward.Decode, []int32{id})
	}
	return out
}

// openModel opens a checkpoint, closed with the test, and its architecture.
func openModel(t *testing.T, path string) (*model.Checkpoint, registry.Architecture) {
	t.Helper()
	ck, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	arch, err := registry.Lookup(ck.Config.Architecture)
	if err != nil {
		t.Fatal(err)
	}
	return ck, arch
}

// cpuAndGPU runs prompt then decode on a CPU model and on an emulated-GPU
// model (its attention on the host) and returns their logits per forward.
func cpuAndGPU(t *testing.T, cpuModel model.Runnable, cpuOps device.Ops, gpuModel model.Runnable, gpuOps *cuda.ModelOps,
	prompt, decode []int32) (want, got [][]float32) {
	t.Helper()
	want = modelRun(t, cpuModel, cpuOps, func(be attention.Backend) attention.Backend { return be }, prompt, decode)
	got = modelRun(t, gpuModel, gpuOps, func(be attention.Backend) attention.Backend {
		return &hostAttention{be: be, ops: gpuOps}
	}, prompt, decode)
	return want, got
}

func TestFakeGPUModels(t *testing.T) {
	for _, name := range []string{"gemma2_softcap_swa", "deepseek_v3_mla_moe", "qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "phi3"} {
		t.Run(name, func(t *testing.T) {
			ck, arch := openModel(t, shared.Path(t, "models/reference-tiny/"+name))
			// 30 prompt tokens pass Gemma's window of 24.
			prompt := make([]int32, 30)
			for i := range prompt {
				prompt[i] = int32(i*37%ck.Config.VocabSize + 1)
			}
			decode := []int32{7, 300, 11}

			cpuOps := cpu.NewOps(nil)
			cpuModel, err := arch.New(&ck.Config, ck.Weights, cpuOps)
			if err != nil {
				t.Fatal(err)
			}
			gpuOps := cuda.NewFakeModelOps(t)
			gpuModel, err := arch.New(&ck.Config, ck.Weights, gpuOps)
			if err != nil {
				t.Fatal(err)
			}
			want, got := cpuAndGPU(t, cpuModel, cpuOps, gpuModel, gpuOps, prompt, decode)

			for s := range want {
				if len(got[s]) != len(want[s]) {
					t.Fatalf("forward %d: %d logits, want %d", s, len(got[s]), len(want[s]))
				}
				worst := 0.0
				for i := range want[s] {
					worst = max(worst, math.Abs(float64(got[s][i]-want[s][i])))
				}
				if worst > 1e-3 {
					t.Errorf("forward %d: logits differ from the CPU's by up to %.3g", s, worst)
				}
				t.Logf("forward %d: max |Δ logit| %.2e", s, worst)
			}
		})
	}
}

// f32Weights serves a checkpoint's block-quantised matrices dequantised
// to float32: the exact reference for compact matrices on the device.
type f32Weights struct{ model.WeightSource }

func (w f32Weights) Tensor(name string) (tensor.Weight, error) {
	t, err := w.WeightSource.Tensor(name)
	if err != nil || t.DType == tensor.F32 {
		return t, err
	}
	return tensor.Convert(t, tensor.F32)
}

// TestFakeGPUQuantModels: GGUF models in Q8_0 and Q4_K_M (Q4_K and Q6_K
// mixed) with their matrices compact on the emulated GPU (qembed, qgemv
// for the decode steps, the widened bf16 GEMM for the 30-token prefill)
// give the logits of the CPU running the same file dequantised to
// float32: within 1e-4 of the largest logit when every forward runs
// qgemv (float32; 2.5e-6 here), within 3e-2 after a prefill through the
// widened GEMM, which rounds x and W to bf16 (2⁻⁸ a product; 1.5e-2
// here).
func TestFakeGPUQuantModels(t *testing.T) {
	pinLimbs(t, 3) // float32's accuracy: see pinLimbs
	shape := random.Presets["stories260K"]
	shape.Dim, shape.Hidden, shape.Layers, shape.Heads, shape.KVHeads = 256, 512, 2, 4, 2
	shape.Tied = false
	for _, tc := range []struct {
		name  string
		dtype tensor.DType
		mix   bool
	}{{"Q8_0", tensor.Q8_0, false}, {"Q4_K_M", tensor.Q4_K, true}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.name+".gguf")
			if err := random.Write(path, random.Options{Shape: shape, Format: "gguf", DType: tc.dtype, MixQ6K: tc.mix, Seed: 24, Std: 0.08}); err != nil {
				t.Fatal(err)
			}
			ck, arch := openModel(t, path)
			long := make([]int32, 30)
			for i := range long {
				long[i] = int32(3 + i*37%(ck.Config.VocabSize-3))
			}
			decode := []int32{7, 300, 11}

			cpuOps := cpu.NewOps(nil)
			cpuModel, err := arch.New(&ck.Config, f32Weights{ck.Weights}, cpuOps)
			if err != nil {
				t.Fatal(err)
			}
			gpuOps := cuda.NewFakeModelOpsWith(t, cuda.ModelOpsOptions{WeightDType: tensor.BF16, KeepQuantized: true})
			gpuModel, err := arch.New(&ck.Config, ck.Weights, gpuOps)
			if err != nil {
				t.Fatal(err)
			}
			held, stored := gpuOps.WeightBytes(), int64(0)
			for _, name := range ck.Weights.Names() {
				w, _ := ck.Weights.Tensor(name)
				rb, _ := w.DType.RowBytes(w.Cols())
				stored += int64(rb * w.Rows())
			}
			if held > stored+stored/50 {
				t.Errorf("the device holds %d bytes of weights for %d stored", held, stored)
			}
			// 6 prompt tokens: every forward on qgemv, in float32; 30: the
			// prefill widened to bf16, and the decode steps attend to its
			// keys and values.
			for _, prompt := range [][]int32{long[:6], long} {
				want, got := cpuAndGPU(t, cpuModel, cpuOps, gpuModel, gpuOps, prompt, decode)
				checkQuantLogits(t, len(prompt), want, got, 3e-2)
			}
		})
	}
}

// TestFakeGPUFP8Models: llama_gqa with its linear layers in e4m3, as
// --quantization fp8 serves them (per channel, model.QuantizeFP8) and as
// an fp8 checkpoint of 16×16 block scales (random.WriteFP8), on the
// emulated GPU against the CPU's FP8 reference path (device.FP8Path).
// Decode-sized forwards (a 6-token prompt, then single tokens) run the
// skinny FP8 kernels with the RMSNorm, the SwiGLU and the residual add
// fused into them (gemv_fp8_fx, gemv_fp8_swiglu, gemv_fp8); a 30-token
// prompt runs the e4m3 GEMM, its scales in cuBLASLt's epilogue or (as on
// sm_90) in a pass over its raw bf16 products, x quantised once for
// q/k/v, by the norm for gate/up and by the SwiGLU for down; the
// block-scaled weights' prompt is widened to bf16 (FP8Widened). Logits:
// within 1e-4 of the largest logit where only the order of float32 sums
// differs (3e-6 here), within 3e-2 where that order tips an input's
// rounding to bf16 or e4m3 the other way (a part in 2⁸ or 2⁴ of it,
// carried through the layers: 1.5e-2 at worst here). The bf16 raw
// products of the per-channel prompt tip many e4m3 roundings: there the
// bound is FP8's own distance from the float32 model (0.90 and 1.33
// against 3.54 at worst here; TestFakeFP8PrefillOps checks those ops
// against their definition).
func TestFakeGPUFP8Models(t *testing.T) {
	src := shared.Path(t, "models/reference-tiny/llama_gqa")
	for _, tc := range []struct {
		name        string
		block       []int // nil: quantised at load, per channel
		noRowScales bool  // cuBLASLt without outer-vector scales
	}{{"per-channel", nil, false}, {"per-channel/scale-pass", nil, true}, {"blocks16x16", []int{16, 16}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			path := src
			if tc.block != nil {
				path = t.TempDir()
				if _, err := random.WriteFP8(src, path, tc.block); err != nil {
					t.Fatal(err)
				}
			}
			ck, arch := openModel(t, path)
			var ws model.WeightSource = ck.Weights
			if tc.block == nil {
				q, err := model.QuantizeFP8(ck.Weights)
				if err != nil {
					t.Fatal(err)
				}
				ws = q
			}
			cpuOps := cpu.NewOps(nil)
			cpuOps.FP8 = true
			cpuModel, err := arch.New(&ck.Config, ws, cpuOps)
			if err != nil {
				t.Fatal(err)
			}
			gpuOps := cuda.NewFakeModelOps(t)
			if tc.noRowScales {
				cuda.FakeNoRowScales(gpuOps)
			}
			gpuModel, err := arch.New(&ck.Config, ws, gpuOps)
			if err != nil {
				t.Fatal(err)
			}
			long := make([]int32, 30)
			for i := range long {
				long[i] = int32(3 + i*37%(ck.Config.VocabSize-3))
			}
			f32Ops := cpu.NewOps(nil)
			f32Model, err := arch.New(&ck.Config, ck.Weights, f32Ops)
			if err != nil {
				t.Fatal(err)
			}
			exact, forwards := 0, 0
			for _, prompt := range [][]int32{long[:6], long} {
				decode := []int32{9, 100, 31}
				want, got := cpuAndGPU(t, cpuModel, cpuOps, gpuModel, gpuOps, prompt, decode)
				f32 := modelRun(t, f32Model, f32Ops, func(be attention.Backend) attention.Backend { return be }, prompt, decode)
				for s := range want {
					worst, top, fp8 := 0.0, 0.0, 0.0
					for i := range want[s] {
						worst = max(worst, math.Abs(float64(got[s][i]-want[s][i])))
						top = max(top, math.Abs(float64(want[s][i])))
						fp8 = max(fp8, math.Abs(float64(want[s][i]-f32[s][i])))
					}
					// A prefill's rows through the e4m3 GEMMs without
					// outer-vector scales round its raw products to bf16
					// before scaling them (as vLLM's bf16 outputs do), a
					// part in 2⁹, which tips some of the next layer's e4m3
					// roundings: a different draw of FP8's own error,
					// bounded by FP8's distance from the float32 model.
					bound := 3e-2
					if len(prompt) == len(long) && tc.block == nil {
						bound = max(bound, fp8)
					}
					if bound == 3e-2 { // the order of float32 sums only
						forwards++
						if worst <= 1e-4*top {
							exact++
						}
					}
					if worst > bound {
						t.Errorf("prompt %d, forward %d: logits differ from the CPU's FP8 path by up to %.3g (largest logit %.3g; FP8's distance from float32 %.3g)", len(prompt), s, worst, top, fp8)
					}
					t.Logf("prompt %d, forward %d: max |Δ logit| %.2e (FP8 against float32: %.2e)", len(prompt), s, worst, fp8)
				}
			}
			if exact < forwards/2 {
				t.Errorf("%d of %d forwards within 1e-4 of the largest logit", exact, forwards)
			}
			kernels := []string{"gemv_fp8_fx", "gemv_fp8_swiglu", "gemv_fp8_"}
			switch {
			case tc.block != nil:
				kernels = append(kernels, "fp8_widen_bf16")
			case tc.noRowScales:
				kernels = append(kernels, "fp8_quant_rows", "fp8_scale_out")
			default:
				kernels = append(kernels, "fp8_quant_rows")
				if n := cuda.FakeLaunches(gpuOps, "fp8_scale_out"); n != 0 {
					t.Errorf("%d fp8_scale_out launches with the scales in cuBLASLt's epilogue", n)
				}
			}
			for _, k := range kernels {
				if cuda.FakeLaunches(gpuOps, k) == 0 {
					t.Errorf("no %s launch", k)
				}
			}
			if tc.block == nil {
				// x quantised once per group in the one 30-token prefill
				// of 3 layers: q/k/v and o by fp8_quant_rows, gate/up by
				// the norm, down by the SwiGLU
				for k, want := range map[string]int{"fp8_quant_rows": 2 * 3, "rmsnorm_f32_to_e4m3": 3, "fp8_swiglu_quant": 3} {
					if n := cuda.FakeLaunches(gpuOps, k); n != want {
						t.Errorf("%d %s launches, want %d", n, k, want)
					}
				}
			}
			if n := cuda.FakeLaunches(gpuOps, "rmsnorm"); n > 4*2+4*3+2 {
				t.Errorf("%d rmsnorm launches: the norms before q/k/v and gate/up of the decode forwards are not fused", n)
			}
		})
	}
}

// TestFakeGPUQuant4Models: reference models in AWQ (random.WriteAWQ,
// groups of 32) and GPT-OSS with MXFP4 experts (random.WriteMXFP4), their
// quantized matrices compact on the emulated GPU (the MXFP4 experts
// handed over compact as the engine asks, model.ServeCompact, and run
// grouped through moe_qgemv in decode steps), give the logits of the CPU
// running their dequantized twins: within 1e-4 of the largest logit when
// every forward runs the dequant-GEMV (6 prompt tokens; about 1e-6 here),
// within 6e-2 after a 30-token prefill through the widened bf16 GEMM
// (whose rounding these models' large weights amplify: 3.0e-2 at worst
// here, where the GGUF models of TestFakeGPUQuantModels, of smaller
// weights, stay within 3e-2).
func TestFakeGPUQuant4Models(t *testing.T) {
	for _, tc := range []struct{ format, model string }{{"awq", "llama_gqa"}, {"awq", "qwen3_moe"}, {"mxfp4", "gpt_oss"}} {
		t.Run(tc.format+"/"+tc.model, func(t *testing.T) {
			src := shared.Path(t, "models/reference-tiny/"+tc.model)
			quantized, dequantized := t.TempDir(), t.TempDir()
			var err error
			if tc.format == "awq" {
				_, err = random.WriteAWQ(src, quantized, dequantized, 32)
			} else {
				err = random.WriteMXFP4(src, quantized, dequantized)
			}
			if err != nil {
				t.Fatal(err)
			}
			ck, arch := openModel(t, quantized)
			ref, _ := openModel(t, dequantized)
			cpuOps := cpu.NewOps(nil)
			cpuModel, err := arch.New(&ref.Config, ref.Weights, cpuOps)
			if err != nil {
				t.Fatal(err)
			}
			gpuOps := cuda.NewFakeModelOpsWith(t, cuda.ModelOpsOptions{WeightDType: tensor.F32, KeepQuantized: true})
			if compact := model.ServeCompact(ck.Weights, gpuOps.KeepsCompact); compact != (tc.format == "mxfp4") {
				t.Fatalf("ServeCompact: %v", compact)
			}
			gpuModel, err := arch.New(&ck.Config, ck.Weights, gpuOps)
			if err != nil {
				t.Fatal(err)
			}
			refOps := cuda.NewFakeModelOpsWith(t, cuda.ModelOpsOptions{WeightDType: tensor.F32})
			if _, err := arch.New(&ref.Config, ref.Weights, refOps); err != nil {
				t.Fatal(err)
			}
			t.Logf("device weights: %d bytes compact, %d for the float32 twin", gpuOps.WeightBytes(), refOps.WeightBytes())
			if gpuOps.WeightBytes() >= refOps.WeightBytes()*3/4 {
				t.Errorf("the device holds %d bytes for the quantized model, %d for its float32 twin", gpuOps.WeightBytes(), refOps.WeightBytes())
			}
			long := make([]int32, 30)
			for i := range long {
				long[i] = int32(i*37%ck.Config.VocabSize + 1)
			}
			for _, prompt := range [][]int32{long[:6], long} {
				want, got := cpuAndGPU(t, cpuModel, cpuOps, gpuModel, gpuOps, prompt, []int32{7, 300, 11})
				checkQuantLogits(t, len(prompt), want, got, 6e-2)
			}
		})
	}
}

// checkQuantLogits bounds each forward's logits against the reference's,
// relative to the largest: 1e-4 after a prompt that ran the dequant-GEMV
// (at most GemvMaxRows tokens), widened after one through the widened
// bf16 GEMM.
func checkQuantLogits(t *testing.T, prompt int, want, got [][]float32, widened float64) {
	t.Helper()
	for s := range want {
		worst, scale := 0.0, 0.0
		for i := range want[s] {
			worst = max(worst, math.Abs(float64(got[s][i]-want[s][i])))
			scale = max(scale, math.Abs(float64(want[s][i])))
		}
		bound := 1e-4 * scale
		if prompt > cuda.GemvMaxRows {
			bound = widened * scale
		}
		t.Logf("prompt %d, forward %d: max |Δ logit| %.2e of logits up to %.3g", prompt, s, worst, scale)
		if worst > bound {
			t.Errorf("prompt %d, forward %d: logits differ from the float32 reference by up to %.3g (bound %.3g)", prompt, s, worst, bound)
		}
	}
}

// TestFakeGPUQKV16Llama: a Llama prefill on bf16 weights over a bf16 or
// fp8 KV cache hands q, k and v to the attention in bf16 (NormLinearGroup16,
// RopeQK in bf16) and decode steps in float32; over a float32 cache, or on
// a device without NormLinearGroup16 (a wrapper hiding it, as tensor
// parallelism's ops do), all stay float32. The logits of the bf16 path
// are about as far from the CPU's float32 model as the float32 path's on
// the same device and cache. Attention runs on the host (hostAttention);
// TestGPUQKV16Llama is the same on the GPU with its backends.
func TestFakeGPUQKV16Llama(t *testing.T) {
	ops := cuda.NewFakeModelOpsWith(t, cuda.ModelOpsOptions{WeightDType: tensor.BF16})
	checkQKV16Llama(t, ops, func(t *testing.T, m model.Runnable, spec kvcache.Spec) (*kvcache.Cache, attention.Backend) {
		cache, err := kvcache.NewCache(spec, 16, 512, 1, 512)
		if err != nil {
			t.Fatal(err)
		}
		be, err := native.Entry.New(attention.Options{Device: "cpu", KV: cache, Runtime: cpu.NewRuntime(hostWorkers(t)), Layers: m.AttentionLayers()})
		if err != nil {
			t.Fatal(err)
		}
		return cache, &hostAttention{be: be, ops: ops}
	})
}

// hostWorkers is a one-worker pool closed with the test.
func hostWorkers(t *testing.T) *cpu.Workers {
	w := cpu.NewWorkers(1)
	t.Cleanup(w.Close)
	return w
}

// checkQKV16Llama runs llama_gqa's 300-token prefill and three decode
// steps on ops (bf16 weights) through the attention newAttention makes,
// over a cache of each KV dtype, with NormLinearGroup16 and with it
// hidden, and on the CPU in float32: see TestFakeGPUQKV16Llama.
func checkQKV16Llama(t *testing.T, ops *cuda.ModelOps, newAttention func(*testing.T, model.Runnable, kvcache.Spec) (*kvcache.Cache, attention.Backend)) {
	ck, arch := openModel(t, shared.Path(t, "models/reference-tiny/llama_gqa"))
	prompt := make([]int32, 300) // past the rows a fused product of q, k, v takes
	for i := range prompt {
		prompt[i] = int32(i*37%(ck.Config.VocabSize-1) + 1)
	}
	decode := []int32{7, 300, 11}
	cpuOps := cpu.NewOps(nil)
	cpuModel, err := arch.New(&ck.Config, ck.Weights, cpuOps)
	if err != nil {
		t.Fatal(err)
	}
	gpuModel, err := arch.New(&ck.Config, ck.Weights, ops)
	if err != nil {
		t.Fatal(err)
	}
	plainModel, err := arch.New(&ck.Config, ck.Weights, hiddenOps{ops})
	if err != nil {
		t.Fatal(err)
	}
	ref := modelRunIn(t, cpuModel, cpuOps, func(be attention.Backend) attention.Backend { return be },
		mustCache(t, cpuModel.KVSpec(), tensor.F32), prompt, decode)
	run := func(t *testing.T, m model.Runnable, kv tensor.DType) ([][]float32, *recordAttention) {
		spec := m.KVSpec()
		spec.DType = kv
		cache, be := newAttention(t, m, spec)
		rec := &recordAttention{Backend: be}
		return modelRunWith(t, m, ops, rec, cache, prompt, decode), rec
	}
	// want lists the dtype of q in each attention call: the prefill's
	// layers, then each decode step's.
	want := func(prefill tensor.DType) []tensor.DType {
		var dts []tensor.DType
		for s := range 1 + len(decode) {
			for range ck.Config.NumLayers {
				dts = append(dts, map[bool]tensor.DType{true: prefill, false: tensor.F32}[s == 0])
			}
		}
		return dts
	}
	for _, kv := range []tensor.DType{tensor.BF16, tensor.FP8E4M3} {
		t.Run(kv.String(), func(t *testing.T) {
			got, rec := run(t, gpuModel, kv)
			if !slices.Equal(rec.dtypes, want(tensor.BF16)) || rec.err != nil {
				t.Errorf("q in %v (modes %v), want %v; %v", rec.dtypes, rec.modes, want(tensor.BF16), rec.err)
			}
			f32, recPlain := run(t, plainModel, kv)
			if !slices.Equal(recPlain.dtypes, want(tensor.F32)) {
				t.Errorf("without NormLinearGroup16: q in %v, want float32", recPlain.dtypes)
			}
			// The two device paths round differently, and this model's large
			// weights amplify any rounding over 300 tokens (its bf16 logits
			// are up to 7% of the largest off the CPU's; 50% over an fp8
			// cache of scale 1): what is bounded is that rounding q, k and
			// v to bf16 leaves them about as far from the float32 model.
			// Either path's error is bf16 roundings of one size, so either
			// may come out ahead (by up to 1.4× in RMS on the fake GPU).
			for s := range ref {
				dNew, dOld := rmsDiff(got[s], ref[s]), rmsDiff(f32[s], ref[s])
				t.Logf("forward %d: RMS of Δ logit to the CPU's %.3g with bf16 q, k, v, %.3g with float32 ones", s, dNew, dOld)
				if dNew > 1.5*dOld {
					t.Errorf("forward %d: logits %.3g (RMS) off the CPU's with bf16 q, k, v, %.3g with float32 ones", s, dNew, dOld)
				}
			}
		})
	}
	if _, rec := run(t, gpuModel, tensor.F32); !slices.Equal(rec.dtypes, want(tensor.F32)) {
		t.Errorf("over a float32 cache: q in %v, want float32", rec.dtypes)
	}
}

// mustCache is a host KV cache of spec in dt for one request of up to 512 tokens.
func mustCache(t *testing.T, spec kvcache.Spec, dt tensor.DType) *kvcache.Cache {
	spec.DType = dt
	cache, err := kvcache.NewCache(spec, 16, 512, 1, 512)
	if err != nil {
		t.Fatal(err)
	}
	return cache
}

// recordAttention is a backend that notes each call's batch mode and q's
// dtype, and refuses k or v in another dtype than q's.
type recordAttention struct {
	attention.Backend
	modes  []forward.Mode
	dtypes []tensor.DType
	err    error
}

func (r *recordAttention) Extend(q, k, v tensor.T, l *attention.Layer, b *forward.Batch) (tensor.T, error) {
	if err := r.note(q, k, v, l, b); err != nil {
		return tensor.T{}, err
	}
	return r.Backend.Extend(q, k, v, l, b)
}

func (r *recordAttention) Decode(q, k, v tensor.T, l *attention.Layer, b *forward.Batch) (tensor.T, error) {
	if err := r.note(q, k, v, l, b); err != nil {
		return tensor.T{}, err
	}
	return r.Backend.Decode(q, k, v, l, b)
}

func (r *recordAttention) note(q, k, v tensor.T, l *attention.Layer, b *forward.Batch) error {
	r.modes, r.dtypes = append(r.modes, b.Mode), append(r.dtypes, q.DType)
	if k.DType != q.DType || v.DType != q.DType {
		r.err = fmt.Errorf("attention layer %d: q %v, k %v, v %v", l.Index, q.DType, k.DType, v.DType)
	}
	return r.err
}

// hiddenOps is device.Ops without the optional powers of the ops it holds.
type hiddenOps struct{ device.Ops }

// rmsDiff is the root mean square of got − want.
func rmsDiff(got, want []float32) float64 {
	var ss float64
	for i := range want {
		d := float64(got[i] - want[i])
		ss += d * d
	}
	return math.Sqrt(ss / float64(max(len(want), 1)))
}

// pinLimbs is the internal tests' pinLimbs, through SetQGemvLimbs.
func pinLimbs(t testing.TB, limbs int) {
	prev, err := cuda.SetQGemvLimbs(limbs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cuda.SetQGemvLimbs(prev) })
}
