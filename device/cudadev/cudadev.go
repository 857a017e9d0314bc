// Package cudadev opens an NVIDIA GPU as a device.Runtime. Importing it
// registers the device "cuda" with package device and the CUDA attention
// backends with attention/registry, as a database/sql driver registers
// itself:
//
//	import _ "github.com/gosling-ai/gosling/device/cudadev"
//
// cmd/gosling imports it; a program that embeds the engine without it
// links no CUDA code and runs on the host (--device auto picks the CPU).
package cudadev

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/gosling-ai/gosling/attention/gpu"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/device/nccl"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

func init() {
	device.Register("cuda", func(o device.OpenOptions) (device.Runtime, error) { return Open(o) })
	registry.Register(gpu.Entries()...)
	parallel.RegisterJoiner("cuda", parallel.Joiner{NewID: newID, Join: join, CustomAllReduce: customAllReduce})
}

// newID is a new NCCL unique id.
func newID() ([]byte, error) {
	lib, err := nccl.Open()
	if err != nil {
		return nil, err
	}
	id, err := lib.GetUniqueID()
	return id.Internal[:], err
}

// join makes one NCCL communicator per runtime, rank first+i on
// runtimes[i]'s GPU and its work stream, so the collectives run in order
// with the model's kernels and inside its CUDA graphs, and warms each.
func join(runtimes []device.Runtime, idBytes []byte, first, size int) ([]parallel.Communicator, error) {
	lib, err := nccl.Open()
	if err != nil {
		return nil, err
	}
	var id nccl.UniqueID
	if len(idBytes) != len(id.Internal) {
		return nil, fmt.Errorf("an NCCL id of %d bytes, want %d", len(idBytes), len(id.Internal))
	}
	copy(id.Internal[:], idBytes)
	n := len(runtimes)
	comms := make([]*nccl.Comm, n)
	err = parallel.Each(n, func(i int) error { // ncclCommInitRank blocks until every rank joins
		rt, ok := runtimes[i].(*Runtime)
		if !ok {
			return fmt.Errorf("rank %d: a %s runtime, not this package's", first+i, runtimes[i].Name())
		}
		c, err := lib.NewComm(rt.dev, id, size, first+i)
		comms[i] = c
		return err
	})
	out := make([]parallel.Communicator, 0, n)
	for _, c := range comms {
		if c != nil {
			out = append(out, c)
		}
	}
	if err == nil {
		// Before any decode graph captures a collective (nccl.Comm.Warm).
		err = parallel.Each(n, func(i int) error { return comms[i].Warm() })
	}
	if err != nil {
		parallel.CloseAll(out)
		return nil, err
	}
	return out, nil
}

// customAllReduce wraps the NCCL communicators of this process's ranks
// (rank i on runtimes[i]) with the peer-memory all-reduce, by
// cuda.ARPlan's defaults for their number and the GOSLING_CUSTOM_AR_*
// overrides in the environment.
func customAllReduce(runtimes []device.Runtime, comms []parallel.Communicator) ([]parallel.Communicator, error) {
	devs, ks := make([]*cuda.Device, len(runtimes)), make([]*cuda.Kernels, len(runtimes))
	for i, rt := range runtimes {
		r, ok := rt.(*Runtime)
		if !ok {
			return nil, fmt.Errorf("rank %d: a %s runtime, not this package's", i, rt.Name())
		}
		devs[i], ks[i] = r.dev, r.kernels
	}
	plan, err := cuda.ARPlanFromEnv(len(runtimes), os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("custom all-reduce: %w", err)
	}
	ranks, err := cuda.NewP2PGroup(devs, ks, plan)
	if err != nil {
		return nil, fmt.Errorf("custom all-reduce: %w", err)
	}
	out := make([]parallel.Communicator, len(comms))
	for i, c := range comms {
		nc, ok := c.(*nccl.Comm)
		if !ok {
			return nil, fmt.Errorf("rank %d: not an NCCL communicator", i)
		}
		out[i] = &p2pComm{Comm: nc, p2p: ranks[i], dev: devs[i]}
	}
	return out, nil
}

