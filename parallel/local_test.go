package parallel_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/parallel"
	"github.com/gosling-ai/gosling/tensor"
)

// onAll runs fn on every rank's goroutine and returns their errors.
func onAll(comms []parallel.Communicator, fn func(c parallel.Communicator) error) []error {
	errs := make([]error, len(comms))
	parallel.Each(len(comms), func(r int) error {
		errs[r] = fn(comms[r])
		return nil
	})
	return errs
}

func TestLocalCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			comms, err := parallel.NewLocal(n)
			if err != nil {
				t.Fatal(err)
			}
			checkCollectives(t, comms)
		})
	}
}

// checkCollectives runs an all-gather, two all-reduces (f32, bf16) and a
// broadcast over comms, every rank on its own goroutine, and checks every
// rank's results.
func checkCollectives(t *testing.T, comms []parallel.Communicator) {
	t.Helper()
	n := len(comms)
	// Rank r holds r+1, 2(r+1), ... in f32, and the bf16 of 0.5(r+1).
	f32 := make([][]float32, n)
	bf := make([][]uint16, n)
	gathered := make([][]float32, n)
	bcast := make([][]float32, n)
	for r := range n {
		f32[r] = []float32{float32(r + 1), float32(2 * (r + 1)), float32(3 * (r + 1))}
		bf[r] = []uint16{tensor.F32ToBF16(0.5 * float32(r+1)), tensor.F32ToBF16(-float32(r))}
		gathered[r] = make([]float32, 2*n)
		bcast[r] = []float32{float32(r), float32(r)}
	}
	for _, err := range onAll(comms, func(c parallel.Communicator) error {
		r := c.Rank()
		// Gather before the reduce changes f32.
		if err := c.AllGather(parallel.HostF32(gathered[r]), parallel.HostF32(f32[r][:2])); err != nil {
			return err
		}
		if err := c.AllReduceSum(parallel.HostF32(f32[r])); err != nil {
			return err
		}
		if err := c.AllReduceSum(parallel.HostBF16(bf[r])); err != nil {
			return err
		}
		return c.Broadcast(parallel.HostF32(bcast[r]), n-1)
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	s := float32(n * (n + 1) / 2) // 1 + ... + n
	for r := range n {
		if want := []float32{s, 2 * s, 3 * s}; !slices.Equal(f32[r], want) {
			t.Errorf("rank %d all-reduce f32 %v, want %v", r, f32[r], want)
		}
		if got, want := tensor.BF16ToF32(bf[r][0]), 0.5*s; got != want {
			t.Errorf("rank %d all-reduce bf16 %v, want %v", r, got, want)
		}
		if got, want := tensor.BF16ToF32(bf[r][1]), -float32(n*(n-1)/2); got != want {
			t.Errorf("rank %d all-reduce bf16 %v, want %v", r, got, want)
		}
		var want []float32
		for q := range n {
			want = append(want, float32(q+1), float32(2*(q+1)))
		}
		if !slices.Equal(gathered[r], want) {
			t.Errorf("rank %d all-gather %v, want %v", r, gathered[r], want)
		}
		if want := []float32{float32(n - 1), float32(n - 1)}; !slices.Equal(bcast[r], want) {
			t.Errorf("rank %d broadcast %v, want %v", r, bcast[r], want)
		}
	}
}

// TestLocalMismatch: ranks that call different collectives, or the same
// with other lengths, all get an error naming both.
func TestLocalMismatch(t *testing.T) {
	comms, _ := parallel.NewLocal(2)
	errs := onAll(comms, func(c parallel.Communicator) error {
		if c.Rank() == 0 {
			return c.AllReduceSum(parallel.HostF32(make([]float32, 4)))
		}
		return c.AllReduceSum(parallel.HostF32(make([]float32, 5)))
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 0 called all-reduce of 4 F32 (root 0), rank 1 all-reduce of 5 F32") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestLocalLeave: a rank that leaves fails the collective the others
// wait in, instead of hanging them.
func TestLocalLeave(t *testing.T) {
	comms, _ := parallel.NewLocal(3)
	done := make(chan error, 2)
	for _, c := range comms[1:] {
		go func() { done <- c.AllReduceSum(parallel.HostF32(make([]float32, 8))) }()
	}
	comms[0].Close()
	for range 2 {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "rank 0 left the group") {
				t.Errorf("err = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a collective still waits on a rank that left")
		}
	}
}
