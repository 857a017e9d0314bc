package bench

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/device/nccl"
	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

// AllReduceOptions configure an all-reduce sweep.
type AllReduceOptions struct {
	// Backend is "nccl" (GPUs 0..Ranks-1 of this machine, one rank each)
	// or "local" (in-process CPU ranks: the communicator the CPU tensor
	// parallelism tests use).
	Backend            string
	Ranks              int
	MinBytes, MaxBytes int64 // sizes double from MinBytes to MaxBytes
	DType              tensor.DType
	Warmup, Iters      int
}

// AllReduceResult is one size of the sweep. Bus bandwidth is nccl-tests'
// figure: the algorithm bandwidth (bytes / time) times 2(n-1)/n, what each
// link carries in a ring, so it is comparable across rank counts.
type AllReduceResult struct {
	Bytes   int64         `json:"bytes"`
	Count   int           `json:"count"`
	Time    time.Duration `json:"time_ns"`
	AlgBW   float64       `json:"alg_bw_gbs"`
	BusBW   float64       `json:"bus_bw_gbs"`
	Backend string        `json:"backend"`
	Ranks   int           `json:"ranks"`
}

// arRank is one rank of the sweep: its communicator, its buffer's first
// n elements, and a wait for its queued work.
type arRank struct {
	comm parallel.Communicator
	buf  func(n int) parallel.Buffer
	sync func() error
	// on runs fn where the rank issues its work (a GPU's device thread,
	// so each collective is a direct call, not a hand-over).
	on func(fn func() error) error
}

// AllReduceSweep measures an in-place all-reduce sum of every size, each
// the mean of Iters back-to-back collectives after Warmup, and calls emit
// per size. Header says what runs (the NCCL version and GPUs).
func AllReduceSweep(o AllReduceOptions, header io.Writer, emit func(AllReduceResult)) error {
	if o.Ranks < 1 || o.MinBytes < 1 || o.MaxBytes < o.MinBytes || o.Iters < 1 || o.Warmup < 0 {
		return fmt.Errorf("all-reduce sweep: need ranks >= 1, 1 <= min <= max bytes, iters >= 1, warmup >= 0")
	}
	size, err := o.DType.RowBytes(1)
	if err != nil || (o.DType != tensor.F32 && o.DType != tensor.BF16) {
		return fmt.Errorf("all-reduce sweep: dtype %v; use float32 or bfloat16", o.DType)
	}
	maxCount := int(o.MaxBytes) / size
	var ranks []arRank
	switch o.Backend {
	case "local":
		comms, err := parallel.NewLocal(o.Ranks)
		if err != nil {
			return err
		}
		for _, c := range comms {
			f32 := make([]float32, maxCount)
			bf := make([]uint16, maxCount)
			ranks = append(ranks, arRank{comm: c, sync: func() error { return nil }, on: func(fn func() error) error { return fn() }, buf: func(n int) parallel.Buffer {
				if o.DType == tensor.BF16 {
					return parallel.HostBF16(bf[:n])
				}
				return parallel.HostF32(f32[:n])
			}})
		}
		fmt.Fprintf(header, "in-process CPU ranks: %d\n", o.Ranks)
	case "nccl":
		l, err := nccl.Open()
		if err != nil {
			return err
		}
		if err := cuda.DriverAvailable(); err != nil {
			return err
		}
		g, err := nccl.OpenGroup(l, o.Ranks)
		if err != nil {
			return err
		}
		defer g.Close()
		fmt.Fprintf(header, "NCCL %s (%s), NCCL_NVLS_ENABLE=%s\n", l.VersionString(), l.Path, nvls())
		for r, d := range g.Devices {
			fmt.Fprintf(header, "rank %d: %s\n", r, d.Info)
			ptr, err := d.Malloc(int(o.MaxBytes))
			if err != nil {
				return fmt.Errorf("GPU %d: %d bytes: %w", r, o.MaxBytes, err)
			}
			if err := d.MemsetAsync(ptr, 0, int(o.MaxBytes), d.Stream); err != nil {
				return err
			}
			c := g.Comms[r]
			ranks = append(ranks, arRank{comm: c, sync: func() error { return d.StreamSync(c.Stream) }, on: d.Do,
				buf: func(n int) parallel.Buffer { return parallel.DeviceBuffer(uintptr(ptr), o.DType, n) }})
		}
	default:
		return fmt.Errorf("all-reduce backend %q: use nccl or local", o.Backend)
	}
	each := func(iters, n int) error {
		return parallel.Each(len(ranks), func(i int) error {
			r := ranks[i]
			b := r.buf(n)
			return r.on(func() error {
				for range iters {
					if err := r.comm.AllReduceSum(b); err != nil {
						return err
					}
				}
				return r.sync()
			})
		})
	}
	for bytes := o.MinBytes; bytes <= o.MaxBytes; bytes *= 2 {
		n := int(bytes) / size
		if n == 0 {
			continue
		}
		if err := each(o.Warmup, n); err != nil {
			return err
		}
		start := time.Now()
		if err := each(o.Iters, n); err != nil {
			return err
		}
		per := time.Since(start) / time.Duration(o.Iters)
		alg := float64(n*size) / per.Seconds() / 1e9
		emit(AllReduceResult{Bytes: int64(n * size), Count: n, Time: per, AlgBW: alg,
			BusBW: alg * 2 * float64(o.Ranks-1) / float64(o.Ranks), Backend: o.Backend, Ranks: o.Ranks})
	}
	return nil
}

// nvls is NCCL_NVLS_ENABLE as NCCL will read it.
func nvls() string {
	v, ok := os.LookupEnv("NCCL_NVLS_ENABLE")
	if !ok {
		return "(unset)"
	}
	return v
}