// p2pComm is an NCCL communicator whose all-reduces that the plan gives
// the peer-memory kernels (cuda.ARPlan.Algo) run there, on the same
// stream. Every rank decides from the size alone, so all agree.
type p2pComm struct {
	*nccl.Comm
	p2p *cuda.P2PRank
	dev *cuda.Device
}

func (c *p2pComm) AllReduceSum(buf parallel.Buffer) error {
	if buf.OnHost() || !c.p2p.Fits(buf.Len*cuda.ElemSize(buf.DType)) || (buf.DType != tensor.F32 && buf.DType != tensor.BF16) {
		return c.Comm.AllReduceSum(buf)
	}
	return c.dev.Do(func() error { return c.p2p.AllReduceSum(c.Comm.Stream, cuda.DevicePtr(buf.Dev), buf.Len, buf.DType) })
}

// String says which all-reduces run where (the engine logs it).
func (c *p2pComm) String() string { return "custom all-reduce, " + c.p2p.Plan().String() }

// Abort stops the peer kernels' barriers as well as NCCL's collectives.
func (c *p2pComm) Abort() error {
	c.p2p.Stop()
	return c.Comm.Abort()
}

func (c *p2pComm) Close() error {
	err := c.Comm.Close()
	return errors.Join(err, c.dev.Do(func() error {
		if err := c.dev.StreamSync(c.Comm.Stream); err != nil {
			return err
		}
		return c.p2p.Close()
	}))
}

// Runtime is one GPU with everything a forward on it uses: the driver's
// device and stream, the compiled kernels, cuBLASLt, the attention
// backends' runtime and the model's Ops, all on one stream. Besides
// device.Runtime it serves device.Graphs, device.Sampler and
// device.MemoryInfo, and gpu.Provider for the CUDA attention backends.
type Runtime struct {
	dev     *cuda.Device
	kernels *cuda.Kernels
	lt      *cuda.BlasLt
	attn    *gpu.Runtime
	ops     *cuda.ModelOps
	workers device.Workers // the host pool, the opener's
}

var (
	_ device.Runtime       = (*Runtime)(nil)
	_ device.Graphs        = (*Runtime)(nil)
	_ device.GroupGraphs   = (*Runtime)(nil)
	_ device.Sampler       = (*Runtime)(nil)
	_ device.MemoryInfo    = (*Runtime)(nil)
	_ gpu.Provider         = (*Runtime)(nil)
	_ device.Profiler      = (*Runtime)(nil)
	_ device.ForwardMemory = (*Runtime)(nil)

	_ kvcache.DeviceCopier = (*Runtime)(nil)
)

// Open opens GPU o.Ordinal: the driver, NVRTC and the kernels (through the on-disk
// cache), cuBLASLt, and the model's Ops storing weights in o.WeightDType.
func Open(o device.OpenOptions) (*Runtime, error) {
	if err := cuda.DriverAvailable(); err != nil {
		return nil, err
	}
	dev, err := cuda.Open(o.Ordinal)
	if err != nil {
		return nil, err
	}
	r := &Runtime{dev: dev, workers: o.Workers}
	fail := func(err error) (*Runtime, error) {
		r.Close()
		return nil, err
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		return fail(err)
	}
	if r.kernels, err = cuda.LoadKernels(dev, nv, cuda.NewDefaultKernelCache()); err != nil {
		return fail(err)
	}
	if r.lt, err = cuda.NewBlasLt(dev); err != nil {
		return fail(err)
	}
	r.attn = gpu.NewRuntime(dev, r.kernels)
	if err := r.attn.EnvErr(); err != nil {
		return fail(err)
	}
	opts := cuda.ModelOpsOptions{WeightDType: o.WeightDType, KeepQuantized: true}
	if err := opts.Validate(); err != nil {
		return fail(err)
	}
	r.ops = cuda.NewModelOps(dev, r.kernels, r.lt, r.attn.Stream, opts)
	r.attn.Forward = r.ops
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	log.Info("GPU ready", "device", dev.Info.String(), "weights", opts.WeightDType)
	return r, nil
}

