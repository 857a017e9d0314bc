package engine

import (
	"fmt"
	"strings"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// openDevice opens the device (auto: CUDA when the program links it,
// device/cudadev, and a GPU opens; else the CPU, logged) as e.rt.
func (e *Engine) openDevice() error {
	cfg := &e.cfg
	switch cfg.Device {
	case "cpu":
		e.rt = e.cpuRuntime()
		return nil
	case "auto", "cuda", "cuda:0":
	default:
		return fmt.Errorf("--device must be auto, cpu or cuda, got %q", cfg.Device)
	}
	rt, err := device.Open("cuda", device.OpenOptions{WeightDType: e.gpuWeightDType(), Workers: e.workers, Log: e.log})
	if err != nil {
		if cfg.Device != "auto" {
			return err
		}
		e.log.Info("no usable GPU, running on the CPU", "reason", err)
		cfg.Device = "cpu"
		e.rt = e.cpuRuntime()
		return nil
	}
	cfg.Device = "cuda"
	e.rt = rt
	return nil
}

// cpuRuntime is the host runtime, on the FP8 reference path under
// --quantization fp8.
func (e *Engine) cpuRuntime() *cpu.Runtime {
	rt := cpu.NewRuntime(e.workers)
	rt.Ops().(*cpu.Ops).FP8 = e.fp8Quantizer() != nil
	return rt
}

// fp8Quantizer is --quantization fp8's weight source, nil without it.
func (e *Engine) fp8Quantizer() *model.FP8Quantizer {
	if c, ok := e.checkpoint.Weights.(*convertedWeights); ok {
		return c.fp8
	}
	return nil
}

// checkFP8 refuses --quantization fp8 where it would change nothing: a
// device without FP8 kernels, or (after the build, built true) a model
// that loaded none of its linear layers in e4m3.
func (e *Engine) checkFP8(built bool) error {
	q := e.fp8Quantizer()
	switch {
	case q == nil:
		return nil
	case !built:
		if fo, ok := e.rt.Ops().(device.FP8Ops); !ok || !fo.FP8Weights() {
			return fmt.Errorf("--quantization fp8: the %s device has no FP8 kernels (a GPU needs compute capability 8.9 or later)", e.rt.Name())
		}
	case e.tp != nil && e.tp.fp8 != nil && e.tp.fp8.Served() == 0, e.tp == nil && q.Served() == 0:
		return fmt.Errorf("--quantization fp8: %s loads none of its linear layers in fp8 yet", e.checkpoint.Config.Architecture)
	}
	return nil
}

// gpuWeightDType maps --dtype to what the GPU stores linear weights in:
// bfloat16 and float16 as named, auto the checkpoint's 16-bit dtype
// (torch_dtype bfloat16 or float16, as SGLang and vLLM serve them),
// bfloat16 for a GGUF file of quantised blocks (whose Q8_0 and K-quant
// matrices the GPU keeps compact; the others are widened to it), and
// float32 otherwise. Activations stay float32.
func (e *Engine) gpuWeightDType() tensor.DType {
	dt := strings.ToLower(e.cfg.DType)
	if dt == "" || dt == "auto" {
		if e.servesQuantizedBlocks() {
			return tensor.BF16
		}
		dt = strings.ToLower(e.checkpoint.Config.TorchDType)
	}
	switch dt {
	case "bfloat16", "bf16":
		return tensor.BF16
	case "float16", "f16", "half", "fp16":
		return tensor.F16
	}
	return tensor.F32
}

// servesQuantizedBlocks reports whether the checkpoint is a GGUF file of
// quantised blocks (Q8_0, the K-quants, the legacy and IQ4 formats, by
// its embedding's dtype) served as they are: --dtype auto, not widened.
func (e *Engine) servesQuantizedBlocks() bool {
	if dt := strings.ToLower(e.cfg.DType); dt != "" && dt != "auto" {
		return false
	}
	d, err := tensor.ParseDType(strings.ToLower(e.checkpoint.Config.TorchDType))
	return err == nil && (d == tensor.Q8_0 || tensor.IsBlockQuant(d))
}

// DeviceWeightBytes is the memory the device holds for the model's
// weights as served (rank 0's under tensor parallelism; a GPU's
// allocations, the packed weights on the CPU), or 0 where the device
// does not say.
func (e *Engine) DeviceWeightBytes() int64 {
	if wb, ok := e.rt.Ops().(interface{ WeightBytes() int64 }); ok {
		return wb.WeightBytes()
	}
	return 0
}

// newKVCache builds the cache in host memory, or in the device's memory
// when it has its own (where the window region is not used yet).
func (e *Engine) newKVCache(spec kvcache.Spec) (*kvcache.Cache, error) {
	c := &e.cfg
	mem := e.rt.KVMemory()
	if mem == nil {
		return kvcache.NewCache(spec, c.PageSize, c.KVCacheTokens, c.MaxRunningRequests, c.ContextLength)
	}
	spec.SWATokens = 0
	return kvcache.NewCacheWithPool(spec, c.PageSize, c.KVCacheTokens, c.MaxRunningRequests, c.ContextLength,
		func(spec kvcache.Spec, slots, pageSize int) (*kvcache.Pool, error) {
			return kvcache.NewDevicePool(spec, slots, pageSize, mem)
		})
}

// deviceKVBytes is the memory --mem-fraction-static leaves for the KV
// cache after the weights are loaded and the activations' reserve
// (kvBudget) is set aside, and how much of it the reserve took.
func (e *Engine) deviceKVBytes(mi device.MemoryInfo, reserve int64) (budget, shortfall int64, err error) {
	free, total, err := mi.MemInfo()
	if err != nil {
		return 0, 0, err
	}
	frac := e.cfg.MemFractionStatic
	if frac <= 0 {
		frac = 0.85
	}
	budget, shortfall = kvBudget(total, free, frac, reserve)
	if budget <= 0 {
		return 0, shortfall, fmt.Errorf("no GPU memory is left for the KV cache: --mem-fraction-static %.2f of %.1f GiB holds %.1f GiB in use after the weights, and a forward of up to %d tokens needs %.1f GiB of activations (%.1f GiB of them beyond the %.0f%% of the card the fraction leaves); raise --mem-fraction-static, or lower --max-prefill-tokens and --chunked-prefill-size (smaller forwards)",
			frac, gib(total), gib(total-free), e.forwardTokens, gib(reserve), gib(shortfall), 100*(1-frac))
	}
	return budget, shortfall, nil
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }
