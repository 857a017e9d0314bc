package par

import (
	"sync/atomic"
	"testing"
)

// TestForCoversOnce: every index of [0, n) is visited exactly once, for
// sizes below, at and above one chunk.
func TestForCoversOnce(t *testing.T) {
	for _, n := range []int{0, 1, 7, 64, 1000} {
		seen := make([]atomic.Int32, n)
		For(n, 8, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				seen[i].Add(1)
			}
		})
		for i := range seen {
			if c := seen[i].Load(); c != 1 {
				t.Fatalf("n %d: index %d visited %d times", n, i, c)
			}
		}
	}
}
