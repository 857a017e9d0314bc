// Package gpu holds what the CUDA attention backends share: the runtime
// they launch on, the per-forward plan uploaded to the device (slot/page
// lists and the visibility arrays of attention.Visible), the KV store, the
// fused attention kernels with their split-KV merge, and the conformance
// harness that runs the battery of attention/conformance on the device.
//
// The kernels are CUDA C in kernels/attn_kernels.cu, registered with
// device/cuda (cuda.RegisterKernels) and compiled with the others by
// cuda.LoadKernels; kernels/kernels.decl declares them, and go generate
// writes their typed launch stubs (kernels_gen.go) and the request-row
// layout the sources include (kernels/attn_gen.cuh). Shapes follow attention.Backend;
// every device tensor is dense, row-major, in F32, BF16 or F16.
package gpu

//go:generate go run ../../internal/cudagen/gen kernels/kernels.decl

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

func init() { cuda.RegisterKernels("attention/gpu", kernelFS, "kernels") }

// Runtime is one GPU as the attention backends use it: the device, its
// loaded kernels and the stream every forward runs on. All work of a
// forward goes on Stream, so buffers freed to the caching allocator may be
// reused at once (the one-stream rule of cuda.Allocator.Free).
type Runtime struct {
	Dev     *cuda.Device
	Kernels *cuda.Kernels
	Stream  cuda.Stream

	mu       sync.Mutex
	blas     *cuda.Blas
	blasErr  error
	blasOnce sync.Once
	smemSet  map[string]int // dynamic shared memory granted per kernel

	// splitCounters are the decode kernel's per (token, KV head) counts of
	// finished splits, zero at rest (the merging block resets its own), so
	// that the last split merges without a launch of its own; zero Ptr
	// when they could not be allocated (the merge kernel runs instead).
	splitCounters cuda.Buffer

	// sinks are the device copies of layers' sink logits, keyed by the
	// host slice (attention.Layer.Sinks), uploaded before any forward so
	// that none is copied inside a captured graph.
	sinks map[*float32]cuda.Buffer

	// hopper: the module was built for sm_90a and holds attn_fa3.
	hopper bool
	// NoHopper keeps an sm_90 GPU on the sm_80 kernels (attn_fa2), so
	// that tests and benchmarks can hold the two against each other.
	NoHopper bool
	// Forward, when set, is the memory of the forward the attention runs
	// in (the model's cuda.ModelOps): inside a forward, on the device
	// thread, every buffer a layer's attention takes (its output, which
	// the layer releases with its other activations, and the scratch it
	// gives back before returning) comes from it. Nil: the caching
	// allocator, the caller freeing the outputs.
	Forward ForwardMemory
	// NoTMA keeps attn_fa3's producer on its cp.async gather where the
	// tensor memory accelerator could load the tiles (pages of 16 keys
	// or more); GOSLING_FA3_TMA=0 sets it, for an A/B of the two.
	NoTMA bool
	// NoMLAWG keeps MLA decode on attn_mla (mma.sync) where attn_mla_wg
	// (wgmma, sm_90a) would run; GOSLING_MLA_WG=0 sets it, for an A/B.
	NoMLAWG bool
	// DecodeSplits, when above 0, fixes the tensor-core decode's split
	// count instead of ChooseStreamSplit, and attn_mla_wg's instead of
	// ChooseWaveSplit (GOSLING_DECODE_SPLITS: to measure the policy on a
	// GPU).
	DecodeSplits int
	// envErr is a GOSLING_* setting NewRuntime could not read (EnvErr).
	envErr error
	// tmaps are the tensor maps encoded so far (fa3tma.go); tmaLaunches
	// counts the launches that used them, tmaErr is the first the driver
	// refused.
	tmaps       map[tmapKey]cuda.TensorMap
	tmaLaunches int64
	tmaErr      error
	// mlaWGLaunches counts attn_mla_wg's launches (MLAWGLaunches).
	mlaWGLaunches int64
}

