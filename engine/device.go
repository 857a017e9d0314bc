package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// gpuState is everything the engine holds on a GPU, closed in reverse.
type gpuState struct {
	dev     *cuda.Device
	kernels *cuda.Kernels
	lt      *cuda.BlasLt
	rt      *gpu.Runtime // the attention backends' runtime (same stream)
	ops     *cuda.ModelOps
}

func (g *gpuState) close() {
	if g.ops != nil {
		g.ops.Close()
	}
	if g.lt != nil {
		g.lt.Close()
	}
	if g.rt != nil {
		g.rt.Close()
	}
	if g.kernels != nil {
		g.kernels.Unload()
	}
	g.dev.Close()
}

// openDevice picks the device (auto: CUDA when a GPU and its libraries
// load, else the CPU, logged) and returns the model's Ops on it.
func (e *Engine) openDevice() (device.Ops, error) {
	cfg := &e.cfg
	switch cfg.Device {
	case "cpu":
		return cpu.NewOps(e.workers), nil
	case "auto", "cuda", "cuda:0":
	default:
		return nil, fmt.Errorf("--device must be auto, cpu or cuda, got %q", cfg.Device)
	}
	g, err := e.openGPU()
	if err != nil {
		if cfg.Device != "auto" {
			return nil, err
		}
		e.log.Info("no usable GPU, running on the CPU", "reason", err)
		cfg.Device = "cpu"
		return cpu.NewOps(e.workers), nil
	}
	cfg.Device = "cuda"
	e.gpu = g
	return g.ops, nil
}

func (e *Engine) openGPU() (*gpuState, error) {
	if err := cuda.DriverAvailable(); err != nil {
		return nil, err
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return nil, err
	}
	g := &gpuState{dev: dev}
	fail := func(err error) (*gpuState, error) {
		g.close()
		return nil, err
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		return fail(err)
	}
	if g.kernels, err = cuda.LoadKernels(dev, nv, cuda.NewDefaultKernelCache()); err != nil {
		return fail(err)
	}
	if g.lt, err = cuda.NewBlasLt(dev); err != nil {
		return fail(err)
	}
	g.rt = gpu.NewRuntime(dev, g.kernels)
	opts := cuda.ModelOpsOptions{WeightDType: e.gpuWeightDType()}
	if err := opts.Validate(); err != nil {
		return fail(err)
	}
	g.ops = cuda.NewModelOps(dev, g.kernels, g.lt, g.rt.Stream, opts)
	e.log.Info("GPU ready", "device", dev.Info.String(), "weights", opts.WeightDType)
	return g, nil
}

// gpuWeightDType maps --dtype to what the GPU stores linear weights in:
// bfloat16 and float16 as named, auto the checkpoint's 16-bit dtype
// (torch_dtype bfloat16 or float16, as SGLang and vLLM serve them), and
// float32 otherwise. Activations stay float32.
func (e *Engine) gpuWeightDType() tensor.DType {
	dt := strings.ToLower(e.cfg.DType)
	if dt == "" || dt == "auto" {
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

// newKVCache builds the cache in host memory, or in GPU memory on CUDA
// (where the window region is not used yet).
func (e *Engine) newKVCache(spec kvcache.Spec) (*kvcache.Cache, error) {
	c := &e.cfg
	if e.gpu == nil {
		return kvcache.NewCache(spec, c.PageSize, c.KVCacheTokens, c.MaxRunningRequests, c.ContextLength)
	}
	spec.SWATokens = 0
	return kvcache.NewCacheWithPool(spec, c.PageSize, c.KVCacheTokens, c.MaxRunningRequests, c.ContextLength,
		func(spec kvcache.Spec, slots, pageSize int) (*kvcache.Pool, error) {
			return kvcache.NewDevicePool(spec, slots, pageSize, e.gpu.rt.PoolMemory())
		})
}

// gpuKVBytes is the memory --mem-fraction-static leaves for the KV cache
// after the weights are loaded.
func (e *Engine) gpuKVBytes() (int64, error) {
	free, total, err := e.gpu.dev.MemInfo()
	if err != nil {
		return 0, err
	}
	frac := e.cfg.MemFractionStatic
	if frac <= 0 {
		frac = 0.85
	}
	used := total - free
	budget := int64(float64(total)*frac) - int64(used)
	if budget <= 0 {
		return 0, errors.New("no GPU memory is left for the KV cache after the weights; raise --mem-fraction-static")
	}
	return budget, nil
}

// forward runs one batch, on the GPU's thread when there is one.
func (e *Engine) forward(run func() error) error {
	if e.gpu == nil {
		return run()
	}
	return e.gpu.ops.Run(run)
}
