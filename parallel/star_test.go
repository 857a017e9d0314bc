package parallel_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/internal/testnet"
	"github.com/gosling-ai/gosling/parallel"
)

// starGroup joins n ranks as n nodes over real TCP links on this host:
// the rendezvous at a free address, then the star communicator.
func starGroup(t *testing.T, n int) []parallel.Communicator {
	t.Helper()
	addr := testnet.FreeAddr(t)
	comms := make([]parallel.Communicator, n)
	err := parallel.Each(n, func(k int) error {
		if k == 0 {
			links, err := parallel.ServeLinks(addr, n, nil, 10*time.Second)
			if err != nil {
				return err
			}
			comms[0] = parallel.NewStarHub(links)
			return nil
		}
		up, _, err := parallel.JoinLink(addr, k, n, 10*time.Second)
		if err != nil {
			return err
		}
		comms[k] = parallel.NewStarRank(k, n, up)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// TestStarCollectives: ranks in separate "processes" (joined only by TCP)
// get what the in-process communicator gives, to the bit: the same
// checks, and random sums compared between the two.
func TestStarCollectives(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			checkCollectives(t, starGroup(t, n))

			star, local := starGroup(t, n), must(parallel.NewLocal(n))
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			vals := make([][]float32, n)
			for r := range vals {
				for range 1000 {
					vals[r] = append(vals[r], rng.Float32()*2e3-1e3)
				}
			}
			sums := func(comms []parallel.Communicator) [][]float32 {
				out := make([][]float32, n)
				for r := range out {
					out[r] = slices.Clone(vals[r])
				}
				for r, err := range onAll(comms, func(c parallel.Communicator) error {
					return c.AllReduceSum(parallel.HostF32(out[c.Rank()]))
				}) {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				return out
			}
			a, b := sums(star), sums(local)
			for r := range n {
				if !slices.Equal(a[r], b[r]) {
					t.Fatalf("rank %d: the star's sums differ from the in-process communicator's", r)
				}
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestStarFailures: a mismatch fails every rank naming both calls, and a
// rank that closes its link fails the collective the others wait in.
func TestStarFailures(t *testing.T) {
	comms := starGroup(t, 3)
	errs := onAll(comms, func(c parallel.Communicator) error {
		return c.AllReduceSum(parallel.HostF32(make([]float32, 4+c.Rank()/2)))
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 0 called all-reduce of 4 F32 (root 0), rank 2 all-reduce of 5 F32") {
			t.Errorf("mismatch, rank %d: %v", r, err)
		}
	}

	comms = starGroup(t, 3)
	done := make(chan error, 2)
	for _, c := range comms[:2] {
		go func() { done <- c.AllReduceSum(parallel.HostF32(make([]float32, 8))) }()
	}
	comms[2].Close()
	for range 2 {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "closed") {
				t.Errorf("after rank 2 left: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a collective still waits on a rank that left")
		}
	}
}