// ForwardMemory is the memory of one forward (cuda.ModelOps's arena):
// blocks taken by ForwardAlloc go back by ForwardRelease or when the
// forward ends, and the arena gives the caching allocator its blocks
// back in the order it took them, so that each forward of a shape finds
// its buffers at the same addresses (a CUDA graph's dry run and its
// capture must). Scratch taken from the allocator directly and freed
// after a block taken later and kept (a layer's output) would break
// that order.
type ForwardMemory interface {
	ForwardAlloc(bytes int) (cuda.Buffer, error)
	ForwardRelease(b cuda.Buffer)
}

// fa3Probe is an attn_fa3 kernel every sm_90a module holds (kernels.decl).
const fa3Probe = "attn_fa3_bf16_d128"

// splitCounterCap is how many (token, KV head) pairs the split counters
// cover: 64 Ki ints, 256 KiB.
const splitCounterCap = 1 << 16

// NewRuntime wraps an open device and its kernels; work goes on dev.Stream.
func NewRuntime(dev *cuda.Device, kernels *cuda.Kernels) *Runtime {
	rt := &Runtime{Dev: dev, Kernels: kernels, Stream: dev.Stream, smemSet: map[string]int{}}
	var tmaErr, splitsErr, mlaErr error
	rt.NoTMA, tmaErr = noTMAEnv(os.Getenv("GOSLING_FA3_TMA"))
	rt.DecodeSplits, splitsErr = decodeSplitsEnv(os.Getenv("GOSLING_DECODE_SPLITS"))
	rt.NoMLAWG, mlaErr = offSwitchEnv("GOSLING_MLA_WG", os.Getenv("GOSLING_MLA_WG"))
	rt.envErr = errors.Join(tmaErr, splitsErr, mlaErr)
	if dev.Info.Arch() == 90 {
		_, err := kernels.Function(fa3Probe)
		rt.hopper = err == nil
	}
	// Zeroed once, here, outside any forward: a CUDA graph replays the
	// kernels that keep them zero, never a memset.
	if buf, err := dev.Mem.Alloc(4 * splitCounterCap); err == nil {
		if dev.MemsetAsync(buf.Ptr, 0, 4*splitCounterCap, dev.Stream) == nil && dev.StreamSync(dev.Stream) == nil {
			rt.splitCounters = buf
		} else {
			dev.Mem.Free(buf)
		}
	}
	return rt
}

// decodeSplitsEnv reads GOSLING_DECODE_SPLITS: unset or 0 leaves the
// split count to the policy, a positive count fixes it; anything else is
// an error, not a setting quietly ignored.
func decodeSplitsEnv(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("GOSLING_DECODE_SPLITS=%q: want a count of splits (0: the policy's)", v)
	}
	return n, nil
}

// noTMAEnv reads GOSLING_FA3_TMA: 0 keeps attn_fa3 on its cp.async
// gather, unset or 1 lets the tensor memory accelerator load the tiles.
func noTMAEnv(v string) (bool, error) { return offSwitchEnv("GOSLING_FA3_TMA", v) }

// offSwitchEnv reads a switch that is on unless set to 0: it reports
// true (off) for 0, false for unset or 1, and an error naming the
// variable for anything else.
func offSwitchEnv(name, v string) (bool, error) {
	switch v {
	case "", "1":
		return false, nil
	case "0":
		return true, nil
	}
	return false, fmt.Errorf("%s=%q: want 0 or 1", name, v)
}

// EnvErr names the GOSLING_* settings of the attention kernels that
// NewRuntime could not read: the device's opening fails with it.
func (rt *Runtime) EnvErr() error { return rt.envErr }

// MLAWGLaunches is how many launches ran attn_mla_wg (MLA decode on
// wgmma) so far: tests and benchmarks tell which MLA kernel they measured.
func (rt *Runtime) MLAWGLaunches() int64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.mlaWGLaunches
}

// Hopper reports whether prefill and extend run attn_fa3 (sm_90a kernels
// were built for this GPU).
func (rt *Runtime) Hopper() bool { return rt.hopper }

