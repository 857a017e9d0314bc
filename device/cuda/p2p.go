package cuda

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// The all-reduce over peer memory (kernels/allreduce.cu) for the GPUs of
// one process: what vLLM and SGLang call a custom all-reduce. At decode
// sizes (a few rows of the hidden state) NCCL's latency, not the link's
// bandwidth, is what an all-reduce costs; here each rank pushes its x
// straight into its peers' receive memory over NVLink or PCIe in one
// kernel, meets them at a barrier of flags in each other's memory, and
// sums what it received. The ranks are goroutines of one process, so a
// peer's buffer is a plain device address once peer access is on
// (unified addressing); no IPC handles are needed. ARPlan (p2p_plan.go)
// says which sizes go one-shot, two-shot or to NCCL.

// P2PRank is one rank's part of a peer-memory all-reduce group.
type P2PRank struct {
	dev        *Device
	k          *Kernels
	rank, size int
	plan       ARPlan
	area       int // bytes of one receive area (ARPlan.areaBytes)
	// On this GPU: the receive memory, the flag rows, the per-block
	// (epoch, calls), and the arrays of every rank's receive memory and
	// flag rows addresses.
	buf, sig, counters, bufs, sigs DevicePtr
	// stop is host memory the kernel polls while it waits (Stop).
	stop    []byte
	stopped atomic.Bool
}

