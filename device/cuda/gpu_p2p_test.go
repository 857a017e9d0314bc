package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// TestGPUP2PAllReduce: the peer-memory all-reduce (the custom all-reduce)
// of every visible GPU (2 to 8, a rank each) leaves on every rank the
// float32 sum of the ranks' values in rank order, rounded once, as the
// host computes it, to the bit: one-shot and two-shot, F32 and BF16, at element counts that
// are not whole 16-byte vectors, at x not aligned to 16 bytes, from one
// element to the plan's largest (grids of 1 to 32 blocks, one vector a
// thread and looping); then bursts of back-to-back calls of random sizes
// and paths with no host sync between them (the grid, the per-block
// epochs and the receive halves change from call to call), then a CUDA
// graph of three all-reduces on each GPU replayed with new inputs.
func TestGPUP2PAllReduce(t *testing.T) {
	dev0, k0 := needKernels(t)
	count, err := DeviceCount()
	if err != nil || count < 2 {
		t.Skipf("the peer all-reduce needs 2 GPUs: %d visible (%v)", count, err)
	}
	nr := min(count, P2PMaxRanks) // every visible GPU a rank
	devs, ks := []*Device{dev0}, []*Kernels{k0}
	dir, err := os.MkdirTemp("", "gosling-p2p-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for i := 1; i < nr; i++ {
		d, err := Open(i)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		k, err := LoadKernels(d, gpu.nv, &KernelCache{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Unload()
		devs, ks = append(devs, d), append(ks, k)
	}
	// Two-shot from 64 KiB so that the receive areas have room for both
	// paths at every size up to MaxBytes (AllReduceSumBy forces each).
	plan := ARPlan{Ranks: nr, MaxBytes: 1 << 20, TwoShotBytes: 64 << 10, Blocks: customARBlocks}
	ranks, err := NewP2PGroup(devs, ks, plan)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range ranks {
			r.Close()
		}
	}()
	t.Logf("%d ranks: %s", nr, plan)
	rng := rand.New(rand.NewPCG(7, 8))
	// wait syncs both streams, failing instead of hanging when a barrier
	// never completes.
	wait := func() {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			var errs []error
			for _, d := range devs {
				errs = append(errs, d.StreamSync(d.Stream))
			}
			done <- errors.Join(errs...)
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			for _, r := range ranks {
				r.Stop()
			}
			t.Fatal("the peer all-reduce did not complete in 30 s (a barrier waits forever)")
		}
	}
	// check compares every rank's result with the host's sum, bit for bit.
	check := func(what string, xs []DevicePtr, in [][]float32, dt DType) {
		t.Helper()
		want := roundTo(sumRanks(in), dt)
		for r := range nr {
			got := download(t, devs[r], xs[r], len(want), dt)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s, rank %d: [%d] = %v, want %v", what, r, i, got[i], want[i])
				}
			}
		}
	}
	// fill writes new random inputs of n elements to xs, returning them.
	fill := func(xs []DevicePtr, n int, dt DType) [][]float32 {
		in := make([][]float32, nr)
		for r := range nr {
			in[r] = roundTo(randn(rng, n, 1), dt)
			copyIn(t, devs[r], xs[r], in[r], dt)
		}
		return in
	}
	algos := []ARAlgo{AROneShot, ARTwoShot}

	for _, dt := range []DType{F32, BF16} {
		es := ElemSize(dt)
		most := plan.MaxBytes / es
		for _, n := range []int{1, 3, 7, 4095, 4096, 4097, 5*4096 + 3, 64*4096 - 1, most/2 + 5, most - 1, most} {
			for _, off := range []int{0, es} { // x 16-byte aligned, and not
				if off != 0 && n != 7 && n != 4097 && n != most-1 {
					continue // x misaligned at a few sizes only
				}
				xs := make([]DevicePtr, nr)
				for r := range nr {
					xs[r] = alloc(t, devs[r], n*es+off) + DevicePtr(off)
				}
				for call := range 6 {
					algo := algos[call%2]
					in := fill(xs, n, dt)
					for r := range nr {
						if err := ranks[r].AllReduceSumBy(devs[r].Stream, xs[r], n, dt, algo); err != nil {
							t.Fatal(err)
						}
					}
					wait()
					check(fmt.Sprintf("%v %v, %d elements at +%d, call %d", dt, algo, n, off, call), xs, in, dt)
				}
			}
		}
	}

	// Bursts: calls queued back to back on both GPUs, each on its own
	// buffer, random sizes, dtypes and paths (the plan's or forced).
	for burst := range 8 {
		type call struct {
			n    int
			dt   DType
			algo ARAlgo
			xs   []DevicePtr
			in   [][]float32
		}
		calls := make([]call, 24)
		for i := range calls {
			c := &calls[i]
			c.dt = []DType{F32, BF16}[rng.IntN(2)]
			c.n = 1 + rng.IntN(plan.MaxBytes/ElemSize(c.dt))
			if rng.IntN(2) == 0 {
				c.n = 1 + rng.IntN(8192) // mostly small, where the grid changes most
			}
			c.algo = plan.Algo(c.n * ElemSize(c.dt))
			if rng.IntN(3) == 0 {
				c.algo = algos[rng.IntN(2)]
			}
			for r := range nr {
				c.xs = append(c.xs, alloc(t, devs[r], c.n*ElemSize(c.dt)))
			}
			c.in = fill(c.xs, c.n, c.dt)
		}
		// Launches are asynchronous: rank 0's first kernel waits at its
		// barrier while the other ranks' calls are queued.
		for r := range nr {
			for _, c := range calls {
				if err := ranks[r].AllReduceSumBy(devs[r].Stream, c.xs[r], c.n, c.dt, c.algo); err != nil {
					t.Fatal(err)
				}
			}
		}
		wait()
		for i, c := range calls {
			check(fmt.Sprintf("burst %d, call %d: %v %v, %d elements", burst, i, c.dt, c.algo, c.n), c.xs, c.in, c.dt)
		}
	}

	// A graph of three all-reduces per GPU: one-shot, two-shot, and the
	// plan's choice, of different sizes.
	sizes := []int{3 * 4096, 5*4096 + 1, 64 * 4096}
	graphAlgos := []ARAlgo{AROneShot, ARTwoShot, plan.Algo(sizes[2] * 4)}
	xs := make([][]DevicePtr, nr)
	graphs := make([]*Graph, nr)
	for r := range nr {
		for _, n := range sizes {
			xs[r] = append(xs[r], alloc(t, devs[r], n*4))
		}
		if err := devs[r].StreamSync(devs[r].Stream); err != nil {
			t.Fatal(err)
		}
		graphs[r], err = devs[r].Capture(devs[r].Stream, func() error {
			for j, x := range xs[r] {
				if err := ranks[r].AllReduceSumBy(devs[r].Stream, x, sizes[j], F32, graphAlgos[j]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer graphs[r].Destroy()
	}
	// column j of xs: all-reduce j's buffer on every rank.
	column := func(j int) []DevicePtr {
		out := make([]DevicePtr, nr)
		for r := range nr {
			out[r] = xs[r][j]
		}
		return out
	}
	for replay := range 20 {
		ins := make([][][]float32, 3)
		for j := range 3 {
			ins[j] = fill(column(j), sizes[j], F32)
		}
		for r := range nr {
			if err := graphs[r].Launch(devs[r].Stream); err != nil {
				t.Fatal(err)
			}
		}
		wait()
		for j := range 3 {
			check(fmt.Sprintf("graph replay %d, all-reduce %d (%v)", replay, j, graphAlgos[j]), column(j), ins[j], F32)
		}
	}

	// Sizes the plan sends to NCCL are refused, not run.
	if err := ranks[0].AllReduceSum(dev0.Stream, xs[0][0], plan.MaxBytes/4+1, F32); err == nil {
		t.Error("an all-reduce past MaxBytes ran on the peer kernels")
	}
}

// sumRanks is the float32 sum of the ranks' values in rank order, from
// rank 0's value (not from +0: the kernels keep the sign of -0 + -0).
func sumRanks(in [][]float32) []float32 {
	out := append([]float32(nil), in[0]...)
	for _, v := range in[1:] {
		for i := range out {
			out[i] += v[i]
		}
	}
	return out
}

// roundTo rounds values to dt's precision (kept as float32).
func roundTo(vals []float32, dt DType) []float32 {
	if dt == F32 {
		return vals
	}
	return decode16(encode16(vals, dt), dt)
}

// copyIn writes vals in dt to p, after the stream's earlier work.
func copyIn(t *testing.T, dev *Device, p DevicePtr, vals []float32, dt DType) {
	t.Helper()
	if err := dev.StreamSync(dev.Stream); err != nil {
		t.Fatal(err)
	}
	var err error
	if dt == F32 {
		err = CopyHtoD(dev, p, vals)
	} else {
		err = CopyHtoD(dev, p, encode16(vals, dt))
	}
	if err != nil {
		t.Fatal(err)
	}
}