// Blas is the runtime's cuBLAS handle (the native backend's GEMMs), opened
// on first use.
func (rt *Runtime) Blas() (*cuda.Blas, error) {
	rt.blasOnce.Do(func() { rt.blas, rt.blasErr = cuda.NewBlas(rt.Dev) })
	return rt.blas, rt.blasErr
}

// UploadSinks copies the sink logits of layers to the device (once per
// slice); the backends call it when built, with every layer they serve.
func (rt *Runtime) UploadSinks(layers []attention.Layer) error {
	for i := range layers {
		if _, err := rt.SinksPtr(&layers[i]); err != nil {
			return err
		}
	}
	return nil
}

// SinksPtr is the device copy of layer's sinks ([NumHeads] float32), 0
// without sinks; a slice not seen before is uploaded (synchronously).
func (rt *Runtime) SinksPtr(layer *attention.Layer) (cuda.DevicePtr, error) {
	if len(layer.Sinks) == 0 {
		return 0, nil
	}
	key := &layer.Sinks[0]
	rt.mu.Lock()
	buf, ok := rt.sinks[key]
	rt.mu.Unlock()
	if ok {
		return buf.Ptr, nil
	}
	buf, err := rt.Dev.Mem.Alloc(4 * len(layer.Sinks))
	if err != nil {
		return 0, fmt.Errorf("attention layer %d sinks: %w", layer.Index, err)
	}
	if err := cuda.CopyHtoD(rt.Dev, buf.Ptr, unsafe.Slice((*byte)(unsafe.Pointer(key)), 4*len(layer.Sinks))); err != nil {
		rt.Dev.Mem.Free(buf)
		return 0, fmt.Errorf("attention layer %d sinks: %w", layer.Index, err)
	}
	rt.mu.Lock()
	if rt.sinks == nil {
		rt.sinks = map[*float32]cuda.Buffer{}
	}
	rt.sinks[key] = buf
	rt.mu.Unlock()
	return buf.Ptr, nil
}

// Close releases what the runtime opened itself (not the device or kernels).
func (rt *Runtime) Close() error {
	for _, buf := range rt.sinks {
		rt.Dev.Mem.Free(buf)
	}
	rt.sinks = nil
	if rt.splitCounters.Ptr != 0 {
		rt.Dev.Mem.Free(rt.splitCounters)
		rt.splitCounters = cuda.Buffer{}
	}
	if rt.blas != nil {
		return rt.blas.Close()
	}
	return nil
}

// launch enqueues a kernel by name on the runtime's stream, granting it
// cfg.SharedMem bytes of dynamic shared memory past the default 48 KiB
// when it asks for more. The typed stubs of kernels_gen.go call it.
func (rt *Runtime) launch(name string, cfg cuda.LaunchConfig, args *cuda.Args) error {
	f, err := rt.Kernels.Function(name)
	if err != nil {
		return err
	}
	// A kernel's static shared memory counts against the same 48 KiB
	// default as the dynamic part, so opt in well below it.
	if cfg.SharedMem > 32<<10 {
		if optin := rt.Dev.Info.MaxSharedOptin; optin > 0 && cfg.SharedMem > optin {
			return fmt.Errorf("%s needs %d bytes of shared memory, the device allows %d", name, cfg.SharedMem, optin)
		}
		rt.mu.Lock()
		granted := rt.smemSet[name]
		rt.mu.Unlock()
		if granted < cfg.SharedMem {
			if err := rt.Dev.SetMaxDynamicShared(f, cfg.SharedMem); err != nil {
				return err
			}
			rt.mu.Lock()
			rt.smemSet[name] = cfg.SharedMem
			rt.mu.Unlock()
		}
	}
	return rt.Dev.Launch(f, cfg, rt.Stream, args)
}

// Alloc takes a device buffer from the caching allocator.
func (rt *Runtime) Alloc(bytes int) (cuda.Buffer, error) { return rt.Dev.Mem.Alloc(max(bytes, 1)) }

// Free returns a buffer to the caching allocator (work still reading it
// must be on rt.Stream).
func (rt *Runtime) Free(b cuda.Buffer) { rt.Dev.Mem.Free(b) }

