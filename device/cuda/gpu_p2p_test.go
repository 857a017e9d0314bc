package cuda

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// TestGPUP2PAllReduce: the peer-memory all-reduce of GPUs 0 and 1
// (--enable-custom-all-reduce) leaves on both ranks the float32 sum of the
// two ranks' values in rank order, as the host computes it, to the bit:
// F32 and BF16, from one element to the whole staging, 40 calls in a row
// (the staging halves and the epochs alternate), then a CUDA graph of
// three all-reduces on each GPU replayed with new inputs each time.
func TestGPUP2PAllReduce(t *testing.T) {
	dev0, k0 := needKernels(t)
	if n, err := DeviceCount(); err != nil || n < 2 {
		t.Skipf("the peer all-reduce needs 2 GPUs: %d visible (%v)", n, err)
	}
	dev1, err := Open(1)
	if err != nil {
		t.Fatal(err)
	}
	defer dev1.Close()
	dir, err := os.MkdirTemp("", "gosling-p2p-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	k1, err := LoadKernels(dev1, gpu.nv, &KernelCache{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer k1.Unload()
	const capBytes = 1 << 20
	ranks, err := NewP2PGroup([]*Device{dev0, dev1}, []*Kernels{k0, k1}, capBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range ranks {
			r.Close()
		}
	}()
	devs := []*Device{dev0, dev1}
	rng := rand.New(rand.NewPCG(7, 8))
	// wait syncs both streams, failing instead of hanging when a barrier
	// never completes.
	wait := func() {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- errors.Join(dev0.StreamSync(dev0.Stream), dev1.StreamSync(dev1.Stream)) }()
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
	for _, dt := range []DType{F32, BF16} {
		for _, n := range []int{1, 7, 4096, 5 * 4096, 64 * 4096, capBytes / ElemSize(dt)} {
			xs := []DevicePtr{alloc(t, dev0, n*ElemSize(dt)), alloc(t, dev1, n*ElemSize(dt))}
			for call := range 40 {
				in := [][]float32{randn(rng, n, 1), randn(rng, n, 1)}
				for r := range 2 {
					in[r] = roundTo(in[r], dt)
					copyIn(t, devs[r], xs[r], in[r], dt)
				}
				for r := range 2 {
					if err := ranks[r].AllReduceSum(devs[r].Stream, xs[r], n, dt); err != nil {
						t.Fatal(err)
					}
				}
				wait()
				want := roundTo(sumRanks(in), dt)
				for r := range 2 {
					got := download(t, devs[r], xs[r], n, dt)
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%v, %d elements, call %d, rank %d: [%d] = %v, want %v", dt, n, call, r, i, got[i], want[i])
						}
					}
				}
			}
		}
	}

	const n = 3 * 4096
	xs := make([][]DevicePtr, 2)
	graphs := make([]*Graph, 2)
	for r := range 2 {
		for range 3 {
			xs[r] = append(xs[r], alloc(t, devs[r], n*4))
		}
		if err := devs[r].StreamSync(devs[r].Stream); err != nil {
			t.Fatal(err)
		}
		graphs[r], err = devs[r].Capture(devs[r].Stream, func() error {
			for _, x := range xs[r] {
				if err := ranks[r].AllReduceSum(devs[r].Stream, x, n, F32); err != nil {
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
	for replay := range 20 {
		ins := make([][][]float32, 3)
		for j := range 3 {
			ins[j] = [][]float32{randn(rng, n, 1), randn(rng, n, 1)}
			for r := range 2 {
				copyIn(t, devs[r], xs[r][j], ins[j][r], F32)
			}
		}
		for r := range 2 {
			if err := graphs[r].Launch(devs[r].Stream); err != nil {
				t.Fatal(err)
			}
		}
		wait()
		for j := range 3 {
			want := sumRanks(ins[j])
			for r := range 2 {
				got := download(t, devs[r], xs[r][j], n, F32)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("graph replay %d, all-reduce %d, rank %d: [%d] = %v, want %v", replay, j, r, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// sumRanks is the float32 sum of the ranks' values in rank order.
func sumRanks(in [][]float32) []float32 {
	out := make([]float32, len(in[0]))
	for _, v := range in {
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