// NewP2PGroup enables peer access between every pair of devs (rank r on
// devs[r], launching with ks[r]) and allocates each rank's receive memory
// and flags for plan (plan.Ranks must be len(devs)). It fails, naming the
// pair, when two GPUs cannot reach each other's memory.
func NewP2PGroup(devs []*Device, ks []*Kernels, plan ARPlan) ([]*P2PRank, error) {
	n := len(devs)
	if plan.Ranks != n || len(ks) != n {
		return nil, fmt.Errorf("cuda: a peer all-reduce plan of %d ranks for %d GPUs and %d Kernels", plan.Ranks, n, len(ks))
	}
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	for i, a := range devs {
		for j, b := range devs {
			if i == j {
				continue
			}
			err := a.Do(func() error {
				var can int32
				if err := check("cuDeviceCanAccessPeer", a.d.cuDeviceCanAccessPeer(&can, a.dev, b.dev)); err != nil {
					return err
				}
				if can == 0 {
					return fmt.Errorf("GPU %d cannot address GPU %d's memory (no peer path between them)", a.Info.Ordinal, b.Info.Ordinal)
				}
				if r := a.d.cuCtxEnablePeerAccess(b.ctx, 0); r != resultSuccess && r != resultPeerAlreadyEnabled {
					return check("cuCtxEnablePeerAccess", r)
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("cuda: peer all-reduce: %w", err)
			}
		}
	}
	ranks := make([]*P2PRank, n)
	fail := func(err error) ([]*P2PRank, error) {
		for _, r := range ranks {
			if r != nil {
				r.Close()
			}
		}
		return nil, fmt.Errorf("cuda: peer all-reduce: %w", err)
	}
	for r, dev := range devs {
		p := &P2PRank{dev: dev, k: ks[r], rank: r, size: n, plan: plan, area: plan.areaBytes()}
		ranks[r] = p
		var err error
		for _, a := range []struct {
			ptr   *DevicePtr
			bytes int
		}{{&p.buf, plan.receiveBytes()}, {&p.sig, plan.Blocks * P2PMaxRanks * 4}, {&p.counters, plan.Blocks * 2 * 4},
			{&p.bufs, n * 8}, {&p.sigs, n * 8}} {
			if *a.ptr, err = dev.Malloc(a.bytes); err != nil {
				return fail(err)
			}
			if err = dev.MemsetAsync(*a.ptr, 0, a.bytes, dev.Stream); err != nil {
				return fail(err)
			}
		}
		if p.stop, err = dev.HostAlloc(4); err != nil {
			return fail(err)
		}
		clear(p.stop)
		// The memsets ran on the work stream; the copies below do not.
		if err := dev.StreamSync(dev.Stream); err != nil {
			return fail(err)
		}
	}
	bufs, sigs := make([]uint64, n), make([]uint64, n)
	for r, p := range ranks {
		bufs[r], sigs[r] = uint64(p.buf), uint64(p.sig)
	}
	for _, p := range ranks {
		if err := errors.Join(CopyHtoD(p.dev, p.bufs, bufs), CopyHtoD(p.dev, p.sigs, sigs)); err != nil {
			return fail(err)
		}
	}
	return ranks, nil
}

// Plan is the group's plan.
func (p *P2PRank) Plan() ARPlan { return p.plan }

// Fits reports whether an all-reduce of bytes runs on the peer kernels
// (the plan's one-shot or two-shot) rather than NCCL.
func (p *P2PRank) Fits(bytes int) bool { return p.plan.Algo(bytes) != ARNCCL }

// AllReduceSum sums n elements of dt (F32 or BF16) at x over the ranks,
// in place, on stream s, by the plan's path for its size (Fits must
// hold): every rank must call it with the same n and dt, in the same
// order as its other collectives. The sum runs in rank order in float32
// and is rounded once, so every rank gets the same bits (and, with two
// ranks, NCCL's). It is a kernel launch like any other: recorded,
// captured and replayed in CUDA graphs.
func (p *P2PRank) AllReduceSum(s Stream, x DevicePtr, n int, dt DType) error {
	return p.AllReduceSumBy(s, x, n, dt, p.plan.Algo(n*ElemSize(dt)))
}

// AllReduceSumBy is AllReduceSum by the path algo, whatever the plan
// would choose (tests and the all-reduce bench measure both paths);
// every rank must pass the same algo. It fails where the receive areas
// the plan sized have no room for algo at this size.
func (p *P2PRank) AllReduceSumBy(s Stream, x DevicePtr, n int, dt DType, algo ARAlgo) error {
	if dt != F32 && dt != BF16 {
		return fmt.Errorf("cuda: peer all-reduce of %v: F32 or BF16 only", dt)
	}
	es := ElemSize(dt)
	if x%DevicePtr(es) != 0 {
		return fmt.Errorf("cuda: peer all-reduce at %#x, not aligned to its %v elements", uint64(x), dt)
	}
	bytes := n * es
	if algo != AROneShot && algo != ARTwoShot {
		return fmt.Errorf("cuda: peer all-reduce of %d bytes %v: the caller's NCCL communicator runs it", bytes, algo)
	}
	g, _, need := p.plan.grid(bytes, algo)
	if need*p2pVec > p.area {
		return fmt.Errorf("cuda: peer all-reduce of %d bytes %v: past the receive areas of %s", bytes, algo, p.plan)
	}
	if p.stopped.Load() {
		return errors.New("cuda: peer all-reduce: the group was stopped")
	}
	if n == 0 {
		return nil
	}
	a := p2pArgs{X: x, Bufs: p.bufs, Sigs: p.sigs, Counters: p.counters, StopFlag: DevicePtr(uintptr(unsafe.Pointer(&p.stop[0]))),
		Rank: p.rank, Nranks: p.size, N: n, AreaBytes: p.area}
	cfg := LaunchConfig{Grid: D1(g), Block: D1(p2pThreads)}
	if algo == ARTwoShot {
		return p.k.launchP2PTwoShot(s, cfg, dt, a)
	}
	return p.k.launchP2POneShot(s, cfg, dt, a)
}

// Stop makes this rank's kernels waiting at a barrier give up, and every
// later call fail: what a failed group does so that no rank waits for a
// peer that will never arrive. Any goroutine may call it.
func (p *P2PRank) Stop() {
	p.stopped.Store(true)
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&p.stop[0])), 1)
}

// Close frees the rank's memory (its stream idle).
func (p *P2PRank) Close() error {
	var errs []error
	for _, ptr := range []DevicePtr{p.buf, p.sig, p.counters, p.bufs, p.sigs} {
		if ptr != 0 {
			errs = append(errs, p.dev.Free(ptr))
		}
	}
	if p.stop != nil {
		errs = append(errs, p.dev.HostFree(p.stop))
	}
	return errors.Join(errs...)
}