func (*Runtime) Name() string                     { return "cuda" }
func (r *Runtime) Ops() device.Ops                { return r.ops }
func (r *Runtime) Workers() device.Workers        { return r.workers }
func (r *Runtime) KVMemory() kvcache.DeviceMemory { return r.attn.PoolMemory() }
func (r *Runtime) Run(fn func() error) error      { return r.ops.Run(fn) }

// AttentionRuntime is what the CUDA attention backends launch on.
func (r *Runtime) AttentionRuntime() *gpu.Runtime { return r.attn }

// ModelOps is the model's Ops with their CUDA-only methods.
func (r *Runtime) ModelOps() *cuda.ModelOps { return r.ops }

// WeightDType is how the model's matrices are stored on the GPU.
func (r *Runtime) WeightDType() tensor.DType { return r.ops.WeightDType() }

func (r *Runtime) RunGraph(key int, forward func() error) (device.GraphRun, error) {
	return r.ops.RunGraph(key, forward)
}

func (r *Runtime) RunGroupGraph(key int, forward func() error, agree device.GraphAgree) (device.GraphRun, error) {
	return r.ops.RunGroupGraph(key, forward, agree)
}

func (r *Runtime) ReleaseGraphs() error { return r.ops.ReleaseGraphs() }

func (r *Runtime) Sample(logits tensor.T, rows []device.SampleRow) ([]int32, error) {
	return r.ops.Sample(logits, rows)
}

func (r *Runtime) SpecVerify(logits tensor.T, rows []device.VerifyRow) ([]device.NodeVerdict, error) {
	return r.ops.SpecVerify(logits, rows)
}

func (r *Runtime) GatherRows(x tensor.T, rows []int32) tensor.T { return r.ops.GatherRows(x, rows) }
func (r *Runtime) ToHost(x tensor.T) tensor.T                   { return r.ops.ToHost(x) }

func (r *Runtime) StartProfile() error { return r.ops.StartProfile() }
func (r *Runtime) Profiling() bool     { return r.ops.Profiling() }
func (r *Runtime) ProfileForward(label string, forward func() error) error {
	return r.ops.ProfileForward(label, forward)
}
func (r *Runtime) StopProfile() (device.Profile, error) { return r.ops.StopProfile() }

// CopyDevice enqueues copies, in order, on the work stream, where the
// next forward reads what they wrote (speculative decoding's KV
// compaction, kvcache.Pool.MoveSlots). It does not wait.
func (r *Runtime) CopyDevice(copies []kvcache.DeviceCopy) error {
	return r.dev.Do(func() error {
		for _, c := range copies {
			if err := r.dev.CopyDtoDAsync(cuda.DevicePtr(c.Dst), cuda.DevicePtr(c.Src), c.Bytes, r.attn.Stream); err != nil {
				return err
			}
		}
		return nil
	})
}

// ActivationPeak is device.ForwardMemory (cuda.ModelOps.ActivationPeak).
func (r *Runtime) ActivationPeak(forward func() error) (int64, error) {
	return r.ops.ActivationPeak(forward)
}

// MemInfo is the GPU's free and total memory in bytes. Blocks the
// caching allocator holds free for reuse count as free: what a
// measurement or a freed buffer left there serves any later allocation
// (Alloc gives the cache back to the device when the device runs short).
func (r *Runtime) MemInfo() (free, total int64, err error) {
	f, t, err := r.dev.MemInfo()
	return int64(f) + r.dev.Mem.Stats().Cached, int64(t), err
}

// Close releases everything Open opened, in reverse. A KV pool allocated
// from KVMemory must be freed first.
func (r *Runtime) Close() error {
	var errs []error
	if r.ops != nil {
		errs = append(errs, r.ops.Close())
	}
	if r.lt != nil {
		errs = append(errs, r.lt.Close())
	}
	if r.attn != nil {
		errs = append(errs, r.attn.Close())
	}
	if r.kernels != nil {
		errs = append(errs, r.kernels.Unload())
	}
	errs = append(errs, r.dev.Close())
	return errors.Join(errs...)
}