// FreeTensor returns a device tensor allocated by a CUDA backend (the
// output of Extend and Decode) to the forward's memory (Forward) or the
// caching allocator.
func (rt *Runtime) FreeTensor(t tensor.T) {
	if t.OnDevice() {
		rt.release(cuda.Buffer{Ptr: cuda.DevicePtr(t.DevPtr())})
	}
}

// scratch takes a buffer that lives within one layer's attention (or
// is its output): from the forward's memory when set, else the caching
// allocator. Device thread.
func (rt *Runtime) scratch(bytes int) (cuda.Buffer, error) {
	if rt.Forward != nil {
		return rt.Forward.ForwardAlloc(max(bytes, 1))
	}
	return rt.Alloc(bytes)
}

// release gives back a buffer scratch took (work still reading it is on
// rt.Stream).
func (rt *Runtime) release(b cuda.Buffer) {
	if rt.Forward != nil {
		rt.Forward.ForwardRelease(b)
		return
	}
	rt.Free(b)
}

// PoolMemory adapts the caching allocator to kvcache.DeviceMemory, for
// kvcache.NewDevicePool.
func (rt *Runtime) PoolMemory() kvcache.DeviceMemory { return poolMemory{rt.Dev.Mem} }

type poolMemory struct{ mem *cuda.Allocator }

func (m poolMemory) Alloc(bytes int) (uintptr, error) {
	b, err := m.mem.Alloc(bytes)
	return uintptr(b.Ptr), err
}

func (m poolMemory) Free(ptr uintptr) { m.mem.Free(cuda.Buffer{Ptr: cuda.DevicePtr(ptr)}) }

// Caps is what the fused CUDA backends (flash, splitkv) support, proven
// on the device by the conformance battery (attention/gpu/gputest) and, for
// CUDA graphs, by the engine's graph tests: their launches depend only on
// the batch size and a power-of-two bucket of the longest sequence
// (FillGPU), so a decode step can replay a captured graph.
var Caps = attention.Caps{
	CUDAGraph:     true,
	Devices:       []string{"cuda"},
	PageSizes:     attention.PageSizes{Any: true},
	KVDTypes:      []tensor.DType{tensor.F32, tensor.BF16, tensor.FP8E4M3},
	SlidingWindow: true,
	LogitSoftcap:  true,
	SpecDecoding:  true,
	MLA:           true,
	Multimodal:    true,
	Sinks:         true,
}

// EagerCaps is Caps without CUDA graphs: the native backend's cuBLAS calls
// take every request's length as arguments, so no graph could be replayed.
var EagerCaps = func() attention.Caps {
	c := Caps
	c.CUDAGraph = false
	return c
}()

// Provider is a device.Runtime that carries the runtime the CUDA attention
// backends launch on (device/cudadev.Runtime).
type Provider interface {
	AttentionRuntime() *Runtime
}

// FromOptions is the runtime a CUDA backend was given, through the
// Provider capability of opts.Runtime.
func FromOptions(opts attention.Options) (*Runtime, error) {
	p, ok := opts.Runtime.(Provider)
	if !ok || p.AttentionRuntime() == nil {
		return nil, fmt.Errorf("a CUDA attention backend needs a CUDA device runtime in attention.Options.Runtime (device %q)", opts.Device)
	}
	rt := p.AttentionRuntime()
	if err := rt.UploadSinks(opts.Layers); err != nil {
		return nil, err
	}
	return rt, nil
}

// KernelSuffix names a dtype the way the attention kernels do.
func KernelSuffix(dt tensor.DType) (string, error) {
	switch dt {
	case tensor.F32:
		return "f32", nil
	case tensor.BF16:
		return "bf16", nil
	case tensor.F16:
		return "f16", nil
	case tensor.FP8E4M3:
		return "fp8", nil
	}
	return "", fmt.Errorf("no attention kernel for dtype %v", dt)
}

func elemBytes(dt tensor.DType) int {
	switch dt {
	case tensor.F32:
		return 4
	case tensor.FP8E4M3:
		return 1
	}
	return 2
}
