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
	// Custom (nccl only) also times the peer-memory kernels of the
	// custom all-reduce (cuda.P2PRank) at every size up to
	// CustomMaxBytes: one-shot and two-shot forced, beside NCCL on the
	// same buffers and streams, and names the path the plan
	// (cuda.ARPlanFromEnv: the defaults and GOSLING_CUSTOM_AR_*) picks.
	Custom bool
	// Graph (nccl only) times CUDA graphs of Iters back-to-back
	// all-reduces, replayed, as decode steps run them, instead of
	// eager launches (whose host-side launch cost a graph does not pay).
	Graph bool
}

// CustomMaxBytes bounds the sizes --custom times (each GPU holds receive
// memory of 2·ranks times the largest).
const CustomMaxBytes = 64 << 20

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
	// With Custom: the peer-memory paths at this size (one-shot,
	// two-shot), and the path the plan picks (nccl, one-shot, two-shot).
	Paths []AllReducePath `json:"custom,omitempty"`
	Plan  string          `json:"plan,omitempty"`
}

// AllReducePath is one path of the custom all-reduce at one size, its
// bandwidths reckoned as AllReduceResult's.
type AllReducePath struct {
	Algo  string        `json:"algo"`
	Time  time.Duration `json:"time_ns"`
	AlgBW float64       `json:"alg_bw_gbs"`
	BusBW float64       `json:"bus_bw_gbs"`
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
	// custom runs one all-reduce of the first n elements by a path of
	// the peer-memory kernels (Custom only).
	custom func(n int, algo cuda.ARAlgo) error
	// capture records what fn enqueues on the rank's stream as a graph,
	// and launch replays one there (GPUs only).
	capture func(fn func() error) (*cuda.Graph, error)
	launch  func(g *cuda.Graph) error
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
	if o.Custom && o.Backend != "nccl" {
		return fmt.Errorf("all-reduce sweep: the custom all-reduce runs on GPUs (backend nccl), not %s", o.Backend)
	}
	if o.Graph && o.Backend != "nccl" {
		return fmt.Errorf("all-reduce sweep: CUDA graphs are for GPUs (backend nccl), not %s", o.Backend)
	}
	var ranks []arRank
	var plan, measure cuda.ARPlan
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
				buf:     func(n int) parallel.Buffer { return parallel.DeviceBuffer(uintptr(ptr), o.DType, n) },
				capture: func(fn func() error) (*cuda.Graph, error) { return d.Capture(c.Stream, fn) },
				launch:  func(g *cuda.Graph) error { return g.Launch(c.Stream) }})
			if err := d.StreamSync(d.Stream); err != nil { // the memset, before c.Stream's work
				return err
			}
		}
		if o.Graph {
			// What NCCL makes at its first collectives, before a capture.
			if err := parallel.Each(len(g.Comms), func(r int) error { return g.Comms[r].Warm() }); err != nil {
				return err
			}
		}
		if o.Custom {
			if plan, err = cuda.ARPlanFromEnv(o.Ranks, os.LookupEnv); err != nil {
				return err
			}
			// Receive areas with room for both paths at every size the
			// sweep times, launched as the plan launches (its Blocks).
			top := int(min(o.MaxBytes, CustomMaxBytes))
			measure = cuda.ARPlan{Ranks: o.Ranks, MaxBytes: top, TwoShotBytes: top, Blocks: plan.Blocks}
			p2p, err := customRanks(g.Devices, measure)
			if err != nil {
				return err
			}
			defer p2p.close()
			for r := range ranks {
				// On the NCCL stream, where the sweep syncs.
				pr, s, ptr := p2p.ranks[r], g.Comms[r].Stream, cuda.DevicePtr(ranks[r].buf(0).Dev)
				ranks[r].custom = func(n int, algo cuda.ARAlgo) error { return pr.AllReduceSumBy(s, ptr, n, o.DType, algo) }
			}
			fmt.Fprintf(header, "custom all-reduce: plan %s\n", plan)
		}
	default:
		return fmt.Errorf("all-reduce backend %q: use nccl or local", o.Backend)
	}
	// each runs iters all-reduces of n elements on every rank, through
	// the communicator (algo ARNCCL) or a path of the peer kernels.
	// enqueue issues iters all-reduces of n elements on rank i, through
	// the communicator (algo ARNCCL) or a path of the peer kernels.
	enqueue := func(i, iters, n int, algo cuda.ARAlgo) error {
		r := ranks[i]
		for range iters {
			var err error
			if algo == cuda.ARNCCL {
				err = r.comm.AllReduceSum(r.buf(n))
			} else {
				err = r.custom(n, algo)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	each := func(iters, n int, algo cuda.ARAlgo) error {
		return parallel.Each(len(ranks), func(i int) error {
			return ranks[i].on(func() error {
				if err := enqueue(i, iters, n, algo); err != nil {
					return err
				}
				return ranks[i].sync()
			})
		})
	}
	// timed is the mean time of one all-reduce, after the warmup: eager
	// launches, or a graph of Iters of them replayed (Graph).
	timed := func(n int, algo cuda.ARAlgo) (time.Duration, error) {
		if err := each(o.Warmup, n, algo); err != nil {
			return 0, err
		}
		if !o.Graph {
			start := time.Now()
			if err := each(o.Iters, n, algo); err != nil {
				return 0, err
			}
			return time.Since(start) / time.Duration(o.Iters), nil
		}
		graphs := make([]*cuda.Graph, len(ranks))
		defer func() {
			for _, g := range graphs {
				if g != nil {
					g.Destroy()
				}
			}
		}()
		err := parallel.Each(len(ranks), func(i int) error {
			var err error
			graphs[i], err = ranks[i].capture(func() error { return enqueue(i, o.Iters, n, algo) })
			return err
		})
		if err != nil {
			return 0, err
		}
		replay := func() error {
			return parallel.Each(len(ranks), func(i int) error {
				if err := ranks[i].launch(graphs[i]); err != nil {
					return err
				}
				return ranks[i].sync()
			})
		}
		if err := replay(); err != nil { // the graphs' first launch uploads them
			return 0, err
		}
		start := time.Now()
		if err := replay(); err != nil {
			return 0, err
		}
		return time.Since(start) / time.Duration(o.Iters), nil
	}
	bw := func(n int, per time.Duration) (alg, bus float64) {
		alg = float64(n*size) / per.Seconds() / 1e9
		return alg, alg * 2 * float64(o.Ranks-1) / float64(o.Ranks)
	}
	for bytes := o.MinBytes; bytes <= o.MaxBytes; bytes *= 2 {
		n := int(bytes) / size
		if n == 0 {
			continue
		}
		per, err := timed(n, cuda.ARNCCL)
		if err != nil {
			return err
		}
		alg, bus := bw(n, per)
		res := AllReduceResult{Bytes: int64(n * size), Count: n, Time: per, AlgBW: alg, BusBW: bus, Backend: o.Backend, Ranks: o.Ranks}
		if o.Custom && n*size <= measure.MaxBytes {
			res.Plan = plan.Algo(n * size).String()
			for _, algo := range []cuda.ARAlgo{cuda.AROneShot, cuda.ARTwoShot} {
				per, err := timed(n, algo)
				if err != nil {
					return err
				}
				alg, bus := bw(n, per)
				res.Paths = append(res.Paths, AllReducePath{Algo: algo.String(), Time: per, AlgBW: alg, BusBW: bus})
			}
		}
		emit(res)
	}
	return nil
}

// p2pGroup is the peer-memory all-reduce over a sweep's GPUs, with the
// kernels it launches.
type p2pGroup struct {
	ranks []*cuda.P2PRank
	ks    []*cuda.Kernels
}

// customRanks compiles (or loads from the kernel cache) the kernels on
// every device and makes the peer group for plan.
func customRanks(devs []*cuda.Device, plan cuda.ARPlan) (*p2pGroup, error) {
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		return nil, err
	}
	g := &p2pGroup{}
	for _, d := range devs {
		k, err := cuda.LoadKernels(d, nv, cuda.NewDefaultKernelCache())
		if err != nil {
			g.close()
			return nil, err
		}
		g.ks = append(g.ks, k)
	}
	if g.ranks, err = cuda.NewP2PGroup(devs, g.ks, plan); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

// close frees the group (its streams idle: the sweep syncs after each
// size).
func (g *p2pGroup) close() {
	for _, r := range g.ranks {
		r.Close()
	}
	for _, k := range g.ks {
		k.Unload()
	}
}

// nvls is NCCL_NVLS_ENABLE as NCCL will read it.
func nvls() string {
	v, ok := os.LookupEnv("NCCL_NVLS_ENABLE")
	if !ok {
		return "(unset)"
	}
	return v
}
